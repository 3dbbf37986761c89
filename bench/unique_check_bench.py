"""Cost of the ``uniqueItems`` check beside the grammar, in token masks on real vocabularies.

An object holding an array of unique strings is written byte by byte; before each byte the token
mask is computed, by the schema grammar with its check and by the same rules without it (both
compiled once; the second pass is timed, so both read cached grammar masks and the difference is
the check's own work). Reported per vocabulary: median and mean ms per mask, and the ratio.

Run: ``python bench/unique_check_bench.py [--vocab NAME ...]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from halter import Grammar, Vocabulary

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"},
                                                    "uniqueItems": True}}}
TEXT = '{"tags": ["alpha", "beta", "gamma", "delta", "alphabet", "be", "gam", "epsilon", "zeta"]}'


def mask_times(grammar: Grammar, vocab: Vocabulary) -> list[float]:
    cg = grammar.compile(vocab)
    times: list[float] = []
    for _ in range(2):
        m, times = cg.matcher(), []
        for b in TEXT.encode():
            t0 = time.perf_counter()
            m.allowed_mask()
            times.append(time.perf_counter() - t0)
            assert m.accept_bytes(bytes([b]))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", nargs="*", default=["llama-spm", "gpt-2", "deepseek-llm"])
    args = ap.parse_args()
    g = Grammar.from_json_schema(SCHEMA)
    plain = Grammar(g.rules, "root")
    print("| vocabulary | tokens | with check: median / mean ms | without: median / mean ms | ratio of medians |")
    print("|---|---:|---:|---:|---:|")
    for name in args.vocab:
        path = SHARED / "vocab" / f"ggml-vocab-{name}.gguf"
        if not path.exists():
            print(f"| {name} | (no {path}) | | | |")
            continue
        vocab = Vocabulary.from_gguf(path)
        c, p = mask_times(g, vocab), mask_times(plain, vocab)
        mc, mp = statistics.median(c), statistics.median(p)
        print(f"| {name} | {vocab.size} | {1e3 * mc:.3f} / {1e3 * statistics.mean(c):.3f} | "
              f"{1e3 * mp:.3f} / {1e3 * statistics.mean(p):.3f} | {mc / mp:.1f}x |")


if __name__ == "__main__":
    main()
