"""GPU engine figures (run by bench/gpu_check.sh): decode speed against the memory-bandwidth bound,
batch 16 against batch 1, schema-constrained against unconstrained decode, device sampling.

Builds a random ~1B-parameter llama (``halter.engine.tiny``, F16 on disk; or ``--model PATH``),
loads it in bf16 on CUDA, and prints markdown tables:

1. decode tokens/s at batch 1 and 16 in the eager, static and CUDA-graph modes; bytes read per
   step (weights + the KV cache attended) over the step time, as a fraction of the device-to-device
   copy bandwidth measured in the same run (the memory-bandwidth bound of a decode step);
2. ``halter.generate`` with a JSON schema vs without one, same prompt and length, tokens/s;
3. sampling on the device vs the host chain: tokens that agree over seeded generations.

Run by hand: python bench/gpu_bench.py [--decode 64] [--repeats 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

from engine_bench import decode_steps, with_mode   # bench/ is on sys.path when run as a script

from halter import Model
from halter.engine import build_tiny_gguf


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


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


def schema_table(model: Model, args: argparse.Namespace, out) -> None:
    import halter
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "tags": {"type": "array",
              "items": {"type": "string"}}, "n": {"type": "integer"}}, "required": ["name", "tags", "n"]}
    n = args.decode

    def plain() -> int:
        return len(model.generate("Data:", max_tokens=n, temperature=0.8, seed=1, ignore_eos=True).tokens)

    def constrained() -> int:
        return len(halter.generate(model, "Data:", json_schema=schema, max_tokens=n, temperature=0.8,
                                   seed=1).tokens)
    plain(), constrained()                                 # warm-up, grammar compile
    res = {"unconstrained": [], "json schema": []}
    for _ in range(args.repeats):
        for name, fn in (("unconstrained", plain), ("json schema", constrained)):
            sync()
            t = time.perf_counter()
            k = fn()
            res[name].append(k / (time.perf_counter() - t))
    base = statistics.median(res["unconstrained"])
    out(f"\n## schema-constrained vs unconstrained decode (batch 1, {model.decode_mode}, up to {n} tokens)")
    out("| run | tok/s | vs unconstrained |")
    out("|---|---:|---:|")
    for name, v in res.items():
        out(f"| {name} | {statistics.median(v):.0f} | {statistics.median(v) / base:.3f} |")


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
    ap.add_argument("--dry-run", action="store_true", help="a tiny model on the CPU: checks the script runs")
    args = ap.parse_args()
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("gpu_bench: no CUDA device (--dry-run runs a tiny model on the CPU)")
    lines: list[str] = []

    def out(s: str) -> None:
        print(s, flush=True)
        lines.append(s)
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
        model = Model.load(path, device=device, dtype="bf16" if device == "cuda" else "f32",
                           n_ctx=args.prompt + args.decode + 16, n_seq_max=16, progress=False)
        decode_table(model, args, out)
        schema_table(model, args, out)
        sampling_table(model, out)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
