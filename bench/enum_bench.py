"""Build time of long enums: ``Grammar.from_json_schema({"enum": values})`` in CPU seconds.

Each case runs in a fresh subprocess with an empty grammar cache (so nothing is read back from
disk): the conversion to rules and the automata, as a user's first build pays them. Kinds:
``strings`` (ids like ``v000123-abxy``), ``numbers`` (integers and halves), ``objects`` (two
members), ``arrays`` (three items), ``mixed`` (a quarter of each).

    PYTHONPATH=$PWD python bench/enum_bench.py --sizes 1000 10000 --kinds strings mixed --repeats 3
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

KINDS = ("strings", "numbers", "objects", "arrays", "mixed")


def values(kind: str, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    out: list = []
    for i in range(n):
        k = kind if kind != "mixed" else KINDS[i % 4]
        if k == "strings":
            out.append("v%06d-%s" % (i, "".join(rng.choice("abcxyz") for _ in range(4))))
        elif k == "numbers":
            out.append(i * 7 + 0.5 if i % 8 == 1 else i * 7)
        elif k == "objects":
            out.append({"id": i, "name": "n%d" % i})
        else:
            out.append([i, "x%d" % i, i % 3 == 0])
    return out


_CHILD = """
import json, sys, time
sys.path.insert(0, {bench!r})
from enum_bench import values
from halter import Grammar
vals = values({kind!r}, {n})
t0 = time.process_time()
g = Grammar.from_json_schema({{"enum": vals}})
print(json.dumps({{"cpu_s": time.process_time() - t0, "positions": g.automata.n_positions}}))
"""


def measure(kind: str, n: int) -> dict:
    """One build in a fresh process with an empty cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "HALTER_CACHE_DIR": cache}
        code = _CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), kind=kind, n=n)
        # (run outside the checkout: halter comes from $PYTHONPATH or the installed package)
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cache, capture_output=True, text=True,
                             check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=["strings", "mixed"])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print("| kind | values | CPU s (median) | positions |")
    print("|---|---|---|---|")
    for kind in args.kinds:
        for n in args.sizes:
            runs = [measure(kind, n) for _ in range(args.repeats)]
            cpu = statistics.median(r["cpu_s"] for r in runs)
            print(f"| {kind} | {n:,} | {cpu:.2f} | {runs[0]['positions']:,} |", flush=True)


if __name__ == "__main__":
    main()
