"""Token masks for schema grammars vs the plain JSON grammar, on a real GGUF vocabulary.

For each schema (a sample of JSONSchemaBench) and one of its valid instances, the instance is
written token by token (longest allowed token that continues the text), calling ``fill_bitmask``
before each token; the same text is then written under the plain JSON grammar
(``../shared/grammars/json.gbnf``), compiled afresh for each schema so that both start with no
cached masks. Each text is written twice: the first pass pays for computing masks the first time a
parser state is seen (what one generation with a new schema costs), the second reads them from the
compiled grammar's caches (the steady state). Reported: compile time and mean/p95 mask time per
token for both grammars, and the schema/plain ratios. Run: ``python bench/schema_mask_bench.py [--vocab NAME] [--schemas N]``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from halter.grammar import Grammar, Vocabulary
from halter.grammar.bitmask import allocate_bitmask
from halter.schemas import json_schema_to_gbnf

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def write_text(cg, vocab, text: bytes, bitmask: np.ndarray) -> list[float] | None:
    """Mask times (seconds) while writing ``text``; None if the grammar refuses it."""
    tm = cg.matcher()
    by_first: dict[int, list[int]] = {}
    for tid, b in enumerate(vocab.token_bytes):
        if b:
            by_first.setdefault(b[0], []).append(tid)
    times, pos = [], 0
    while pos < len(text):
        t0 = time.perf_counter()
        tm.fill_bitmask(bitmask, 0)
        times.append(time.perf_counter() - t0)
        best = None
        for tid in by_first.get(text[pos], []):
            b = vocab.token_bytes[tid]
            if text.startswith(b, pos) and (best is None or len(b) > len(vocab.token_bytes[best])):
                if bitmask[0, tid >> 5] >> (tid & 31) & 1:
                    best = tid
        if best is None or not tm.accept_token(best):
            return None
        pos += len(vocab.token_bytes[best])
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", default="ggml-vocab-llama-spm.gguf")
    ap.add_argument("--schemas", type=int, default=20)
    ap.add_argument("--strict", action="store_true", help="strict mode (default: the API's default mode)")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per schema")
    args = ap.parse_args()
    vocab = Vocabulary.from_gguf(SHARED / "vocab" / args.vocab)
    bitmask = allocate_bitmask(1, vocab.size)
    t0 = time.perf_counter()
    plain_text = (SHARED / "grammars" / "json.gbnf").read_text()
    plain = Grammar.from_gbnf(plain_text).compile(vocab, cache=False, progress=False)
    plain_compile = time.perf_counter() - t0
    rows = [json.loads(line) for line in (SHARED / "schema" / "jsonschemabench_dev.jsonl").open()]
    step = max(1, len(rows) // args.schemas)
    schema_times, plain_times, compiles, skipped = [], [], [], 0
    warm_schema: list[float] = []
    warm_plain: list[float] = []
    for row in rows[::step][:args.schemas]:
        valid = [t["data"] for t in row["tests"] if t["valid"]]
        if not valid:
            continue
        text = json.dumps(valid[0]).encode()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = Grammar.from_gbnf(json_schema_to_gbnf(row["schema"], strict=args.strict))
            t0 = time.perf_counter()
            cg = g.compile(vocab, cache=False, progress=False)
            compiles.append(time.perf_counter() - t0)
        except Exception as e:  # noqa: BLE001 - counted
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped ({type(e).__name__}: {str(e)[:80]})")
            continue
        # both grammars start cold (fresh compile, no masks cached yet): the same conditions
        plain = Grammar.from_gbnf(plain_text).compile(vocab, cache=False, progress=False)
        st = write_text(cg, vocab, text, bitmask)
        pt = write_text(plain, vocab, text, bitmask)
        if st is not None and pt is not None:        # second pass: cached masks (steady state)
            warm_schema += write_text(cg, vocab, text, bitmask) or []
            warm_plain += write_text(plain, vocab, text, bitmask) or []
        if st is None or pt is None:
            skipped += 1
            if args.verbose:
                print(f"  {row['id']}: skipped (the {'schema' if st is None else 'plain'} grammar refused the text)")
            continue
        if args.verbose:
            print(f"  {row['id']}: {len(st)} tokens, compile {compiles[-1]:.2f} s, mask {1000 * statistics.mean(st):.3f} ms "
                  f"vs {1000 * statistics.mean(pt):.3f} ms plain; {len(g.rules) if hasattr(g, 'rules') else '?'} rules")
        schema_times += st
        plain_times += pt

    def ms(xs, q=None):
        if not xs:
            return "-"
        return f"{1000 * (statistics.mean(xs) if q is None else np.percentile(xs, q)):.3f} ms"

    print(f"vocabulary {args.vocab}: {vocab.size} tokens; {len(compiles)} schemas, {skipped} skipped")
    print("| grammar | compile (mean) | mask per token (mean) | p95 | tokens |")
    print("|---|---:|---:|---:|---:|")
    print(f"| plain JSON (json.gbnf) | {plain_compile:.2f} s | {ms(plain_times)} | {ms(plain_times, 95)} | {len(plain_times)} |")
    print(f"| schema grammars | {statistics.mean(compiles) if compiles else 0:.2f} s | {ms(schema_times)} | "
          f"{ms(schema_times, 95)} | {len(schema_times)} |")
    print(f"| plain JSON, second pass (masks cached) | | {ms(warm_plain)} | {ms(warm_plain, 95)} | {len(warm_plain)} |")
    print(f"| schema grammars, second pass | | {ms(warm_schema)} | {ms(warm_schema, 95)} | {len(warm_schema)} |")
    for name, s, p in (("first pass", schema_times, plain_times), ("second pass", warm_schema, warm_plain)):
        if s and p:
            print(f"ratio schema/plain, {name}: mean {statistics.mean(s) / statistics.mean(p):.2f}x, "
                  f"p95 {np.percentile(s, 95) / np.percentile(p, 95):.2f}x")


if __name__ == "__main__":
    main()
