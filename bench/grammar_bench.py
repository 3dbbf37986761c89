"""Character-matcher speed: accept_text on a 100 KB JSON document, and pathological ambiguous grammars.

Run by hand:  python bench/grammar_bench.py
Prints medians over repeats; the peer is Python's own ``json.loads`` on the same text (a C parser,
for scale), measured in the same run.
"""
from __future__ import annotations

import json
import platform
import random
import statistics
import time
from pathlib import Path

from halter import Grammar

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
JSON_GBNF = (SHARED / "grammars" / "json.gbnf").read_text() if (SHARED / "grammars").exists() else None


def make_document(size: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "δέλτα", "漢字", "emoji 😀", "quote \\\" inside", "tab\\t"]
    items = []
    while sum(len(i) for i in items) < size:
        items.append(json.dumps({
            "id": rng.randint(0, 10**6), "name": rng.choice(words) + str(rng.random()),
            "price": round(rng.uniform(-1000, 1000), 3), "tags": rng.sample(words, 3),
            "active": rng.random() < 0.5, "meta": {"score": rng.random(), "note": None},
        }, ensure_ascii=False))
    return '{"items": [' + ", ".join(items) + "]}"


def timed(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    print(f"# grammar_bench  {time.strftime('%Y-%m-%d')}  {platform.processor() or platform.machine()}  "
          f"python {platform.python_version()}")
    grammar = Grammar.from_gbnf(JSON_GBNF) if JSON_GBNF else None
    doc = make_document(100_000)
    assert grammar is None or grammar.matches(doc)

    def cold():
        g = Grammar.from_gbnf(JSON_GBNF)
        assert g.matcher().accept_text(doc)

    def warm():
        assert grammar.matcher().accept_text(doc)

    if grammar is not None:
        t_cold, t_warm = timed(cold, 3), timed(warm)
        t_json = timed(lambda: json.loads(doc))
        print(f"json.gbnf, {len(doc)} chars: first pass (fresh grammar) {len(doc) / t_cold / 1e3:.0f}k chars/s, "
              f"warm {len(doc) / t_warm / 1e3:.0f}k chars/s; json.loads {len(doc) / t_json / 1e6:.1f}M chars/s "
              f"(ratio {t_warm / t_json:.0f}x)")
    cases = [
        ('("a" | "a" | "aa")*', 'root ::= ("a" | "a" | "aa")*', "a" * 10_000),
        ("item* with 50 optional x", "root ::= item*\nitem ::= " + " ".join(["x?"] * 50) + '\nx ::= "a"',
         "a" * 10_000),
        ("x? x? ... x? (50 copies), 50 chars", "root ::= " + " ".join(["x?"] * 50) + '\nx ::= "a"', "a" * 50),
        ("left recursion: expr ::= expr \"+\" term", 'root ::= expr\nexpr ::= expr "+" term | term\nterm ::= [0-9]',
         "+".join("7" * 5000)),
    ]
    for label, gbnf, text in cases:
        def run_case():
            assert Grammar.from_gbnf(gbnf).matches(text)
        t = timed(run_case, 3)
        print(f"{label}: {len(text)} chars in {t * 1000:.1f} ms (grammar build included)")


if __name__ == "__main__":
    main()
