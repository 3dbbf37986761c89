"""Per-step cost of the sampler chain and the bitmask helpers on a 128k-vocabulary row.

Run by hand: ``python bench/sampling_bench.py [--vocab 128256] [--steps 200]``. Prints medians
(and p90) per step, and ratios against peers measured in the same run:
  * chain: halter's numpy default chain vs transformers' warpers (Temperature, TopK, TopP, MinP +
    multinomial) on a torch CPU tensor, the usual Python-side way to do the same thing;
  * bitmask: halter's apply_bitmask vs the straightforward ``logits[~unpacked] = -inf``.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np
import torch

from halter.grammar.bitmask import apply_bitmask, bool_to_bitmask
from halter.sampling import SamplingParams
from halter.sampling.device import DeviceSampler


def timeit(fn, steps: int) -> tuple[float, float]:
    for _ in range(5):
        fn()
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts)) * 1e3, float(np.percentile(ts, 90)) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--plot", metavar="PNG", help="also write the medians as a bar chart (matplotlib)")
    args = ap.parse_args()
    V, steps = args.vocab, args.steps
    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((16, V)) * 3).astype(np.float32)
    torch.set_num_threads(2)
    results = {}

    chain = SamplingParams(seed=1).build(V)
    i = [0]

    def numpy_chain():
        i[0] += 1
        chain.sample(rows[i[0] % 16], accept=True)
    results["numpy default chain"] = timeit(numpy_chain, steps)

    pen = SamplingParams(seed=1, repeat_penalty=1.1, frequency_penalty=0.1, logit_bias={5: 1.0}).build(V)

    def numpy_chain_pen():
        i[0] += 1
        pen.sample(rows[i[0] % 16], accept=True)
    results["numpy chain + penalties + logit bias"] = timeit(numpy_chain_pen, steps)

    from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                        TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    warpers = LogitsProcessorList([TopKLogitsWarper(40), TopPLogitsWarper(0.95), MinPLogitsWarper(0.05),
                                   TemperatureLogitsWarper(0.8)])
    trows = torch.from_numpy(rows)
    ids = torch.zeros((1, 1), dtype=torch.long)

    def hf_chain():
        i[0] += 1
        scores = warpers(ids, trows[i[0] % 16].unsqueeze(0).clone())
        torch.multinomial(torch.softmax(scores, -1), 1)
    results["transformers warpers (peer)"] = timeit(hf_chain, steps)

    dev = DeviceSampler(seed=1)
    dev_t = DeviceSampler(seed=1, rng="torch")

    def device_step():
        i[0] += 1
        dev.sample(trows[i[0] % 16])

    def device_step_t():
        i[0] += 1
        dev_t.sample(trows[i[0] % 16])
    results["device path, CPU tensor, llama rng"] = timeit(device_step, steps)
    results["device path, CPU tensor, torch rng"] = timeit(device_step_t, steps)
    batch = trows[:8]
    results["device path, CPU tensor, batch of 8 (per call)"] = timeit(lambda: dev_t.sample(batch), max(steps // 4, 20))

    mask = rng.random(V) < 0.3
    bm = bool_to_bitmask(mask)
    buf = rows[0].copy()
    results["apply_bitmask numpy 1 row"] = timeit(lambda: apply_bitmask(buf, bm), steps * 5)

    def naive():
        bits = np.unpackbits(bm.view(np.uint8), bitorder="little")[:V].view(bool)
        buf[~bits] = -np.inf
    results["naive unpack + boolean scatter (peer)"] = timeit(naive, steps * 5)
    tbuf = trows[0].clone()
    tbm = torch.from_numpy(bm)
    results["apply_bitmask torch CPU 1 row"] = timeit(lambda: apply_bitmask(tbuf, tbm), steps * 5)

    print(f"# vocab {V}, {steps} steps, {platform.machine()} {platform.processor() or ''}, "
          f"numpy {np.__version__}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    print(f"{'what':50s} {'median ms':>10s} {'p90 ms':>8s}")
    for k, (med, p90) in results.items():
        print(f"{k:50s} {med:10.3f} {p90:8.3f}")
    r = results
    print(f"ratio numpy chain / transformers warpers: {r['numpy default chain'][0] / r['transformers warpers (peer)'][0]:.4f}")
    print(f"ratio apply_bitmask / naive scatter:      "
          f"{r['apply_bitmask numpy 1 row'][0] / r['naive unpack + boolean scatter (peer)'][0]:.4f}")
    if args.plot:
        plot(results, V, args.plot)


def plot(results: dict[str, tuple[float, float]], vocab: int, path: str) -> None:
    """Medians as horizontal bars on a log axis, peers in grey."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(results)
    meds = [results[k][0] for k in names]
    colors = ["0.6" if "peer" in k else "tab:blue" for k in names]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    ax.barh(names, meds, color=colors)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("median ms per step (log scale)")
    ax.set_title(f"Sampling one {vocab:,}-token row (grey: peers)")
    for y, m in enumerate(meds):
        ax.text(m, y, f" {m:.3g}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot written to {path}")


if __name__ == "__main__":
    main()
