"""Serving throughput and time to first token: concurrent clients with per-request schemas.

Starts ``python -m halter serve`` (a subprocess, ``--parallel 16``) on a loopback port with a GGUF
file (default: a tiny random llama model built here) and sends the same set of chat requests, each
with its own JSON Schema in ``response_format`` (a constant id and a free string, so outputs run
to ``max_tokens``), streamed with ``stream_options.include_usage``:

* at 1 client (one request after another: the sequential baseline), then 4 and 16 clients;
  each level sends the same ``--requests`` requests (same seeds, same schemas);
* a warm-up round first compiles every schema once (the server keeps compiled grammars), so the
  levels compare decoding, not first-time compilation.

Reported per level: output tokens/s (sum of usage.completion_tokens over wall time), time to first
content token p50/p99 (client side, from sending the request), the speed-up over 1 client, and
the server process's CPU time per output token (user + system, from /proc: less sensitive to
other load on a shared machine than wall time). Levels are run ``--rounds`` times interleaved
(1, 4, 16, 1, 4, 16, ...); the median round is reported, and the speed-up is the median over rounds
of the ratio to the 1-client level of the same round. With ``--llama-python PATH`` (a Python with ``llama-cpp-python[server]``) the same
requests also go to ``python -m llama_cpp.server`` on the same GGUF (``n_parallel``-less: it
serves one request at a time). ``--plot PNG`` writes a bar chart.

Run: ``python bench/serve_bench.py [--model GGUF] [--requests 32] [--max-tokens 48] [--rounds 3]
[--llama-python /work/venvs/llama/bin/python] [--plot docs/img/serve_bench.png]``.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not start")


def schema(i: int) -> dict:
    return {"type": "object", "properties": {"id": {"const": i}, "note": {"type": "string"}},
            "required": ["id", "note"], "additionalProperties": False}


def body(i: int, max_tokens: int, constrained: bool = True, envelope: str = "json_schema") -> dict:
    """Request ``i``; ``envelope="json_object"`` sends the schema as ``{"type": "json_object",
    "schema": ...}``, the form llama-cpp-python's server honours (it ignores ``json_schema``)."""
    b = {"model": "m", "messages": [{"role": "user", "content": f"Record {i}, with a note."}],
         "max_tokens": max_tokens, "seed": i, "temperature": 0.8, "stream": True,
         "stream_options": {"include_usage": True}}
    if constrained and envelope == "json_object":
        b["response_format"] = {"type": "json_object", "schema": schema(i)}
    elif constrained:
        b["response_format"] = {"type": "json_schema", "json_schema": {"name": f"r{i}", "schema": schema(i)}}
    return b


def one(client: httpx.Client, url: str, payload: dict) -> tuple[float, int]:
    """(seconds to the first content token, completion tokens) of one streamed request."""
    t0 = time.perf_counter()
    ttft, tokens, pieces = None, 0, 0
    with client.stream("POST", url + "/v1/chat/completions", json=payload, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                pieces += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    # a server that reports no usage in the stream (llama-cpp-python): one chunk per token
    return (ttft if ttft is not None else time.perf_counter() - t0), tokens or pieces


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` and its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def level(url: str, clients: int, payloads: list[dict], pid: int) -> dict:
    with httpx.Client() as client, ThreadPoolExecutor(clients) as pool:
        t0, c0 = time.perf_counter(), cpu_seconds(pid)
        results = list(pool.map(lambda p: one(client, url, p), payloads))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    return {"clients": clients, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall,
            "cpu_ms_tok": cpu * 1e3 / max(tokens, 1),
            "ttft_p50": statistics.median(ttfts), "ttft_p99": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))]}


def start(cmd: list[str], url: str, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_ready(url, proc)
    except Exception:
        proc.kill()
        print(log.read_text()[-2000:], file=sys.stderr)
        raise
    return proc


def run_levels(url: str, args: argparse.Namespace, constrained: bool, levels: list[int], pid: int,
               envelope: str = "json_schema") -> dict[int, dict]:
    """Per level: the median round, plus ``speedup``, the median over rounds of its throughput
    over the first level's in the same round."""
    payloads = [body(i, args.max_tokens, constrained, envelope) for i in range(args.requests)]
    level(url, max(levels), payloads, pid)                # warm-up: compiles every schema once
    rounds: dict[int, list[dict]] = {c: [] for c in levels}
    for _ in range(args.rounds):
        for c in levels:
            rounds[c].append(level(url, c, payloads, pid))
    out = {}
    for c, rs in rounds.items():
        row = dict(sorted(rs, key=lambda r: r["tok_s"])[len(rs) // 2])
        row["speedup"] = statistics.median(r["tok_s"] / b["tok_s"] for r, b in zip(rs, rounds[levels[0]]))
        out[c] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF file (default: a tiny random llama model)")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--llama-python", help="a Python with llama-cpp-python[server], for the peer server")
    ap.add_argument("--plot", help="write a PNG bar chart here")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="serve_bench_"))
    model = args.model
    if model is None:
        sys.path.insert(0, str(ROOT))
        from halter.engine import build_tiny_gguf
        model = build_tiny_gguf(tmp / "tiny.gguf", seed=3)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "halter", "serve", "-m", str(model), "--port", str(port),
           "--parallel", str(args.parallel), "-c", str(args.parallel * 1024), "--device", args.device,
           "--log-level", "warning"] + (["-t", str(args.threads)] if args.threads else [])
    proc = start(cmd, url, tmp / "halter.log")
    try:
        halter_rows = run_levels(url, args, True, levels, proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    peer_rows = None
    if args.llama_python:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [args.llama_python, "-m", "llama_cpp.server", "--model", str(model), "--port", str(port),
               "--n_ctx", "2048", "--verbose", "False",
               "--interrupt_requests", "False"] + (["--n_threads", str(args.threads)] if args.threads else [])
        proc = start(cmd, url, tmp / "llama.log")
        try:
            peer_rows = run_levels(url, args, True, levels, proc.pid, envelope="json_object")
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"{args.requests} requests x max_tokens {args.max_tokens}, per-request schemas, median of {args.rounds} rounds")
    print("| server | clients | output tok/s | x 1 client (same round) | server CPU ms/token | "
          "TTFT p50 ms | TTFT p99 ms | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows in (("halter", halter_rows), ("llama-cpp-python", peer_rows)):
        if rows is None:
            continue
        for c in levels:
            r = rows[c]
            print(f"| {name} | {c} | {r['tok_s']:.1f} | {r['speedup']:.2f} | {r['cpu_ms_tok']:.2f} | "
                  f"{r['ttft_p50'] * 1e3:.0f} | {r['ttft_p99'] * 1e3:.0f} | {r['wall_s']:.2f} |")
    print(f"{levels[-1]}-client / {levels[0]}-client throughput: {halter_rows[levels[-1]]['speedup']:.2f}x "
          f"(median over rounds); server CPU per token: "
          f"{halter_rows[levels[0]]['cpu_ms_tok'] / halter_rows[levels[-1]]['cpu_ms_tok']:.2f}x less")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
        servers = [("halter", halter_rows)] + ([("llama-cpp-python", peer_rows)] if peer_rows else [])
        width = 0.8 / len(servers)
        for k, (name, rows) in enumerate(servers):
            xs = [i + k * width for i in range(len(levels))]
            a1.bar(xs, [rows[c]["tok_s"] for c in levels], width, label=name)
            a2.bar(xs, [rows[c]["ttft_p50"] * 1e3 for c in levels], width, label=name)
        for ax, title in ((a1, "output tokens/s"), (a2, "TTFT p50 (ms)")):
            ax.set_xticks([i + width * (len(servers) - 1) / 2 for i in range(len(levels))], [str(c) for c in levels])
            ax.set_xlabel("concurrent clients")
            ax.set_title(title)
        a1.legend()
        fig.tight_layout()
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=100)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
