"""Where a new schema's compile time goes: CPU ms per phase, each schema in a fresh process.

The same set-up and workloads as ``new_schema_bench.py`` (halter only: imports, one tiny schema
converted, the vocabulary's token trie built), then one compile of the workload with the phases
timed by wrapping the functions that do them (thread CPU time, nested phases subtracted):
``meta`` (metaschema check), ``convert`` (schema to rules, the check excluded), ``nfa``
(inlining plan and NFA emission), ``det`` (subset construction), ``trim``, ``merge`` (equal
positions merged), ``assemble`` (the rest of numbering positions), ``grammar`` (the rest of
``Grammar()``), ``store`` (grammar cache write), ``compiled`` (``CompiledGrammar``: token
references, trie lookup), ``other`` (what the total leaves: cache key and lookup, the worker
thread, the garbage collection after the build, the matcher).

Run: ``python bench/compile_phases.py [--vocab deepseek-llm] [--schemas 30] [--only W1,W2]``; prints one
line per workload and the median of each phase.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["meta", "convert", "nfa", "det", "trim", "merge", "assemble", "grammar", "store", "compiled", "other"]


def child(vocab_name: str, workload: str) -> dict:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import new_schema_bench as nb

    import halter.grammar.automaton as automaton
    import halter.grammar.compiled as compiled
    import halter.grammar.grammar as grammar
    import halter.grammar.nfa as nfa
    import halter.grammar.store as store
    import halter.schemas.json_schema as json_schema
    from halter.grammar import Vocabulary
    spent: dict[str, float] = {}

    def timed(owner, name: str, label: str) -> None:
        f = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t0 = time.thread_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + (time.thread_time() - t0) * 1e3
        setattr(owner, name, wrapper)
    timed(json_schema, "schema_to_grammar_parts", "convert")
    timed(json_schema, "_meta_validate", "meta")
    timed(nfa.NfaBuilder, "build_all", "nfa")
    timed(automaton, "_determinize_all", "det")
    timed(automaton, "_trim", "trim")
    timed(automaton, "merge_equivalent_positions", "merge")
    timed(automaton, "_assemble", "assemble")
    timed(store, "store", "store")
    timed(compiled.CompiledGrammar, "__init__", "compiled")
    timed(grammar.Grammar, "__init__", "grammar")
    kind, text, _doc = nb._workload(workload)
    vocab = Vocabulary.from_gguf(nb.SHARED / "vocab" / f"ggml-vocab-{vocab_name}.gguf")
    eng = nb._Halter(vocab)
    spent.clear()
    t0 = time.process_time()
    m = eng.matcher(eng.compile(kind, text))
    total = (time.process_time() - t0) * 1e3
    del m
    g = lambda k: spent.get(k, 0.0)  # noqa: E731
    out = {"meta": g("meta"), "convert": g("convert") - g("meta"), "nfa": g("nfa"), "det": g("det"),
           "trim": g("trim"), "merge": g("merge"), "assemble": g("assemble") - g("trim") - g("merge"),
           "grammar": g("grammar") - g("nfa") - g("det") - g("assemble"), "store": g("store"),
           "compiled": g("compiled")}
    out["other"] = total - sum(out.values())
    return {"workload": workload, "vocab": vocab_name, "total": total, **out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--vocab", default="deepseek-llm")
    ap.add_argument("--schemas", type=int, default=30)
    ap.add_argument("--only", default=None, metavar="W1,W2")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    sys.path.insert(0, str(ROOT / "bench"))
    import new_schema_bench as nb
    wl = args.only.split(",") if args.only else nb.workloads(args.schemas, False)
    rows = []
    print("workload".ljust(12) + "total".rjust(8) + "".join(p.rjust(9) for p in PHASES))
    for w in wl:
        with tempfile.TemporaryDirectory(prefix="halter-cold-") as cache:
            env = dict(os.environ, HALTER_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
            p = subprocess.run([sys.executable, __file__, "--child", args.vocab, w], env=env,
                               capture_output=True, text=True)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            print(f"{w}: failed: {p.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(lines[-1])
        rows.append(r)
        print(w.ljust(12) + f"{r['total']:8.1f}" + "".join(f"{r[k]:9.2f}" for k in PHASES), flush=True)
    if rows:
        import numpy as np
        print("median".ljust(12) + f"{np.median([r['total'] for r in rows]):8.1f}"
              + "".join(f"{np.median([r[k] for r in rows]):9.2f}" for k in PHASES))


if __name__ == "__main__":
    main()
