"""Extraction quality: schema-constrained generation vs unconstrained generation parsed with json.loads.

For each model and each of the 50 tasks in ``bench/extraction_tasks.py`` (a text, a JSON schema and
the expected object), the model gets the chat prompt "<instruction>\\nText: <text>" and answers
greedily twice: once under the task's JSON schema (halter's constraint), once unconstrained with
the output parsed by ``json.loads`` (strict: the whole answer, stripped; lenient: the first
``{...}`` block in it). Reported per model and mode: valid rate (parses and passes the schema),
exact-field accuracy (fields equal to the expected value: strings compared case-insensitively after
stripping, numbers numerically; invalid outputs score 0), and tokens generated.

    python bench/extraction_bench.py --model smollm2-135m-instruct --model gemma3-270m [--limit N]

``--model`` takes a GGUF path or a ``halter pull`` short name; ``--from-json`` adds results saved
by an earlier run (``--json``, written after every task), so models can run in separate processes. A file without a chat template (the
Gemma 3 270M file has none) is prompted with ``--chat-template FILE`` (e.g.
``tests/data/chat_templates/gemma3.jinja``). Writes a Markdown table to stdout,
``--json OUT`` the raw results, ``--plot PNG`` a bar chart (matplotlib).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jsonschema  # noqa: E402

import halter  # noqa: E402
from bench.extraction_tasks import tasks  # noqa: E402


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, bool) or isinstance(a, bool):
        return a is b
    if isinstance(b, (int, float)) and isinstance(a, (int, float)):
        return abs(a - b) < 1e-9
    if isinstance(a, str) and isinstance(b, str):
        return a.strip().lower() == b.strip().lower()
    return False


def _parse(text: str, lenient: bool) -> Any:
    body = text.strip()
    if lenient:
        m = re.search(r"\{.*?\}", body, re.S)
        body = m.group(0) if m else body
    return json.loads(body)


def score(text: str, task: dict, lenient: bool = False) -> tuple[bool, float]:
    """(valid, fraction of fields exactly right) of one answer."""
    try:
        value = _parse(text, lenient)
        jsonschema.validate(value, task["schema"])
    except (ValueError, jsonschema.ValidationError):
        return False, 0.0
    exp = task["expected"]
    return True, sum(_same(value.get(k), v) for k, v in exp.items()) / len(exp)


def run_model(spec: str, limit: int, max_tokens: int, template: str | None = None,
              save: Any = None, threads: int = 1, weights: str = "packed", start: int = 0) -> dict[str, Any]:
    """Both modes on ``limit`` tasks from ``start``; ``save(partial_result)`` is called after each task."""
    path = spec if os.path.isfile(spec) else str(halter.pull(spec))
    model = halter.Model.load(path, device="cpu", n_ctx=512, progress=False, n_threads=threads,
                              weights=weights)
    try:
        from halter.chat import chat_template_of
        chat_template_of(model)
        template = None                       # the file's own template wins
    except halter.HalterError:
        if template is None:
            raise
    rows = []
    for i, task in enumerate(tasks()[start:start + limit], start):
        messages = [{"role": "user", "content": f"{task['instruction']}\nText: {task['text']}"}]
        row: dict[str, Any] = {"task": i}
        for mode in ("constrained", "unconstrained"):
            kw = {"json_schema": task["schema"], "schema_options": {"whitespace": "compact"}} \
                if mode == "constrained" else {}
            t0 = time.perf_counter()
            c = halter.generate(model, messages, max_tokens=max_tokens, temperature=0.0,
                                chat_template=template, **kw)
            row[mode] = {"text": c.text, "tokens": len(c.tokens), "seconds": time.perf_counter() - t0}
        rows.append(row)
        print(f"{os.path.basename(path)} task {i}: {rows[-1]['constrained']['text']!r} | "
              f"{rows[-1]['unconstrained']['text'][:80]!r}", file=sys.stderr, flush=True)
        if save is not None:
            save({"model": os.path.basename(path), "rows": rows})
    return {"model": os.path.basename(path), "rows": rows}


def summarize(result: dict[str, Any]) -> list[dict[str, Any]]:
    all_tasks = tasks()
    out = []
    for mode, lenient in (("constrained", False), ("unconstrained", False), ("unconstrained", True)):
        valid = acc = toks = 0.0
        rows = result["rows"]
        for row in rows:
            ok, frac = score(row[mode]["text"], all_tasks[row["task"]], lenient)
            valid += ok
            acc += frac
            toks += row[mode]["tokens"]
        n = max(len(rows), 1)
        label = mode if mode == "constrained" else f"unconstrained + json.loads ({'first {...} block' if lenient else 'whole text'})"
        out.append({"model": result["model"], "mode": label, "n": len(rows), "valid": valid / n,
                    "field_accuracy": acc / n, "tokens": toks / n})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--from-json", action="append", default=[],
                    help="results saved by --json (also partial ones): tabulated and plotted with the rest")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--start", type=int, default=0, help="first task (to split a model's run over processes)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads (1: on a shared machine, idle threads spinning for work "
                         "cost more than a second thread gains)")
    ap.add_argument("--chat-template", help="Jinja file for models whose GGUF has no chat template")
    ap.add_argument("--weights", choices=("packed", "dequantize"), default="packed",
                    help="Model.load's weights= (dequantize: Gemma 3's Q6_K output layer of 262k rows "
                         "is otherwise dequantized at every token on the CPU)")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    args = ap.parse_args()
    template = open(args.chat_template, encoding="utf-8").read() if args.chat_template else None
    if not args.model and not args.from_json:
        ap.error("give --model or --from-json")
    results: list[dict[str, Any]] = []
    by_model: dict[str, dict[str, Any]] = {}
    for name in args.from_json:                  # parts of one model's run are merged
        with open(name, encoding="utf-8") as f:
            for part in json.load(f)["results"]:
                merged = by_model.setdefault(part["model"], {"model": part["model"], "rows": {}})
                merged["rows"].update({row["task"]: row for row in part["rows"]})
    results += [{"model": r["model"], "rows": [r["rows"][k] for k in sorted(r["rows"])]}
                for r in by_model.values()]

    def save(partial: dict[str, Any]) -> None:       # after every task: a killed run keeps its rows
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"results": results + [partial]}, f, indent=1)

    for m in args.model:
        results.append(run_model(m, args.limit, args.max_tokens, template, save, args.threads,
                                 args.weights, args.start))
    table = [s for r in results for s in summarize(r)]
    print("| model | mode | tasks | valid | exact-field accuracy | tokens (mean) |")
    print("|---|---|---:|---:|---:|---:|")
    for s in table:
        print(f"| {s['model']} | {s['mode']} | {s['n']} | {s['valid']:.0%} | {s['field_accuracy']:.0%} | "
              f"{s['tokens']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "summary": table}, f, indent=1)
    if args.plot:
        plot(table, args.plot)
    return 0


def plot(table: list[dict[str, Any]], path: str) -> None:
    """Valid rate and exact-field accuracy (left), mean tokens generated (right), as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax_t) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    def name(s: dict[str, Any]) -> str:
        return re.sub(r"-(instruct|q\d\w*)$", "", s["model"].split(".")[0], flags=re.I)

    def mode(s: dict[str, Any]) -> str:
        return "free, lenient" if "block" in s["mode"] else "free" if "whole" in s["mode"] else "constrained"

    labels = [f"{name(s)}\n{mode(s)}" for s in table]
    counts = ", ".join(dict.fromkeys(f"{name(s)} {s['n']}" for s in table))
    xs = list(range(len(table)))
    ax.bar([x - 0.2 for x in xs], [s["valid"] for s in table], 0.4, label="valid")
    ax.bar([x + 0.2 for x in xs], [s["field_accuracy"] for s in table], 0.4, label="exact-field accuracy")
    ax.set_xticks(xs, labels, fontsize=6, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title(f"Extraction, greedy: schema-constrained vs free + json.loads (tasks: {counts})",
                 fontsize=8)
    ax_t.bar(xs, [s["tokens"] for s in table], 0.6, color="tab:gray")
    ax_t.set_xticks(xs, labels, fontsize=6, rotation=30, ha="right")
    ax_t.set_title("tokens generated (mean per task)", fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    sys.exit(main())
