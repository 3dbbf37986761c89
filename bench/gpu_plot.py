"""Plot the tables of a GPU check's report (``gpu_check.md``, written by ``bench/gpu_bench.py``).

Left: decode tokens/s at batch 1 and 16 per mode, with the memory-bandwidth bound of a batch-1
step (weights and cache read once per step at the measured copy bandwidth) and the issue's 60%
target. Right: the ratios the targets are about (schema-constrained vs unconstrained, batch 16 vs
batch 1 per row, Q4_K vs bf16), each with its target where it has one.

    python bench/gpu_plot.py gpu_check.md docs/img/gpu_check.png
"""
from __future__ import annotations

import re
import sys


def tables(text: str) -> dict[str, list[list[str]]]:
    """``## title`` -> rows of the markdown table under it (its header and rule left out)."""
    out: dict[str, list[list[str]]] = {}
    title, header_seen = "", False
    for line in text.splitlines():
        if line.startswith("## "):
            title, header_seen = line[3:], False
            out[title] = []
        elif line.startswith("|") and title:
            if not header_seen:
                header_seen = True
            elif not set(line) <= set("|-: "):
                out[title].append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def number(cell: str) -> float:
    return float(cell.split()[0])


def main(src: str, png: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    text = open(src).read()
    t = tables(text)
    decode = next(v for k, v in t.items() if k.startswith("decode,"))
    schema = next(v for k, v in t.items() if k.startswith("schema-constrained"))
    quant = next((v for k, v in t.items() if "weights on the GPU" in k), [])
    comp = next((v for k, v in t.items() if k.startswith("batch-1 decode with the step compiled")), [])
    gpu = next(k for k in t if k.startswith("decode,")).split(",")[1].strip()

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    modes = [r[1] for r in decode if r[0] == "1"]
    tps = {(r[0], r[1]): number(r[2]) for r in decode}
    frac = {r[1]: float(r[5]) for r in decode if r[0] == "1"}
    if comp:
        modes.append(comp[-1][0])
        tps["1", comp[-1][0]] = number(comp[-1][1])
        frac[comp[-1][0]] = float(comp[-1][3])
    x = range(len(modes))
    a.bar([i - 0.2 for i in x], [tps["1", m] for m in modes], 0.4, label="batch 1")
    a.bar([i + 0.2 for i in x if ("16", modes[i]) in tps], [tps["16", m] for m in modes if ("16", m) in tps],
          0.4, label="batch 16 (all rows)")
    bound = tps["1", "cuda-graph"] / frac["cuda-graph"]
    a.axhline(bound, color="k", lw=1, ls="--", label=f"batch-1 bandwidth bound ({bound:.0f})")
    a.axhline(0.6 * bound, color="r", lw=1, ls=":", label="60% of it (target)")
    for i, m in enumerate(modes):
        a.annotate(f"{frac[m]:.2f}", (i - 0.2, tps["1", m]), ha="center", va="bottom", fontsize=8)
    a.set_yscale("log")
    a.set_xticks(list(x), modes, fontsize=8, rotation=12)
    a.set_ylabel("decode tokens/s (log)")
    a.set_title(f"random ~1B llama, bf16, {gpu}\n(labels: fraction of the bound)", fontsize=9)
    a.legend(fontsize=7)

    ratios = [("json schema / unconstrained", number(schema[-1][-1]), 0.97)]
    r16 = [r for r in decode if r[0] == "16" and r[1] == "cuda-graph"]
    if r16:
        ratios.append(("batch 16 / batch 1 (cuda-graph)", float(re.search(r"\(([\d.]+)x", r16[0][2]).group(1)), 8.0))
    for r in quant:
        if r[1] == "cuda-graph":
            ratios.append((f"Q4_K / bf16, batch {r[0]}", float(r[4]), None))
    names = [n for n, _, _ in ratios]
    b.barh(names, [v for _, v, _ in ratios], color="tab:green")
    for i, (_, v, target) in enumerate(ratios):
        b.annotate(f" {v:.3g}" + (f" (target {target:g})" if target else ""), (v, i), va="center", fontsize=8)
    b.set_xscale("log")
    b.set_title("ratios (log scale)", fontsize=9)
    b.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
