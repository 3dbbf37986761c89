"""GPU engine figures (run by bench/gpu_check.sh): decode speed against the memory-bandwidth bound,
batch 16 against batch 1, schema-constrained against unconstrained decode, device sampling.

Builds a random ~1B-parameter llama (``halter.engine.tiny``, F16 on disk; or ``--model PATH``),
loads it in bf16 on CUDA, and prints markdown tables:

1. decode tokens/s at batch 1 and 16 in the eager, static and CUDA-graph modes; bytes read per
   step (weights + the KV cache attended) over the step time, as a fraction of the device-to-device
   copy bandwidth measured in the same run (the memory-bandwidth bound of a decode step);
2. ``halter.generate`` with a JSON schema vs without one, same prompt and length, tokens/s;
3. sampling on the device vs the host chain: tokens that agree over seeded generations;
4. where a batch-1 step's time goes (torch profiler: kernels per step, kernel time);
5. with ``--quant TYPE``: the same model quantized (weights kept quantized on the GPU: tinygemm
   int4 terms, or dequantized just in time per matrix): GPU memory and decode speed against bf16;
6. with ``--compile``: the batch-1 step compiled by inductor and captured as a CUDA graph;
7. one-row products per weight shape: ``F.linear`` (cuBLAS), ``torch.mv`` and ``halter.engine.gemv``'s kernel.

Run by hand: python bench/gpu_bench.py [--decode 64] [--repeats 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback

import torch

from engine_bench import decode_steps, with_mode   # bench/ is on sys.path when run as a script

from halter import Model
from halter.engine import build_tiny_gguf


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def gpu_memory() -> int:
    return torch.cuda.memory_allocated() if torch.cuda.is_available() else 0


def median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def decode_table(model: Model, args: argparse.Namespace, out) -> None:
    weight_bytes = sum(t.numel() * t.element_size() for t in list(model.net.parameters()) + list(model.net.buffers()))
    dev = model.device
    big = torch.empty(1 << (29 if dev.type == "cuda" else 24), dtype=torch.uint8, device=dev)
    copy_bw = 2 * big.numel() / median_s(lambda: big.clone(), 5)
    del big
    prompt = list(range(10, 10 + args.prompt))
    c = model.config
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "CPU (dry run)"
    out(f"\n## decode, {name}, {weight_bytes / 1e9:.2f} GB of weights ({model.dtype})")
    out(f"device copy bandwidth (measured): {copy_bw / 1e9:.0f} GB/s")
    out("| batch | mode | tok/s (all rows) | ms/step | GB/s read | fraction of bound | vs eager |")
    out("|---:|---|---:|---:|---:|---:|---:|")
    modes = {m: with_mode(model, m) for m in ("eager", "static", "cuda-graph")[:3 if dev.type == "cuda" else 2]}
    tps1 = {}
    for batch in (1, 16):
        runs = {m: decode_steps(v, prompt, batch, args.decode) for m, v in modes.items()}
        for run in runs.values():
            run()                                          # warm-up, graph capture
        times = {m: [] for m in runs}
        for _ in range(args.repeats):
            for m, run in runs.items():
                times[m].append(median_s(run, 1))
        kv = 2 * c.n_layer * batch * c.n_head_kv * c.head_dim * (args.prompt + args.decode // 2) * 2
        eager = statistics.median(times["eager"]) / args.decode
        for m, ts in times.items():
            step = statistics.median(ts) / args.decode
            read = (weight_bytes + kv) / step
            if batch == 1:
                tps1[m] = 1 / step
            ratio = f" ({batch / step / tps1[m]:.1f}x batch 1)" if batch > 1 else ""
            out(f"| {batch} | {m} | {batch / step:.0f}{ratio} | {step * 1e3:.2f} | {read / 1e9:.0f} | "
                f"{read / copy_bw:.2f} | {eager / step:.2f} |")


def profile_table(model: Model, args: argparse.Namespace, out) -> None:
    from torch.profiler import ProfilerActivity, profile
    prompt = list(range(10, 10 + args.prompt))
    steps = 8
    out(f"\n## where a batch-1 step's time goes (torch profiler over {steps} steps)")
    out("| mode | GPU kernels per step | kernel time ms/step | largest kernels (share of kernel time) |")
    out("|---|---:|---:|---|")
    for mode in ("eager", "cuda-graph" if model.device.type == "cuda" else "static"):
        run = decode_steps(with_mode(model, mode), prompt, 1, steps)
        run()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if model.device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            run()
            sync()
        kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        by_name: dict[str, float] = {}
        for e in kern:
            by_name[e.name] = by_name.get(e.name, 0.0) + e.time_range.elapsed_us()
        total = sum(by_name.values())
        top = sorted(by_name.items(), key=lambda kv: -kv[1])[:5]
        desc = "; ".join(f"{n[:48]} {v / total:.0%}" for n, v in top) if total else "-"
        out(f"| {mode} | {len(kern) / steps:.0f} | {total / steps / 1e3:.3f} | {desc} |")


def compile_table(model: Model, args: argparse.Namespace, out) -> None:
    prompt = list(range(10, 10 + args.prompt))
    t = time.perf_counter()
    compiled = with_mode(model, "cuda-graph", backend="inductor")
    runs = {"cuda-graph": decode_steps(with_mode(model, "cuda-graph"), prompt, 1, args.decode)}
    runs["inductor + cuda-graph"] = decode_steps(compiled, prompt, 1, args.decode)
    runs["inductor + cuda-graph"]()                       # compile, capture
    took = time.perf_counter() - t
    runs["cuda-graph"]()
    times: dict[str, list[float]] = {m: [] for m in runs}
    for _ in range(args.repeats):
        for m, run in runs.items():
            times[m].append(median_s(run, 1))
    weight_bytes = sum(t.numel() * t.element_size() for t in list(model.net.parameters()) + list(model.net.buffers()))
    kv = 2 * model.config.n_layer * model.config.n_head_kv * model.config.head_dim * (args.prompt + args.decode // 2) * 2
    big = torch.empty(1 << 29, dtype=torch.uint8, device=model.device)
    copy_bw = 2 * big.numel() / median_s(lambda: big.clone(), 5)
    del big
    out(f"\n## batch-1 decode with the step compiled by inductor, then captured (compile + capture {took:.0f} s)")
    out("| mode | tok/s | ms/step | fraction of bound |")
    out("|---|---:|---:|---:|")
    for m, ts in times.items():
        step = statistics.median(ts) / args.decode
        out(f"| {m} | {1 / step:.0f} | {step * 1e3:.2f} | {(weight_bytes + kv) / step / copy_bw:.2f} |")


def quant_table(path: str, bf16: Model, args: argparse.Namespace, out) -> None:
    sync()
    before = gpu_memory()
    model = Model.load(path, device=bf16.device, dtype=bf16.dtype, n_ctx=args.prompt + args.decode + 16, n_seq_max=16,
                       progress=False)
    sync()
    used = gpu_memory() - before
    dense = sum(t.numel() * t.element_size() for t in list(bf16.net.parameters()) + list(bf16.net.buffers()))
    cache = model.cache.nbytes
    from halter.engine.qlinear import QLinear
    kernels: dict[str, int] = {}
    for m in model.net.modules():
        if isinstance(m, QLinear):
            for k in m.kernels:
                kernels[k] = kernels.get(k, 0) + 1
    out(f"\n## {args.quant} weights on the GPU vs bf16 (matrix kernels: {kernels})")
    out(f"file {os.path.getsize(path) / 1e9:.2f} GB; GPU memory taken by the load {used / 1e9:.2f} GB, of it "
        f"{cache / 1e9:.2f} GB KV cache and {(used - cache) / 1e9:.2f} GB weights (the bf16 model's weights: "
        f"{dense / 1e9:.2f} GB)")
    out("| batch | mode | bf16 tok/s | quantized tok/s | quantized vs bf16 |")
    out("|---:|---|---:|---:|---:|")
    prompt = list(range(10, 10 + args.prompt))
    for batch in (1, 16):
        for mode in ("eager", "cuda-graph" if bf16.device.type == "cuda" else "static"):
            runs = {k: decode_steps(with_mode(m, mode), prompt, batch, args.decode) for k, m in
                    (("bf16", bf16), ("q", model))}
            for run in runs.values():
                run()
            times = {k: [] for k in runs}
            for _ in range(args.repeats):
                for k, run in runs.items():
                    times[k].append(median_s(run, 1))
            tps = {k: batch * args.decode / statistics.median(v) for k, v in times.items()}
            out(f"| {batch} | {mode} | {tps['bf16']:.0f} | {tps['q']:.0f} | {tps['q'] / tps['bf16']:.2f} |")
    del model


def schema_table(model: Model, args: argparse.Namespace, out) -> None:
    import halter
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
              "items": {"type": "string"}}, "n": {"type": "integer"}}, "required": ["name", "tags", "n"]}
    n = args.decode

    # both on the default path (device sampling on CUDA); decode tokens/s from the call's own
    # timings, so a document that ends early is compared per token, the prompt left out
    def plain():
        return model.generate("Data:", max_tokens=n, temperature=0.8, seed=1).timings

    def constrained():
        return halter.generate(model, "Data:", json_schema=schema, max_tokens=n, temperature=0.8, seed=1).timings
    plain(), constrained()                                 # warm-up, grammar compile
    res: dict[str, list[float]] = {"unconstrained": [], "json schema": []}
    n_gen: dict[str, int] = {}
    mask_share: list[float] = []
    for _ in range(args.repeats):
        for name, fn in (("unconstrained", plain), ("json schema", constrained)):
            sync()
            tm = fn()
            res[name].append(tm.decode_tps)
            n_gen[name] = tm.generated_tokens
            if name == "json schema":
                mask_share.append(tm.mask_ms / tm.decode_ms if tm.decode_ms else 0.0)
    base = statistics.median(res["unconstrained"])
    out(f"\n## schema-constrained vs unconstrained decode (batch 1, {model.decode_mode}, up to {n} tokens)")
    out("| run | tokens | tok/s | vs unconstrained |")
    out("|---|---:|---:|---:|")
    for name, v in res.items():
        out(f"| {name} | {n_gen[name]} | {statistics.median(v):.0f} | {statistics.median(v) / base:.3f} |")
    out(f"grammar work (masks, checks, accepts) in the constrained decode: {statistics.median(mask_share):.1%}")
    if model.device.type == "cuda":                  # where the difference goes: kernels or the host
        from torch.profiler import ProfilerActivity, profile
        for name, fn in (("unconstrained", plain), ("json schema", constrained)):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                tm = fn()
                sync()
            kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            n_tok = max(1, tm.generated_tokens)
            busy = sum(e.time_range.elapsed_us() for e in kern)
            out(f"profiled {name}: {len(kern) / n_tok:.0f} kernels per token, {busy / n_tok / 1e3:.3f} ms "
                f"of kernel time per token, {tm.decode_ms / n_tok:.3f} ms per token (profiled)")


def products_table(model: Model, out) -> None:
    """One-row bf16 products per weight shape of the model, 20 or more calls in a CUDA graph on
    copies of the matrix that do not fit the L2 cache together (kernel time only): ``F.linear`` (cuBLAS), ``torch.mv``, and ``halter.engine.gemv``'s Triton
    kernel at its best tile config (what ``gemv.tune`` picks for the CUDA-graph step)."""
    from halter.engine import gemv
    shapes = sorted({tuple(m.weight.shape) for m in model.net.modules()
                     if isinstance(m, torch.nn.Linear) and m.weight.dim() == 2})
    out("\n## one-row products per weight shape (bf16, calls captured in a CUDA graph, matrices read from memory)")
    out("| weight [N, K] | F.linear µs / GB/s | torch.mv µs / GB/s | Triton kernel µs / GB/s (config) | picked |")
    out("|---|---:|---:|---:|---|")
    for n, k in shapes:
        best, times = gemv.tune_shape(n, k, torch.bfloat16, model.device)
        ws = gemv.cold_copies(n, k, torch.bfloat16, model.device)
        x = torch.randn(k, device=model.device, dtype=torch.bfloat16)
        t_mv = gemv._graph_time([lambda w=w: torch.mv(w, x) for w in ws])
        kern = {c: t for c, t in times.items() if c != "linear"}
        fast = min(kern, key=kern.get) if kern else None

        def cell(t: float) -> str:
            return f"{t * 1e6:.1f} / {n * k * 2 / t / 1e9:.0f}"
        out(f"| [{n}, {k}] | {cell(times['linear'])} | {cell(t_mv)} | "
            f"{cell(kern[fast]) + ' ' + fast if fast else 'failed'} | {'Triton' if best else 'F.linear'} |")


def sampling_table(model: Model, out) -> None:
    agree = total = 0
    t_dev = t_host = 0.0
    for seed in range(8):
        kw = dict(max_tokens=32, temperature=0.9, top_k=40, top_p=0.95, min_p=0.05, seed=seed, ignore_eos=False)
        t = time.perf_counter()
        host = model.generate("Once upon", device_sampling=False, **kw)
        t_host += time.perf_counter() - t
        t = time.perf_counter()
        dev = model.generate("Once upon", device_sampling=True, **kw)
        t_dev += time.perf_counter() - t
        for a, b in zip(host.tokens, dev.tokens):
            total += 1
            if a != b:
                break
            agree += 1
    out("\n## device sampling vs the host chain (8 seeded generations of 32 tokens)")
    out(f"tokens agreeing before the first difference: {agree}/{total}; "
        f"wall time device {t_dev:.2f} s, host {t_host:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file (default: a random ~1B llama built here)")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", help="also write the tables to this file")
    ap.add_argument("--quant", help="also a quantized copy of the built model, e.g. Q4_K")
    ap.add_argument("--compile", action="store_true", help="also the inductor-compiled CUDA-graph step (CUDA)")
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the script runs")
    args = ap.parse_args()
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("gpu_bench: no CUDA device (--dry-run runs a tiny model on the CPU)")
    sink = open(args.out, "w") if args.out else None      # written as it goes: a crash keeps the tables so far

    def out(s: str) -> None:
        print(s, flush=True)
        if sink:
            sink.write(s + "\n")
            sink.flush()
    device = "cpu" if args.dry_run else "cuda"
    out(f"# gpu_bench: {' '.join(sys.argv[1:])} torch {torch.__version__}, {device}, {time.strftime('%Y-%m-%d')}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if path is None:
            t = time.perf_counter()
            size = dict(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128) if args.dry_run else \
                dict(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192)
            path = build_tiny_gguf(os.path.join(tmp, "llama-1b.gguf"), dtype="F16", seed=2, **size)
            out(f"built a random llama ({size}) in {time.perf_counter() - t:.0f} s")
        t = time.perf_counter()
        model = Model.load(path, device=device, dtype="bf16" if device == "cuda" else "f32",
                           n_ctx=args.prompt + args.decode + 16, n_seq_max=16, progress=False)
        out(f"loaded in {time.perf_counter() - t:.1f} s")

        def section(fn, *a) -> None:                        # one failing table leaves the others
            try:
                fn(*a)
            except Exception:
                out("```\n" + traceback.format_exc() + "```")
                failed.append(fn.__name__)
        failed: list[str] = []
        section(decode_table, model, args, out)
        section(schema_table, model, args, out)
        section(sampling_table, model, out)
        section(profile_table, model, args, out)
        if device == "cuda":
            section(products_table, model, out)
        if args.quant and args.model is None:
            t = time.perf_counter()
            qpath = build_tiny_gguf(os.path.join(tmp, "llama-1b-q.gguf"), dtype=args.quant, seed=2, **size)
            out(f"\nbuilt the {args.quant} copy in {time.perf_counter() - t:.0f} s")
            section(quant_table, qpath, model, args, out)
        if args.compile and device == "cuda":
            section(compile_table, model, args, out)
    if sink:
        sink.close()
    if failed:
        sys.exit(f"gpu_bench: failed sections: {', '.join(failed)}")


if __name__ == "__main__":
    main()
