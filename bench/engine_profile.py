"""Where a decoded token's time goes: torch profiler + cProfile over a 64-token CPU decode.

Loads a GGUF model (``--model PATH``; without it a tiny random llama built in a temp dir), evaluates
a short prompt, then decodes ``--tokens`` tokens greedily through ``Model.generate`` twice: once
under ``torch.profiler`` (operator self-times, grouped into matmuls, attention, dequantization,
elementwise/norm work, copies and allocation) and once under ``cProfile`` (Python functions:
the per-layer module overhead, sampling, grammar, detokenization). A ``--schema`` run adds a
JSON-schema-constrained decode so the grammar's share shows.

Run by hand:
  python bench/engine_profile.py --model /path/SmolLM2-135M-Instruct.Q4_1.gguf --threads 2
  python bench/engine_profile.py --threads 2 [--weights dequantize] [--decode eager]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict

import torch

from halter import Model
from halter.engine import build_tiny_gguf

_GROUPS = (                                  # (group, substrings of the profiler's op names)
    ("int4 matmul", ("_weight_int4pack_mm",)),
    ("dense matmul", ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul")),
    ("attention", ("scaled_dot_product", "_flash_attention", "aten::_softmax", "aten::baddbmm")),
    ("index / copy", ("aten::index", "aten::copy_", "aten::to", "aten::_to_copy", "aten::cat",
                      "aten::contiguous", "aten::clone", "aten::gather", "aten::embedding",
                      "aten::where", "aten::stack", "aten::_index_put", "aten::index_put")),
    ("allocation", ("aten::empty", "aten::zeros", "aten::ones", "aten::full", "aten::resize_")),
    ("elementwise / norm", ("aten::mul", "aten::add", "aten::sub", "aten::rsqrt", "aten::pow",
                            "aten::mean", "aten::silu", "aten::neg", "aten::div", "aten::bitwise",
                            "aten::__rshift__", "aten::__and__", "aten::gelu", "aten::tanh")),
)


def group_of(name: str) -> str:
    for group, keys in _GROUPS:
        if any(k in name for k in keys):
            return group
    return "other ops"


def tiny_model(tmp: str) -> str:
    return build_tiny_gguf(os.path.join(tmp, "tiny.gguf"), n_layer=4, n_embd=256, n_head=8,
                           n_head_kv=4, n_ff=512, dtype="Q4_0", seed=3)


def run_decode(model: Model, prompt: str, n: int, schema: dict | None = None) -> float:
    t = time.perf_counter()
    if schema is None:
        model.generate(prompt, max_tokens=n, temperature=0.0, ignore_eos=True)
    else:
        import halter
        halter.generate(model, prompt, json_schema=schema, max_tokens=n, temperature=0.0)
    return time.perf_counter() - t


def torch_profile(model: Model, prompt: str, n: int) -> None:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        wall = run_decode(model, prompt, n)
    groups: dict[str, float] = defaultdict(float)
    ops: dict[str, tuple[float, int]] = {}
    for evt in prof.key_averages():
        if not evt.key.startswith("aten::") and "int4pack" not in evt.key:
            continue
        us = evt.self_cpu_time_total
        groups[group_of(evt.key)] += us
        ops[evt.key] = (us, evt.count)
    total_ops = sum(groups.values())
    print(f"\n### torch profiler: {n} tokens (+ prompt) in {wall * 1e3:.0f} ms wall; "
          f"aten self time {total_ops / 1e3:.0f} ms ({total_ops / 1e3 / n:.2f} ms/token)")
    print("| group | ms | share of wall |")
    print("|---|---:|---:|")
    for g, us in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {g} | {us / 1e3:.1f} | {us / 1e6 / wall:.0%} |")
    print(f"| outside aten ops (Python, the fused step's numba kernels, profiler) | {(wall * 1e6 - total_ops) / 1e3:.1f} | "
          f"{1 - total_ops / 1e6 / wall:.0%} |")
    print("\ntop ops by self time:")
    print("| op | calls | ms | calls/token |")
    print("|---|---:|---:|---:|")
    for key, (us, count) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:15]:
        print(f"| {key} | {count} | {us / 1e3:.1f} | {count / n:.0f} |")


def python_profile(model: Model, prompt: str, n: int, schema: dict | None, top: int) -> None:
    prof = cProfile.Profile()
    prof.enable()
    wall = run_decode(model, prompt, n, schema)
    prof.disable()
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(top)
    what = "schema-constrained" if schema else "unconstrained"
    print(f"\n### cProfile, {what}: {n} tokens in {wall * 1e3:.0f} ms (under cProfile)")
    print("```")
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if "ncalls" in line)
    print("\n".join(line[:150] for line in lines[start:start + top + 1]))
    print("```")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="GGUF file (default: a tiny random llama)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", default="packed", choices=["packed", "dequantize"])
    ap.add_argument("--decode", default="auto", help="decode mode (auto: fused on the CPU where it can run, else trace; "
                                                     "eager, static, trace, fused, compile)")
    ap.add_argument("--top", type=int, default=25, help="cProfile rows")
    ap.add_argument("--schema", action="store_true", help="add a schema-constrained cProfile run")
    args = ap.parse_args()
    print(f"# engine_profile: {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}, "
          f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or tiny_model(tmp)
        model = Model.load(path, device="cpu", n_ctx=512, progress=False, weights=args.weights,
                           n_threads=args.threads, decode=args.decode)
        print(f"{os.path.basename(path)}: {model.config.n_layer} layers, n_embd {model.config.n_embd}, "
              f"n_vocab {model.n_vocab}, weights={args.weights}, decode={model.decode_mode}, "
              f"threads {torch.get_num_threads()}")
        prompt = "Write one short sentence about the sea."
        run_decode(model, prompt, 8)                        # warm-up
        torch_profile(model, prompt, args.tokens)
        python_profile(model, prompt, args.tokens, None, args.top)
        if args.schema:
            schema = {"type": "object", "properties": {"name": {"type": "string"},
                                                       "age": {"type": "integer"}},
                      "required": ["name", "age"]}
            run_decode(model, prompt, 8, schema)
            python_profile(model, prompt, args.tokens, schema, args.top)


if __name__ == "__main__":
    main()
