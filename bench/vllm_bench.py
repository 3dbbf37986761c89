"""vLLM with halter's logits processor vs vLLM's built-in ``xgrammar`` and ``guidance`` backends vs no
constraint: the same batch of JSON-Schema requests through ``vllm.LLM`` (the CPU build here).

Schemas: 100 real schemas from JSONSchemaBench (``../shared/schema/jsonschemabench_dev.jsonl``, every
third row, so all ten subsets come in: the rows ``bench/schema_mask_bench.py`` and
``bench/schema_generate_bench.py`` take). One request per schema: the model's chat template, a user
message asking for one JSON value valid under the schema (the schema's compact JSON text in the
prompt, cut at ``--prompt-chars``; the constraint always carries the whole schema), greedy,
``--max-tokens``. Constraints: halter through ``SamplingParams.extra_args={"halter": {"json_schema":
S}}`` and ``HalterLogitsProcessor``; the built-ins through
``SamplingParams(structured_outputs=StructuredOutputsParams(json=S))`` with
``LLM(structured_outputs_config={"backend": "xgrammar" | "guidance"})``; ``none``: no constraint.
Flexible whitespace everywhere (each backend's default); objects closed everywhere (properties a schema
does not declare are not generated: xgrammar's default ``strict_mode``, halter's ``closed_objects``
option, guidance's ``disable_additional_properties``), unless ``--open-objects`` (each backend's
default: halter and guidance then allow undeclared properties, as JSON Schema does, and a small model
tends to echo the schema's own keys into the output until ``max_tokens``).

Each (round, mode) runs in a fresh child process (``--rounds`` rounds, the mode order rotated each
round) with an in-process engine (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so the compile calls can be
timed) and an empty ``HALTER_CACHE_DIR``. The child first runs one warm-up request through the same
path (a small schema not in the set: the engine's first forward pass, the backend's tokenizer set-up,
halter's vocabulary and token trie), then submits the whole batch with ``LLMEngine.add_request`` and
steps the engine until every request is done (continuous batching, ``--max-num-seqs``).

Per request, one outcome: ``refused`` (the backend refuses the schema when the request is submitted,
or its grammar fails to compile in the engine), ``incomplete`` (cut by ``max_tokens``), ``invalid``
(ended, but not JSON or not valid under the schema: ``jsonschema`` with its format checker) or
``valid``. Per mode: output tokens per second over the whole batch (wall time from the first
submission to the last output; refused requests produce no tokens), and per-request compile time:
the wall time of the backend's own compile call inside the engine, on the thread the engine compiles
on, while the engine decodes other requests (halter: ``GrammarCache`` compiling the constraint,
i.e. schema to grammar plus grammar to token tables; built-ins: vLLM's
``StructuredOutputManager._create_grammar``, i.e. ``backend.compile_grammar``). Tables give the
median over rounds of each round's figures.

Run (in the vLLM venv, docs/integrations.md):
``nice python bench/vllm_bench.py --model /work/models/SmolLM2-135M-Instruct.Q4_1.gguf``
(a GGUF is converted to a Hugging Face folder once, under ``--work``); ``--modes
halter,xgrammar,guidance,none``, ``--schemas 100``, ``--max-tokens 256``, ``--rounds 2``. Writes
``--out`` JSON (every request's outcome) and the ``--plot`` PNG; ``--budget S`` stops a child's
batch after S seconds (the rest counted ``unfinished``); ``--summarize OUT`` prints the
tables again. ``--refusals-only``: only which schemas each mode refuses at submission (no engine).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("HALTER_SHARED_DIR") or ROOT.parent / "shared")
MODES = ["halter", "xgrammar", "guidance", "none"]
OUTCOMES = ["valid", "invalid", "incomplete", "refused", "unfinished"]
WARMUP_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def load_schemas(path: Path, n: int) -> list[dict]:
    """Every third row of the file, the first ``n`` of them."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [{"id": r["id"], "subset": r.get("subset", ""), "schema": r["schema"]} for r in rows[::3][:n]]


def model_folder(model: str, work: Path) -> Path:
    p = Path(model)
    if p.suffix != ".gguf":
        return p
    out = work / (p.stem + "-hf")
    if not (out / "config.json").exists():
        from halter.integrations.hf_export import gguf_to_hf
        gguf_to_hf(p, out)
    return out


def check(text: str, schema: dict) -> bool:
    import jsonschema
    try:
        value = json.loads(text)
    except ValueError:
        return False
    try:
        cls = jsonschema.validators.validator_for(schema)
        return not any(True for _ in cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    except Exception:
        return False


def canonical(schema: dict) -> str:
    """The text halter's constraint parser keys a schema by."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


# -- child: one mode, one fresh engine ---------------------------------------------------------------

def run_child(mode: str, folder: Path, rows: list[dict], args: argparse.Namespace) -> dict:
    import vllm
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    compiles: list[dict] = []          # {"key": request id or schema text, "s": seconds, "ok": bool}
    kwargs: dict = dict(model=str(folder), dtype="float32", max_model_len=args.max_model_len,
                        max_num_seqs=args.max_num_seqs, enforce_eager=True, seed=0)
    if mode == "halter":
        kwargs["logits_processors"] = ["halter.integrations.vllm:HalterLogitsProcessor"]
    elif mode in ("xgrammar", "guidance"):
        kwargs["structured_outputs_config"] = {"backend": mode}
        if mode == "guidance" and not args.open_objects:
            kwargs["structured_outputs_config"]["disable_additional_properties"] = True
        from vllm.v1.structured_output import StructuredOutputManager
        original = StructuredOutputManager._create_grammar

        def timed(self, request, _orig=original):
            t0 = time.perf_counter()
            try:
                out = _orig(self, request)
            except Exception:
                compiles.append({"key": request.request_id, "s": time.perf_counter() - t0, "ok": False})
                raise
            compiles.append({"key": request.request_id, "s": time.perf_counter() - t0, "ok": True})
            return out
        StructuredOutputManager._create_grammar = timed
    elif mode != "none":
        raise SystemExit(f"unknown mode {mode!r}")

    def time_halter_compiles() -> None:
        # after the engine is up: halter imports numba, and vLLM's CPU worker start-up scans every
        # loaded module in a way llvmlite's library wrapper breaks (an in-process engine only)
        from halter.integrations.constraints import GrammarCache
        original = GrammarCache._compile

        def timed(constraint, vocab, _orig=original):
            if not hasattr(vocab, "fingerprint"):
                vocab = vocab()                 # the processor's vocabulary: set-up, not compile
            t0 = time.perf_counter()
            try:
                out = _orig(constraint, vocab)
            except Exception:
                compiles.append({"key": constraint.source, "s": time.perf_counter() - t0, "ok": False})
                raise
            compiles.append({"key": constraint.source, "s": time.perf_counter() - t0, "ok": True})
            return out
        GrammarCache._compile = staticmethod(timed)

    def params(schema: dict, max_tokens: int) -> SamplingParams:
        p = SamplingParams(max_tokens=max_tokens, temperature=0.0)
        if mode == "halter":
            p.extra_args = {"halter": {"json_schema": schema,
                                       "options": {} if args.open_objects else {"closed_objects": True}}}
        elif mode != "none":
            p.structured_outputs = StructuredOutputsParams(json=schema)
        return p

    t_start = time.perf_counter()
    llm = vllm.LLM(**kwargs)
    if mode == "halter":
        time_halter_compiles()
    tok = llm.get_tokenizer()

    def prompt(schema: dict) -> str:
        text = json.dumps(schema, separators=(",", ":"))
        if len(text) > args.prompt_chars:
            text = text[:args.prompt_chars] + " ... (cut)"
        return tok.apply_chat_template(
            [{"role": "user", "content": "Reply with one JSON value that is valid under this JSON Schema, "
                                         "and nothing else.\nSchema: " + text}],
            tokenize=False, add_generation_prompt=True)

    warm = llm.generate([prompt(WARMUP_SCHEMA)], [params(WARMUP_SCHEMA, 16)], use_tqdm=False)
    engine_start_s = time.perf_counter() - t_start
    compiles.clear()
    engine = llm.llm_engine
    results: dict[int, dict] = {}
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        try:
            engine.add_request(str(i), prompt(row["schema"]), params(row["schema"], args.max_tokens))
        except Exception as exc:       # the backend refuses the schema up front
            results[i] = {"outcome": "refused", "why": f"submission: {type(exc).__name__}: {str(exc)[:300]}",
                          "tokens": 0}
    submit_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    outputs = {}
    while engine.has_unfinished_requests():
        if args.budget and time.perf_counter() - t0 > args.budget:
            # out of time: stop the rest; their output so far still counts as generated tokens
            engine.abort_request([str(i) for i in range(len(rows)) if i not in results
                                  and not (i in outputs and outputs[i].finished)])
            break
        for out in engine.step():
            outputs[int(out.request_id)] = out        # cumulative output, finished or not
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    failed_halter = {c["key"] for c in compiles if not c["ok"]} if mode == "halter" else set()
    for i, row in enumerate(rows):
        if i in results:
            continue
        if i not in outputs:
            results[i] = {"outcome": "unfinished", "tokens": 0}
            continue
        c = outputs[i].outputs[0]
        r = {"tokens": len(c.token_ids), "finish": str(c.finish_reason), "text": c.text[:2000]}
        if not outputs[i].finished:
            r["outcome"] = "unfinished"
        elif c.finish_reason not in ("stop", "length") or canonical(row["schema"]) in failed_halter:
            r["outcome"], r["why"] = "refused", f"in the engine: finish_reason {c.finish_reason}"
        elif c.finish_reason == "length":
            r["outcome"] = "incomplete"
        else:
            r["outcome"] = "valid" if check(c.text, row["schema"]) else "invalid"
        results[i] = r
    tokens = sum(r["tokens"] for r in results.values())
    engine.engine_core.shutdown()
    return {"mode": mode, "n": len(rows), "engine_start_s": engine_start_s, "submit_s": submit_s,
            "wall_s": wall, "cpu_s": cpu, "tokens": tokens, "tokens_per_s": tokens / wall,
            "tokens_per_cpu_s": tokens / cpu if cpu else None,
            "compile_s": sorted(c["s"] for c in compiles),
            "warmup_text": warm[0].outputs[0].text,
            "counts": {o: sum(r["outcome"] == o for r in results.values()) for o in OUTCOMES},
            "requests": [results[i] for i in range(len(rows))]}


# -- parent -------------------------------------------------------------------------------------------

def refusals(rows: list[dict]) -> dict:
    """Which schemas each mode takes, without an engine: vLLM's own request validation for the
    built-in backends (what ``LLM.generate`` runs before queueing), ``Grammar.from_json_schema``
    for halter (what its ``validate_params`` runs)."""
    import warnings

    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output.backend_guidance import validate_guidance_grammar
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

    from halter.grammar import Grammar
    refused: dict[str, list[str]] = {"halter": [], "xgrammar": [], "guidance": []}
    for row in rows:
        params = SamplingParams(structured_outputs=StructuredOutputsParams(json=row["schema"]))
        for mode, fn in (("xgrammar", validate_xgrammar_grammar), ("guidance", validate_guidance_grammar)):
            try:
                fn(params)
            except Exception as exc:
                refused[mode].append(f"{row['id']}: {str(exc)[:160]}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                Grammar.from_json_schema(row["schema"])
        except Exception as exc:
            refused["halter"].append(f"{row['id']}: {str(exc)[:160]}")
    return refused


def _q(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


def per_mode(runs: list[dict]) -> list[dict]:
    """Median over rounds of each round's figures, per mode (in the order modes first ran)."""
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    out = []
    for mode in modes:
        rs = [r for r in runs if r["mode"] == mode]
        med = lambda key: statistics.median(key(r) for r in rs)  # noqa: E731
        cs = [r["compile_s"] for r in rs if r["compile_s"]]
        out.append({
            "mode": mode, "rounds": len(rs), "n": rs[0]["n"],
            "counts": {o: med(lambda r, o=o: r["counts"].get(o, 0)) for o in OUTCOMES},
            "counts_per_round": [r["counts"] for r in rs],
            "tokens": med(lambda r: r["tokens"]), "wall_s": med(lambda r: r["wall_s"]),
            "tokens_per_s": med(lambda r: r["tokens_per_s"]),
            "tokens_per_s_rounds": [round(r["tokens_per_s"], 1) for r in rs],
            "tokens_per_cpu_s": med(lambda r: r.get("tokens_per_cpu_s") or float("nan")),
            "engine_start_s": med(lambda r: r["engine_start_s"]),
            "compile_n": statistics.median(len(c) for c in cs) if cs else 0,
            "compile_ms": {k: statistics.median(f(c) * 1e3 for c in cs) if cs else None
                           for k, f in (("median", statistics.median), ("p90", lambda c: _q(c, 0.9)),
                                        ("max", max), ("total", sum))},
        })
    return out


def table(summary: list[dict]) -> str:
    lines = ["| mode | valid | invalid | incomplete (cut at max_tokens) | refused | unfinished (time budget) | "
             "output tokens | wall s | output tokens/s (per round) | per CPU s | compile ms median / p90 / max | "
             "compiles |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        c, cm = s["counts"], s["compile_ms"]
        comp = (f"{cm['median']:.0f} / {cm['p90']:.0f} / {cm['max']:.0f}" if cm["median"] is not None else "-")
        lines.append(f"| {s['mode']} | {c['valid']:g} | {c['invalid']:g} | {c['incomplete']:g} | {c['refused']:g} | "
                     f"{c.get('unfinished', 0):g} | {s['tokens']:.0f} | {s['wall_s']:.0f} | {s['tokens_per_s']:.1f} "
                     f"({', '.join(f'{t:g}' for t in s['tokens_per_s_rounds'])}) | {s['tokens_per_cpu_s']:.1f} | "
                     f"{comp} | {s['compile_n']:g} |")
    return "\n".join(lines)


def plot(summary: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.8))
    modes = [s["mode"] for s in summary]
    colors = {"valid": "#4a7", "invalid": "#e94", "incomplete": "#bbb", "refused": "#c44", "unfinished": "#eee"}
    bottom = [0.0] * len(modes)
    for o in OUTCOMES:
        vals = [s["counts"][o] for s in summary]
        a.bar(modes, vals, bottom=bottom, color=colors[o], label=o)
        bottom = [x + y for x, y in zip(bottom, vals)]
    a.set_title(f"outcome of {summary[0]['n']} requests")
    a.legend(fontsize=7, loc="lower right")
    b.bar(modes, [s["tokens_per_s"] for s in summary], color="#47a")
    b.set_title("output tokens/s, whole batch")
    cm = [s for s in summary if s["compile_ms"]["median"] is not None]
    c.bar([s["mode"] for s in cm], [s["compile_ms"]["median"] for s in cm], color="#a7c", label="median")
    c.scatter([s["mode"] for s in cm], [s["compile_ms"]["p90"] for s in cm], color="k", marker="_", s=400,
              label="p90")
    if cm:                               # (an unconstrained run alone compiles nothing)
        c.set_yscale("log")
    c.set_title("compile ms per request (in the engine)")
    c.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def summarize(data: dict, plot_path: Path | None) -> None:
    summary = per_mode(data["runs"])
    print(f"model {data['model']}, {data['n']} schemas, max_tokens {data['max_tokens']}, "
          f"{data['rounds']} round(s), order per round: {data['orders']}")
    print(table(summary))
    for s in summary:
        print(f"{s['mode']}: engine start + warm-up {s['engine_start_s']:.0f} s; outcomes per round "
              f"{s['counts_per_round']}")
    if plot_path:
        plot(summary, plot_path, f"vLLM {data.get('vllm', '')} CPU, {Path(data['model']).name}, {data['n']} "
             f"JSONSchemaBench schemas, greedy, max_tokens {data['max_tokens']}, median of {data['rounds']} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="Hugging Face folder or GGUF file")
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--schema-file", default=str(SHARED / "schema" / "jsonschemabench_dev.jsonl"))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--prompt-chars", type=int, default=1500, help="cut the schema text in the prompt here")
    ap.add_argument("--open-objects", action="store_true",
                    help="each backend's default object semantics (halter and guidance: undeclared properties "
                         "allowed; xgrammar: not) instead of closed objects everywhere")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for a child's batch: then the unfinished requests are aborted and "
                         "counted as 'unfinished' (0: no limit)")
    ap.add_argument("--refusals-only", action="store_true",
                    help="only count the schemas each mode refuses at submission (no engine)")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "halter-vllm-bench"))
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "halter-vllm-bench" / "results.json"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "img" / "vllm_bench.png"))
    ap.add_argument("--summarize", metavar="OUT", help="print the tables of an earlier --out file (and plot)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.summarize:
        summarize(json.loads(Path(args.summarize).read_text()), Path(args.plot) if args.plot else None)
        return
    if not args.model:
        ap.error("--model is required")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = load_schemas(Path(args.schema_file), args.schemas)
    if args.child:
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "3")
        os.environ["HALTER_VLLM_PLUGIN"] = "0"          # only the processor a mode names
        with tempfile.TemporaryDirectory(prefix="cache-", dir=work) as cache:
            os.environ["HALTER_CACHE_DIR"] = cache
            res = run_child(args.child, Path(args.model), rows, args)
        Path(args.child_out).write_text(json.dumps(res))
        return
    folder = model_folder(args.model, work)
    if args.refusals_only:
        refused = refusals(rows)
        print(f"| mode | refused of {len(rows)} |\n|---|---|")
        for mode, items in refused.items():
            print(f"| {mode} | {len(items)} |")
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(refused, indent=1))
        return
    import vllm
    modes = args.modes.split(",")
    data = {"model": args.model, "vllm": vllm.__version__, "n": len(rows), "ids": [r["id"] for r in rows],
            "max_tokens": args.max_tokens, "open_objects": args.open_objects, "rounds": args.rounds, "orders": [], "runs": []}
    for rnd in range(args.rounds):
        order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
        if rnd % 2:
            order = order[::-1]
        data["orders"].append(order)
        for mode in order:
            child_out = work / f"child-{rnd}-{mode}.json"
            child_out.unlink(missing_ok=True)
            cmd = [sys.executable, __file__, "--child", mode, "--child-out", str(child_out), "--model", str(folder),
                   "--schemas", str(args.schemas), "--schema-file", args.schema_file,
                   "--max-tokens", str(args.max_tokens), "--max-num-seqs", str(args.max_num_seqs),
                   "--max-model-len", str(args.max_model_len), "--prompt-chars", str(args.prompt_chars),
                   "--work", str(work), "--budget", str(args.budget)] + (["--open-objects"] if args.open_objects else [])
            t0 = time.perf_counter()
            log = work / f"child-{rnd}-{mode}.log"
            with open(log, "w") as f:
                try:
                    rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
            if rc != 0 or not child_out.exists():
                print(f"round {rnd} {mode}: child failed ({rc}); log {log}", file=sys.stderr, flush=True)
                continue
            res = json.loads(child_out.read_text())
            res["round"] = rnd
            data["runs"].append(res)
            print(f"round {rnd} {mode}: {res['counts']} {res['tokens']} tokens in {res['wall_s']:.0f} s "
                  f"({res['tokens_per_s']:.1f}/s), child {time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(data, indent=1))
    summarize(data, Path(args.plot) if args.plot else None)


if __name__ == "__main__":
    main()
