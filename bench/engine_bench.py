"""Engine throughput: prompt processing and decode tokens/s, against peers in the same run.

With ``--model PATH`` (repeatable; ``tiny`` builds a small random Q4_0 llama): halter against
llama.cpp (``--llama-python``), transformers and vLLM (``--vllm-python``) on that GGUF file, each
measurement in a fresh child process: load s, prompt tok/s, decode tok/s at batch 1 and batch 8,
peak RSS (``bench/engine_peers.py``; ``--plot PNG`` draws the table). Without ``--model``:

CPU (always): a ~100M-parameter random llama GGUF (F16 on disk, run in fp32) built into a temp
dir; halter's engine and transformers' CPU ``generate`` on the same weights, greedy, medians of
``--repeats`` runs, ratio halter / transformers; then halter's decode step in its CPU modes on
the same weights and cache: eager, the static-shape step, the step traced (TorchScript), and the static step compiled with
``torch.compile`` (inductor; skipped with a message when it cannot compile here).
GPU figures: ``bench/gpu_bench.py`` (run by ``bench/gpu_check.sh``).

Run by hand:  python bench/engine_bench.py [--repeats 5] [--prompt 128] [--decode 32] [--threads N]
              [--n-ctx N] [--skip-hf] [--no-compile]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time

import torch

from halter import Model
from halter.engine import build_tiny_gguf


def with_mode(model: Model, mode: str, **kw) -> Model:
    """Another ``Model`` over the same weights and cache, decoding in ``mode``."""
    view = Model(model.path, model.config, model.net, model.rope, model.cache, model.n_batch,
                 decode="eager")
    view.set_decode(mode, **kw)
    return view


def decode_steps(model: Model, prompt: list[int], batch: int, n: int):
    """A function running ``n`` decode steps on rows ``0..batch-1`` from ``prompt``, then undoing them."""
    seqs = list(range(batch))
    model.cache.clear()
    for s in seqs:
        model.eval_prompt(prompt, s)

    def run() -> None:
        for _ in range(n):
            model.decode([[11]] * batch, seqs)
        for s in seqs:
            model.cache.seq_rm(s, len(prompt), None)
    return run


def bench_modes(model: Model, prompt: list[int], args: argparse.Namespace) -> None:
    """Decode tokens/s at batch 1 in the CPU modes, alternated, medians; ratio to eager."""
    modes = {"eager": with_mode(model, "eager"), "static": with_mode(model, "static"),
             "trace": with_mode(model, "trace")}
    t = time.perf_counter()
    try:
        if args.no_compile:
            raise RuntimeError("--no-compile")
        compiled = with_mode(model, "compile")
        decode_steps(compiled, prompt, 1, 1)()            # compiles (bucket 1)
        modes["compile (inductor)"] = compiled
        compile_s = time.perf_counter() - t
    except Exception as exc:                              # no compiler, unsupported op, ...
        compile_s = None
        print(f"\ntorch.compile (inductor) skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    runs = {name: decode_steps(m, prompt, 1, args.decode) for name, m in modes.items()}
    for run in runs.values():
        run()                                            # warm-up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, run in runs.items():
            times[name].append(median_time(run, 1))
    tps = {name: args.decode / statistics.median(ts) for name, ts in times.items()}
    print(f"\n### decode step modes, batch 1, n_ctx = {model.n_ctx} (prompt {args.prompt}, "
          f"{args.decode} steps, medians of {args.repeats})")
    if compile_s is not None:
        print(f"inductor compile of the step (bucket 1): {compile_s:.1f} s")
    print("| mode | decode tok/s | ratio to eager |")
    print("|---|---:|---:|")
    for name, v in tps.items():
        print(f"| {name} | {v:.1f} | {v / tps['eager']:.2f} |")


def paired_medians(fa, fb, repeats: int) -> tuple[float, float]:
    """Median seconds of ``fa`` and ``fb``, run alternately so machine load hits both alike."""
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(median_time(fa, 1))
        tb.append(median_time(fb, 1))
    return statistics.median(ta), statistics.median(tb)


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_cpu(tmp: str, args: argparse.Namespace) -> None:
    path = build_tiny_gguf(os.path.join(tmp, "bench-100m.gguf"), n_layer=16, n_embd=768, n_head=12,
                           n_head_kv=4, n_ff=2048, dtype="F16", seed=1)
    model = Model.load(path, device="cpu", dtype="f32", n_ctx=args.n_ctx or args.prompt + args.decode + 8,
                       progress=False)
    n_params = sum(p.numel() for p in model.net.parameters())
    prompt = torch.randint(0, 300, (args.prompt,), generator=torch.Generator().manual_seed(0)).tolist()

    def ours_prompt() -> None:
        model.cache.clear()
        model.eval_prompt(prompt, 0)

    print(f"\n## CPU, {n_params / 1e6:.0f}M-parameter llama (fp32), torch threads = {torch.get_num_threads()}")
    if args.skip_hf:
        bench_modes(model, prompt, args)
        return

    def ours_decode() -> None:
        model.generate(prompt, max_tokens=args.decode, temperature=0.0,
                       ignore_eos=True)

    from transformers import AutoModelForCausalLM
    hf = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=os.path.basename(path),
                                              dtype=torch.float32).eval()
    ids = torch.tensor([prompt])

    def hf_prompt() -> None:
        with torch.no_grad():
            hf(ids, use_cache=True)

    def hf_generate() -> None:
        with torch.no_grad():
            hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.decode,
                        min_new_tokens=args.decode, do_sample=False, pad_token_id=0)

    for fn in (ours_prompt, hf_prompt):      # warm-up
        fn()
    t_ours_pp, t_hf_pp = paired_medians(ours_prompt, hf_prompt, args.repeats)
    # decode = (prompt + n decode steps) - prompt
    t_ours_all, t_hf_all = paired_medians(ours_decode, hf_generate, args.repeats)
    t_ours_gen, t_hf_gen = t_ours_all - t_ours_pp, t_hf_all - t_hf_pp
    pp_ours, pp_hf = args.prompt / t_ours_pp, args.prompt / t_hf_pp
    tg_ours, tg_hf = args.decode / t_ours_gen, args.decode / t_hf_gen
    print("| phase | halter tok/s | transformers tok/s | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| prompt processing ({args.prompt} tokens) | {pp_ours:.1f} | {pp_hf:.1f} | {pp_ours / pp_hf:.2f} |")
    print(f"| decode ({args.decode} tokens, greedy) | {tg_ours:.1f} | {tg_hf:.1f} | {tg_ours / tg_hf:.2f} |")
    del hf
    bench_modes(model, prompt, args)


def peers(args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import engine_peers
    print(f"# engine_bench: {' '.join(sys.argv)}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}")
    if args.repeats == 5 and "--repeats" not in sys.argv:
        args.repeats = 3
    args.prompt = 256 if "--prompt" not in sys.argv else args.prompt
    args.threads = args.threads or 2
    with tempfile.TemporaryDirectory() as tmp:
        args.model = [build_tiny_gguf(os.path.join(tmp, "tiny-q4_0.gguf"), n_layer=4, n_embd=256, n_head=8,
                                      n_head_kv=4, n_ff=768, dtype="Q4_0", seed=3) if m == "tiny" else m
                      for m in args.model]
        table = engine_peers.compare(args, lambda s: print(s, flush=True))
    if args.plot:
        engine_peers.plot(table, args.plot)
        print(f"plot: {args.plot}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--n-ctx", type=int, default=0, help="cache length (0: prompt + decode + 8)")
    ap.add_argument("--no-compile", action="store_true", help="CPU: leave out torch.compile")
    ap.add_argument("--skip-hf", action="store_true", help="CPU: only halter's decode modes")
    ap.add_argument("--model", action="append", help="GGUF file for the peer comparison ('tiny': a random one)")
    ap.add_argument("--engines", default="halter,llama.cpp,transformers,vllm")
    ap.add_argument("--llama-python", help="python of a venv with llama-cpp-python")
    ap.add_argument("--vllm-python", help="python of a venv with vLLM's CPU build")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per child run")
    ap.add_argument("--plot", help="PNG of the peer comparison")
    args = ap.parse_args()
    if args.model:
        peers(args)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"# engine_bench: {' '.join(sys.argv)}")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        bench_cpu(tmp, args)


if __name__ == "__main__":
    main()
