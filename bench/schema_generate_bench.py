"""A schema's first generation against plain JSON's, timed in a decode loop with a model.

``schema_mask_bench.py`` times the token matcher alone. This bench times what a user waits for:
each token of a generation, the model's forward pass included. A random-weight llama model with a
real tokenizer is built once (``build_tiny_gguf(vocab=...)``; by default SmolLM2-135M's shape, the
smallest instruct models in use, with the chosen vocabulary: ~143M parameters with 32k tokens), and
for each schema (the JSONSchemaBench sample of ``schema_mask_bench.py``) one valid instance is cut
into tokens (greedy longest match) and written by the model, token by token, once under the
schema's grammar and once under the plain JSON grammar (``../shared/grammars/json.gbnf``), both
built and compiled afresh for that schema (empty on-disk cache), so this is the first generation
with a new schema, the case where halter's memoised masks are all still to be computed. A third
sequence writes the same tokens with no grammar (the model alone).

The three run in lockstep, each in its own KV-cache sequence, in an order that rotates with every
token, so that the load of this shared machine hits them alike. One step of a sequence is what the
generation loop does for a token under grammar-first sampling (the mode that builds a mask for every
token, as the GPU path does): read the logits to the host, ``fill_bitmask``, ``apply_bitmask`` to
the logits, check the instance's token is allowed, ``accept_token``, then the forward pass for that
token (``Model.decode``). The token is forced (teacher forcing: the instance's, not a sampled one),
so the three sequences read the same tokens and do the same model work. With ``--device cuda`` each
step waits for its forward pass before the next mask (the engine overlaps the two; this bench
does not, so it charges the grammar in full there too). Reported per grammar: the
step time per token (mean, median), the grammar's own time inside it (fill + apply + accept), and
the ratios schema/plain JSON; the ratio of the means is also given per schema, and its median over
schemas.

Run: ``python bench/schema_generate_bench.py [--vocab NAME] [--schemas N] [--max-tokens N]
[--layers N --dim N --heads N --kv-heads N --ff N] [--threads N] [--device cpu|cuda]``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from schema_mask_bench import SHARED, greedy_tokens, text_token_index  # noqa: E402

from halter import Model  # noqa: E402
from halter.engine import build_tiny_gguf  # noqa: E402
from halter.grammar import Grammar  # noqa: E402
from halter.grammar.bitmask import allocate_bitmask, apply_bitmask  # noqa: E402

PROMPT = "Write the JSON object:\n"
NAMES = ("schema", "plain JSON", "no grammar")


class Writer:
    """One sequence of the lockstep: a KV-cache sequence, a matcher (or none), per-token times."""

    def __init__(self, name: str, model: Model, seq: int, compiled, prompt: list[int]) -> None:
        self.name, self.model, self.seq = name, model, seq
        self.matcher = compiled.matcher() if compiled is not None else None
        self.bitmask = allocate_bitmask(1, model.n_vocab)
        model.cache.clear(seq)
        self.logits = model.eval_prompt(prompt, seq)
        self.steps: list[float] = []
        self.grammar: list[float] = []

    def step(self, token: int) -> None:
        t0 = time.perf_counter()
        row = self.logits.float().cpu().numpy()           # the host copy the sampler works on
        t1 = time.perf_counter()
        if self.matcher is not None:
            self.matcher.fill_bitmask(self.bitmask, 0)
            apply_bitmask(row, self.bitmask[0], vocab_size=self.model.n_vocab)
            if not np.isfinite(row[token]) or not self.matcher.accept_token(token):
                raise RuntimeError(f"the {self.name} grammar refused token {token}")
        t2 = time.perf_counter()
        self.logits = self.model.decode([[token]], [self.seq])[0]
        if self.logits.device.type == "cuda":
            torch.cuda.synchronize()
        self.steps.append(time.perf_counter() - t0)
        self.grammar.append(t2 - t1)


def build_model(args: argparse.Namespace, tmp: str) -> Model:
    path = build_tiny_gguf(os.path.join(tmp, "bench-model.gguf"), vocab=SHARED / "vocab" / args.vocab,
                           n_layer=args.layers, n_embd=args.dim, n_head=args.heads, n_head_kv=args.kv_heads,
                           n_ff=args.ff, dtype="F16", seed=0, n_ctx_train=4096)
    return Model.load(path, device=args.device, n_seq_max=3, progress=False)


def summary(xs: list[float]) -> str:
    return f"{1e3 * statistics.mean(xs):.3f} / {1e3 * statistics.median(xs):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="ggml-vocab-llama-spm.gguf")
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--max-tokens", type=int, default=0, help="write at most this many tokens of each instance (0: all)")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--dim", type=int, default=576)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--ff", type=int, default=1536)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per schema")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    tmp = tempfile.mkdtemp(prefix="halter-generate-bench-")
    os.environ["HALTER_CACHE_DIR"] = os.path.join(tmp, "cache")     # every grammar compiled anew
    model = build_model(args, tmp)
    vocab = model.vocab
    n_params = sum(p.numel() for p in model.net.parameters())
    print(f"model: random llama, {args.layers} layers, dim {args.dim}, {args.heads}/{args.kv_heads} heads, "
          f"ffn {args.ff}, {n_params / 1e6:.0f}M parameters, {model.dtype} on {model.device}, "
          f"torch threads {torch.get_num_threads()}; vocabulary {args.vocab} ({vocab.size} tokens)")
    prompt = model.tokenizer.encode(PROMPT)
    index = text_token_index(vocab)
    plain_text = (SHARED / "grammars" / "json.gbnf").read_text()
    rows = [json.loads(line) for line in (SHARED / "schema" / "jsonschemabench_dev.jsonl").open()]
    step = max(1, len(rows) // args.schemas)
    steps = {n: [] for n in NAMES}
    grammar = {n: [] for n in NAMES}
    per_schema: list[float] = []
    skipped = 0
    for row in rows[::step][:args.schemas]:
        valid = [t["data"] for t in row["tests"] if t["valid"]]
        tokens = greedy_tokens(vocab, json.dumps(valid[0]).encode(), index) if valid else None
        if not tokens:
            skipped += 1
            continue
        if args.max_tokens:
            tokens = tokens[:args.max_tokens]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                schema_cg = Grammar.from_json_schema(row["schema"]).compile(vocab, progress=False)
            plain_cg = Grammar.from_gbnf(plain_text).compile(vocab, cache=False, progress=False)
        except Exception as e:  # noqa: BLE001 - counted
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped ({type(e).__name__}: {str(e)[:80]})")
            continue
        gc.collect()        # the collector's debt from compiling is not paid inside the timed steps
        writers = [Writer(name, model, seq, cg, prompt)
                   for seq, (name, cg) in enumerate(zip(NAMES, (schema_cg, plain_cg, None)))]
        try:
            for i, tok in enumerate(tokens):
                for k in range(3):
                    writers[(i + k) % 3].step(tok)
        except RuntimeError as e:          # json.gbnf refuses some valid instances (e.g. deep nesting)
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped ({e})")
            continue
        for name, w in zip(NAMES, writers):
            steps[name] += w.steps
            grammar[name] += w.grammar
        per_schema.append(sum(writers[0].steps) / sum(writers[1].steps))
        if args.verbose:
            print(f"  {row['id']}: {len(tokens)} tokens, step schema/plain {per_schema[-1]:.4f}x, grammar "
                  f"{1e3 * statistics.mean(writers[0].grammar):.4f} vs {1e3 * statistics.mean(writers[1].grammar):.4f} ms")
    n = len(steps["schema"])
    if not n:
        print("no schema completed")
        return
    print(f"{len(per_schema)} schemas, {n} tokens each way, {skipped} skipped")
    print("| sequence | step per token: mean / median (ms) | grammar inside the step: mean / median (ms) |")
    print("|---|---:|---:|")
    for name in NAMES:
        print(f"| {name} | {summary(steps[name])} | {summary(grammar[name]) if name != 'no grammar' else '-'} |")
    s, p, none = (statistics.mean(steps[k]) for k in NAMES)
    sm, pm = statistics.median(steps["schema"]), statistics.median(steps["plain JSON"])
    print(f"step schema/plain JSON: mean {s / p:.4f}x, median {sm / pm:.4f}x; per schema, median of the "
          f"ratios of means {statistics.median(per_schema):.4f}x (range {min(per_schema):.4f}-{max(per_schema):.4f})")
    gs, gp = statistics.mean(grammar["schema"]), statistics.mean(grammar["plain JSON"])
    print(f"grammar inside the step, schema/plain JSON: mean {gs / gp:.2f}x ({1e6 * (gs - gp):.1f} us more per token, "
          f"{100 * (gs - gp) / p:.3f}% of plain JSON's step); step with a grammar / without: schema {s / none:.4f}x, "
          f"plain JSON {p / none:.4f}x")


if __name__ == "__main__":
    main()
