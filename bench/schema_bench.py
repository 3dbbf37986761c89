"""How much of JSON Schema halter's converter gets right, on the official test suite and real schemas.

Each schema is compiled twice: in the **default** mode (``strict=False``, what ``halter.api`` and
``Grammar.from_json_schema`` use: keywords a grammar cannot enforce are dropped with a warning, so the
grammar accepts a superset) and in **strict** mode (such keywords raise). "compiled" is the share of
all schemas that give a grammar; "agreement" is over every test instance of every compiled schema:
an instance agrees when its default, compact and ``ensure_ascii=False`` serializations all get the
suite's verdict. Schemas that do not compile are counted by cause: a remote ``$ref`` that would
need the network (halter never fetches), a schema that accepts no value (an error by design), the
10 s limit, or anything else. They stay in the denominator; the table also gives the figure with
the network-only schemas left out, labelled as such. Grammars are built with an empty on-disk
grammar cache (a fresh ``HALTER_CACHE_DIR``), so the time limit measures real building. Run:
``python bench/schema_bench.py [--limit N] [--only jsts|jsb] [--match TEXT] [-v]``.

Formats are asserted (as in the suite's optional/format tests), so the few format.json tests
saying an invalid format is "only an annotation by default" are left out.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import tempfile
import sys
import time
import warnings
from pathlib import Path

from halter.grammar import Grammar

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "schema"
TIME_LIMIT_S = 10


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def keywords_of(schema, out=None) -> set[str]:
    out = set() if out is None else out
    if isinstance(schema, dict):
        for k, v in schema.items():
            out.add(k)
            if k in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
                if isinstance(v, dict):
                    for sub in v.values():
                        keywords_of(sub, out)
            elif k not in ("enum", "const", "default", "examples", "required"):
                keywords_of(v, out)
    elif isinstance(schema, list):
        for v in schema:
            keywords_of(v, out)
    return out


def load(only: str | None) -> list[dict]:
    """Cases grouped by schema: {"suite", "id", "schema", "keywords", "tests": [(instance, valid)]}."""
    cases = []
    if only in (None, "jsts"):
        for name in ("jsts_draft2020-12.jsonl", "jsts_draft7.jsonl"):
            groups: dict[str, dict] = {}
            for line in (SHARED / name).open():
                row = json.loads(line)
                if "draft7" in name and isinstance(row["schema"], dict) and "$schema" not in row["schema"]:
                    row["schema"] = {"$schema": "http://json-schema.org/draft-07/schema#", **row["schema"]}
                if "only an annotation by default" in row["description"]:
                    continue   # halter asserts formats (optional/format/*); these tests assume it does not
                key = row["file"] + json.dumps(row["schema"], sort_keys=True)
                g = groups.setdefault(key, {"suite": name.split(".")[0], "id": row["group"],
                                            "schema": row["schema"], "keywords": set(row["keywords"]),
                                            "in_principle": row["in_principle"], "tests": []})
                g["tests"].append((row["instance"], row["valid"]))
                g["in_principle"] = g["in_principle"] and row["in_principle"]
            cases.extend(groups.values())
    if only in (None, "jsb"):
        for line in (SHARED / "jsonschemabench_dev.jsonl").open():
            row = json.loads(line)
            cases.append({"suite": "jsonschemabench", "id": row["id"], "schema": row["schema"],
                          "keywords": keywords_of(row["schema"]), "in_principle": True,
                          "tests": [(t["data"], t["valid"]) for t in row["tests"]]})
    return cases


def compile_grammar(schema, strict: bool):
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIME_LIMIT_S)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Grammar.from_json_schema(schema, strict=strict), None
    except _Timeout:
        return None, "timeout"
    except Exception as e:  # noqa: BLE001 - the bench counts every failure
        return None, f"{type(e).__name__}: {str(e)[:120]}"
    finally:
        signal.alarm(0)


def agrees(grammar, instance, valid: bool) -> bool:
    texts = {json.dumps(instance), json.dumps(instance, separators=(",", ":")),
             json.dumps(instance, ensure_ascii=False)}
    return all(grammar.matches(t) == valid for t in texts)


def failure_kind(err: str) -> str:
    if err == "timeout":
        return "timeout"
    if "remote references" in err:
        return "network"
    if "accepts no value" in err:
        return "nothing"
    return "other"


def run(cases: list[dict], verbose: bool) -> dict:
    stats = collections.defaultdict(collections.Counter)
    per_kw = collections.defaultdict(collections.Counter)
    failures = []
    t0 = time.time()
    for case in cases:
        suite = case["suite"]
        s = stats[suite]
        s["schemas"] += 1
        s["instances"] += len(case["tests"])
        strict_g, strict_err = compile_grammar(case["schema"], True)
        # strict success means no keyword was dropped: the default grammar is the same one
        default_g, default_err = (strict_g, None) if strict_g is not None else compile_grammar(case["schema"], False)
        if default_err:
            s["fail_" + failure_kind(default_err)] += 1
        for mode, g in (("strict", strict_g), ("default", default_g)):
            if g is None:
                continue
            s[f"{mode}_compiled"] += 1
            for inst, valid in case["tests"]:
                s[f"{mode}_instances"] += 1
                try:
                    ok = agrees(g, inst, valid)
                except Exception:  # noqa: BLE001
                    ok = False
                s[f"{mode}_agree"] += ok
                if not ok and mode == "default":
                    failures.append((suite, case["id"], json.dumps(inst)[:100], valid))
                for kw in case["keywords"]:
                    per_kw[(suite, kw)][f"{mode}_agree"] += ok
                    per_kw[(suite, kw)][f"{mode}_instances"] += 1
        for kw in case["keywords"]:
            per_kw[(suite, kw)]["schemas"] += 1
            per_kw[(suite, kw)]["strict_compiled"] += strict_g is not None
            per_kw[(suite, kw)]["default_compiled"] += default_g is not None
        if strict_err and verbose:
            print(f"  strict fail {suite} {case['id']}: {strict_err}", file=sys.stderr)
        if default_err and verbose:
            print(f"  DEFAULT FAIL {suite} {case['id']}: {default_err}", file=sys.stderr)
    if verbose:
        for f in failures:
            print("  disagree", *f, file=sys.stderr)
    return {"stats": stats, "per_kw": per_kw, "seconds": time.time() - t0}


def pct(a: int, b: int) -> str:
    return f"{100.0 * a / b:.1f}%" if b else "-"


def report(result: dict) -> str:
    lines = ["| suite | schemas | compiled (default) | agreement (default) | strict compiled | strict agreement "
             "| not compiled: needs network / accepts nothing / timeout / other | compiled, network-only left out |",
             "|---|---:|---:|---:|---:|---:|---|---:|"]
    for suite, s in sorted(result["stats"].items()):
        lines.append(f"| {suite} | {s['schemas']} | {pct(s['default_compiled'], s['schemas'])} | "
                     f"{pct(s['default_agree'], s['default_instances'])} ({s['default_instances']} inst.) | "
                     f"{pct(s['strict_compiled'], s['schemas'])} | "
                     f"{pct(s['strict_agree'], s['strict_instances'])} ({s['strict_instances']} inst.) | "
                     f"{s['fail_network']} / {s['fail_nothing']} / {s['fail_timeout']} / {s['fail_other']} | "
                     f"{pct(s['default_compiled'], s['schemas'] - s['fail_network'])} |")
    lines += ["", "Per keyword (schemas using it):", "",
              "| suite | keyword | schemas | compiled (default) | agreement (default) | strict compiled | strict agreement |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for (suite, kw), c in sorted(result["per_kw"].items()):
        if c["schemas"] < 3 and suite == "jsonschemabench":
            continue
        lines.append(f"| {suite} | `{kw}` | {c['schemas']} | {pct(c['default_compiled'], c['schemas'])} | "
                     f"{pct(c['default_agree'], c['default_instances'])} | {pct(c['strict_compiled'], c['schemas'])} | "
                     f"{pct(c['strict_agree'], c['strict_instances'])} |")
    lines.append(f"\n({result['seconds']:.0f} s)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["jsts", "jsb"])
    ap.add_argument("--limit", type=int, default=0, help="first N schemas per run (0 = all)")
    ap.add_argument("--match", default="", help="only cases whose id (file#group) contains this text")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each failure to stderr")
    args = ap.parse_args()
    if not SHARED.exists():
        sys.exit(f"no data at {SHARED}")
    # an empty grammar cache, so that the 10 s limit measures building, not reading a cache file
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-schema-bench-")
    cases = load(args.only)
    if args.match:
        cases = [c for c in cases if args.match in str(c["id"])]
    if args.limit:
        cases = cases[:args.limit]
    print(report(run(cases, args.verbose)))


if __name__ == "__main__":
    main()
