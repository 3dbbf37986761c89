#!/usr/bin/env python
"""halter's samplers against llama.cpp's own, case by case, on random and edge inputs.

    PYTHONPATH=$PWD python bench/sampler_diff.py --llama-venv /work/venvs/llama \\
        --vocab ../shared/vocab/ggml-vocab-llama-spm.gguf --cases 10000 [--freeze tests/data/sampler_parity.json]

llama.cpp runs through llama-cpp-python's ctypes API (``llama_sampler_init_*``, chains,
``llama_sampler_apply`` on a ``llama_token_data_array`` built from numpy, ``llama_sampler_accept``);
halter runs the same samplers with the same parameters and seeds on the same arrays. Every case
compares the candidates left (ids, logits and probabilities bit for bit, size, ``sorted``) and
the selected token, step after step for samplers with state. Inputs: logits that are gaussian,
tied, all equal, with ``-inf`` entries, peaked, or so wide that ``expf`` underflows; 64 to 128k
candidates, in vocabulary order, shuffled, or sorted; each parameter's edge values; chains of
random samplers in random order. ``--freeze`` writes a compact table of small interesting cases
with llama.cpp's outputs, which ``tests/test_sampling_parity.py`` replays without llama.cpp.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from collections import Counter, defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_samplers import LlamaSamplers  # noqa: E402

from halter.sampling import (Candidates, Dist, Dry, GrammarSampler, Greedy, LogitBias,  # noqa: E402
                             MinP, Mirostat, MirostatV2, Penalties, SamplerChain, TempExt, Temperature,
                             TopK, TopNSigma, TopP, Typical, Xtc)

SAMPLERS = ["greedy", "dist", "top_k", "top_p", "min_p", "typical", "temp", "temp_ext", "xtc", "top_n_sigma",
            "mirostat", "mirostat_v2", "penalties", "dry", "logit_bias", "grammar", "chain"]
STATEFUL = {"dist", "xtc", "mirostat", "mirostat_v2", "penalties", "dry", "chain"}
SELECTORS = {"greedy", "dist", "mirostat", "mirostat_v2"}
GRAMMARS = [
    'root ::= [^\\n]+ "\\n"',
    'root ::= "{" ws "\\"a\\"" ws ":" ws num ws "}"\nnum ::= "-"? [0-9]+ ("." [0-9]+)?\nws ::= [ \\t\\n]*',
    'root ::= ("yes" | "no" | "maybe") "."',
    'root ::= [a-z]+ (" " [a-z]+)*',
    'root ::= "<" [A-Za-z_]+ ">" [^<]* "</" [A-Za-z_]+ ">"',
    'root ::= [0-9]{1,4} ("," [0-9]{1,4})*',
]


# -- inputs -----------------------------------------------------------------------------------------

def rand_size(rng: np.random.Generator, cap: int) -> int:
    r = rng.random()
    lo, hi = (64, 2048) if r < 0.85 else ((2048, 32768) if r < 0.98 else (32768, 131072))
    return int(min(cap, np.exp(rng.uniform(np.log(lo), np.log(hi)))))


def rand_logits(rng: np.random.Generator, n: int) -> tuple[str, np.ndarray]:
    shape = rng.choice(["gaussian", "ties", "equal", "neginf", "peaked", "wide"])
    if shape == "gaussian":
        x = rng.normal(0, rng.choice([0.3, 1.0, 3.0, 10.0]), n)
    elif shape == "ties":
        x = rng.integers(-8, 9, n) * rng.choice([0.25, 0.5, 1.0, 2.0])
    elif shape == "equal":
        x = np.full(n, rng.choice([0.0, -3.5, 12.0]))
    elif shape == "neginf":
        x = rng.normal(0, 2, n)
        frac = rng.choice([0.01, 0.5, 0.99])
        x[rng.random(n) < frac] = -np.inf
        if np.isinf(x).all():
            x[rng.integers(n)] = 0.0
    elif shape == "peaked":
        x = rng.normal(0, 1, n)
        x[rng.integers(n, size=rng.integers(1, 4))] += rng.choice([5.0, 20.0, 100.0])
    else:
        x = rng.uniform(-200, 50, n)
    return shape, x.astype(np.float32)


def rand_candidates(rng: np.random.Generator, n_vocab: int | None, cap: int = 131072) -> dict:
    """One ``llama_token_data_array``: ids, logits, p = 0, sorted flag."""
    n = rand_size(rng, cap if n_vocab is None else min(cap, n_vocab))
    shape, logits = rand_logits(rng, n)
    vocab = n if n_vocab is None else n_vocab
    order = rng.choice(["identity", "shuffled", "sorted"], p=[0.5, 0.3, 0.2])
    if order == "identity":
        ids = np.arange(n, dtype=np.int32)
        if n_vocab is not None and n < n_vocab:
            ids = np.arange(n, dtype=np.int32)
    else:
        ids = rng.choice(vocab, size=n, replace=False).astype(np.int32) if vocab > n else \
            rng.permutation(n).astype(np.int32)
    srt = False
    if order == "sorted":
        o = np.argsort(-logits, kind="stable")
        ids, logits, srt = ids[o], logits[o], True
    return {"ids": ids, "logits": logits, "p": np.zeros(n, dtype=np.float32), "sorted": srt,
            "shape": str(shape), "order": str(order)}


def pick(rng, edges, rand):
    return edges[rng.integers(len(edges))] if rng.random() < 0.6 else rand()


def rand_params(rng: np.random.Generator, name: str, ctx: dict) -> dict:
    mk = lambda: int(pick(rng, [0, 1, 2, 5, 100, 300], lambda: rng.integers(0, 50)))  # noqa: E731
    seed = int(rng.integers(0, 2**32 - 1))
    if name in ("greedy",):
        return {}
    if name == "dist":
        return {"seed": seed}
    if name == "top_k":
        return {"k": int(pick(rng, [-1, 0, 1, 2, 40, 127, 128, 129, 256, 1000, 10**6], lambda: rng.integers(1, 500)))}
    if name == "top_p":
        return {"p": float(pick(rng, [0.0, 1e-6, 0.1, 0.5, 0.9, 0.95, 0.999, 1.0, 1.5], lambda: rng.random())),
                "min_keep": mk()}
    if name == "min_p":
        return {"p": float(pick(rng, [-0.1, 0.0, 1e-9, 0.05, 0.5, 0.99, 1.0, 1.5], lambda: rng.random())),
                "min_keep": mk()}
    if name == "typical":
        return {"p": float(pick(rng, [0.0, 0.2, 0.5, 0.9, 0.99, 1.0], lambda: rng.random())), "min_keep": mk()}
    if name == "temp":
        return {"t": float(pick(rng, [-1.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 100.0], lambda: rng.uniform(0, 3)))}
    if name == "temp_ext":
        return {"t": float(pick(rng, [0.0, 0.5, 0.8, 1.0, 2.0], lambda: rng.uniform(0, 3))),
                "delta": float(pick(rng, [-1.0, 0.0, 0.1, 0.5, 1.0, 5.0], lambda: rng.uniform(0, 2))),
                "exponent": float(pick(rng, [0.0, 0.5, 1.0, 2.0], lambda: rng.uniform(0, 3)))}
    if name == "xtc":
        return {"p": float(pick(rng, [0.0, 0.5, 1.0], lambda: rng.random())),
                "t": float(pick(rng, [0.0, 0.05, 0.1, 0.5, 0.51], lambda: rng.uniform(0, 0.6))),
                "min_keep": mk(), "seed": seed}
    if name == "top_n_sigma":
        return {"n": float(pick(rng, [-1.0, 0.0, 0.5, 1.0, 2.0, 3.0], lambda: rng.uniform(0, 5)))}
    if name == "mirostat":
        return {"n_vocab": int(ctx["n_vocab"]), "seed": seed,
                "tau": float(pick(rng, [0.0, 1.0, 3.0, 5.0, 10.0], lambda: rng.uniform(0, 10))),
                "eta": float(pick(rng, [0.0, 0.1, 1.0], lambda: rng.random())),
                "m": int(pick(rng, [1, 2, 100], lambda: rng.integers(1, 200)))}
    if name == "mirostat_v2":
        return {"seed": seed, "tau": float(pick(rng, [0.0, 1.0, 3.0, 5.0, 10.0], lambda: rng.uniform(0, 10))),
                "eta": float(pick(rng, [0.0, 0.1, 1.0], lambda: rng.random()))}
    if name == "penalties":
        return {"penalty_last_n": int(pick(rng, [-1, 0, 1, 8, 64], lambda: rng.integers(1, 100))),
                "penalty_repeat": float(pick(rng, [0.5, 1.0, 1.1, 2.0], lambda: rng.uniform(0.5, 2))),
                "penalty_freq": float(pick(rng, [0.0, 0.5, -0.5], lambda: rng.uniform(-1, 1))),
                "penalty_present": float(pick(rng, [0.0, 0.5], lambda: rng.uniform(-1, 1)))}
    if name == "dry":
        brk = [["\n", ":", '"', "*"], [], ["\n"], ["the", "ing", " a"]][rng.integers(4)]
        return {"multiplier": float(pick(rng, [0.0, 0.8, 2.0], lambda: rng.uniform(0, 3))),
                "base": float(pick(rng, [0.9, 1.0, 1.75, 3.0], lambda: rng.uniform(1, 4))),
                "allowed_length": int(pick(rng, [0, 1, 2, 4], lambda: rng.integers(0, 6))),
                "penalty_last_n": int(pick(rng, [-1, 0, 5, 64], lambda: rng.integers(1, 200))),
                "seq_breakers": brk}
    if name == "logit_bias":
        nv = ctx["n_vocab"]
        pool = ctx.get("ids_hint")
        pairs = []
        for _ in range(int(rng.integers(1, 12))):
            t = int(rng.choice(pool)) if pool is not None and rng.random() < 0.7 else int(rng.integers(0, nv))
            b = float(pick(rng, [-np.inf, -100.0, -1.0, 0.0, 0.5, 5.0], lambda: rng.normal(0, 3)))
            pairs.append((t, b))
            if rng.random() < 0.3:
                pairs.append((t, float(rng.normal(0, 3))))        # the same token listed twice
        return {"n_vocab": nv, "biases": pairs}
    raise ValueError(name)


# -- halter's side ------------------------------------------------------------------------------

class HalterSide:
    def __init__(self, llama: LlamaSamplers, vocab_path: str) -> None:
        self.llama = llama
        self._pieces = None
        self._vocab_path = vocab_path
        self._compiled: dict[str, object] = {}
        self._breakers: dict[tuple, list] = {}

    def pieces(self) -> list[bytes]:
        if self._pieces is None:
            self._pieces = [self.llama.detokenize_one(i) for i in range(self.llama.n_vocab)]
        return self._pieces

    def compiled(self, gbnf: str):
        if gbnf not in self._compiled:
            from halter.grammar.grammar import Grammar
            from halter.vocab.vocabulary import Vocabulary
            if "vocab" not in self._compiled:
                self._compiled["vocab"] = Vocabulary.from_gguf(self._vocab_path)
            self._compiled[gbnf] = Grammar.from_gbnf(gbnf).compile(self._compiled["vocab"])
        return self._compiled[gbnf]

    def make(self, name: str, prm: dict):
        if name == "greedy":
            return Greedy()
        if name == "dist":
            return Dist(prm["seed"])
        if name == "top_k":
            return TopK(prm["k"])
        if name == "top_p":
            return TopP(prm["p"], prm["min_keep"])
        if name == "min_p":
            return MinP(prm["p"], prm["min_keep"])
        if name == "typical":
            return Typical(prm["p"], prm["min_keep"])
        if name == "temp":
            return Temperature(prm["t"])
        if name == "temp_ext":
            return TempExt(prm["t"], prm["delta"], prm["exponent"])
        if name == "xtc":
            return Xtc(prm["p"], prm["t"], prm["min_keep"], prm["seed"])
        if name == "top_n_sigma":
            return TopNSigma(prm["n"])
        if name == "mirostat":
            return Mirostat(prm["n_vocab"], prm["seed"], prm["tau"], prm["eta"], prm["m"])
        if name == "mirostat_v2":
            return MirostatV2(prm["seed"], prm["tau"], prm["eta"])
        if name == "penalties":
            return Penalties(prm["penalty_last_n"], prm["penalty_repeat"], prm["penalty_freq"], prm["penalty_present"])
        if name == "dry":
            if "breaker_tokens" in prm:
                return Dry(prm["multiplier"], prm["base"], prm["allowed_length"], prm["penalty_last_n"],
                           breaker_tokens=prm["breaker_tokens"])
            key = tuple(prm["seq_breakers"])
            if key not in self._breakers:      # the vocabulary scan once per breaker list
                d = Dry(1.0, 2.0, 2, 1, key, vocab=self.pieces(), tokenize=self.llama.tokenize)
                self._breakers[key] = [[h, *t] for h, tails in d.breakers.items() for t in tails]
            return Dry(prm["multiplier"], prm["base"], prm["allowed_length"], prm["penalty_last_n"],
                       breaker_tokens=self._breakers[key])
        if name == "logit_bias":
            return LogitBias(prm["n_vocab"], prm["biases"])
        if name == "grammar":
            return GrammarSampler(self.compiled(prm["gbnf"]))
        raise ValueError(name)


def run_halter(smpl, case_in: dict) -> dict:
    c = Candidates(ids=case_in["ids"], logits=case_in["logits"], p=case_in["p"], sorted=case_in["sorted"])
    with np.errstate(all="ignore"):
        smpl.apply(c)
    return {"ids": c.ids.astype(np.int32), "logits": c.logits.astype(np.float32), "p": c.p.astype(np.float32),
            "selected": int(c.selected), "sorted": bool(c.sorted)}


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if np.array_equal(a.view(np.uint32), b.view(np.uint32)):
        return True
    return bool(np.array_equal(a, b, equal_nan=True))


def differences(h: dict, l: dict, check_p: bool = True) -> list[str]:
    out = []
    if h["ids"].shape != l["ids"].shape:
        return [f"size {h['ids'].shape[0]} vs {l['ids'].shape[0]}"]
    if not np.array_equal(h["ids"], l["ids"]):
        out.append("ids")
    if not _bits_equal(h["logits"], l["logits"]):
        out.append("logits")
    if check_p and not _bits_equal(h["p"], l["p"]):
        out.append("p")
    if h["selected"] != l["selected"]:
        out.append(f"selected {h['selected']} vs {l['selected']}")
    if h["sorted"] != l["sorted"]:
        out.append("sorted flag")
    return out


# -- cases ------------------------------------------------------------------------------------------

def make_case(rng: np.random.Generator, name: str, n_vocab: int) -> dict:
    """Parameters, history and 1-4 steps of inputs for one sampler (or a chain)."""
    needs_vocab = name in ("dry", "logit_bias", "penalties", "grammar", "mirostat") or name == "chain"
    cap = n_vocab if needs_vocab else 131072
    steps = int(rng.integers(1, 5)) if name in STATEFUL else 1
    inputs = [rand_candidates(rng, n_vocab if needs_vocab else None, cap) for _ in range(steps)]
    ctx = {"n_vocab": n_vocab if needs_vocab else int(max(x["ids"].max() for x in inputs) + 1),
           "ids_hint": inputs[0]["ids"]}
    if name == "chain":
        pool = ["penalties", "dry", "top_n_sigma", "top_k", "typical", "top_p", "min_p", "xtc", "temp_ext",
                "logit_bias", "temp"]
        k = int(rng.integers(1, len(pool) + 1))
        names = list(rng.choice(pool, size=k, replace=False))
        sel = str(rng.choice(["dist", "dist", "greedy", "mirostat", "mirostat_v2"]))
        parts = [(str(n), rand_params(rng, str(n), ctx)) for n in names] + [(sel, rand_params(rng, sel, ctx))]
    else:
        parts = [(name, rand_params(rng, name, ctx))]
    hist_pool = inputs[0]["ids"][: max(4, min(64, inputs[0]["ids"].shape[0]))]
    alphabet = rng.choice(hist_pool, size=int(rng.integers(2, 8)))
    history = [int(rng.choice(alphabet)) for _ in range(int(rng.integers(0, 80)))]
    return {"name": name, "parts": parts, "history": history, "inputs": inputs}


def run_case(case: dict, llama: LlamaSamplers, halter: HalterSide) -> tuple[list[str], list[dict]]:
    """Run both sides; return the differences and llama.cpp's outputs per step."""
    parts = case["parts"]
    if case["name"] == "chain":
        ls = llama.chain(parts)
        hs = SamplerChain([halter.make(n, p) for n, p in parts])
    else:
        ls = llama.make(*parts[0])
        hs = halter.make(*parts[0])
    outs = []
    try:
        for t in case["history"]:
            llama.accept(ls, t)
            hs.accept(t)
        for step, inp in enumerate(case["inputs"]):
            l_out = llama.apply(ls, inp["ids"], inp["logits"], inp["p"], inp["sorted"])
            h_out = run_halter(hs, inp)
            outs.append(l_out)
            diff = differences(h_out, l_out)
            if diff:
                return [f"step {step}: " + ", ".join(diff)], outs
            if case["name"] in STATEFUL:
                sel = l_out["selected"]
                tok = int(l_out["ids"][sel]) if 0 <= sel < l_out["ids"].shape[0] else int(inp["ids"][0])
                llama.accept(ls, tok)
                hs.accept(tok)
        return [], outs
    finally:
        llama.free(ls)


def grammar_case(rng: np.random.Generator, llama: LlamaSamplers, halter: HalterSide, types: np.ndarray,
                 nul: np.ndarray) -> dict:
    """Walk a grammar with tokens both sides allow; compare the full-vocabulary verdicts."""
    gbnf = GRAMMARS[rng.integers(len(GRAMMARS))]
    ls = llama.make("grammar", {"gbnf": gbnf})
    hs = halter.make("grammar", {"gbnf": gbnf})
    n = llama.n_vocab
    ids = np.arange(n, dtype=np.int32)
    zeros = np.zeros(n, dtype=np.float32)
    walk: list[int] = []
    res = {"gbnf": gbnf, "walk": walk, "diff": [], "departure": 0}
    try:
        for _ in range(int(rng.integers(0, 7))):
            l_ok = np.isfinite(llama.apply(ls, ids, zeros, zeros, False)["logits"])
            h_ok = np.isfinite(run_halter(hs, {"ids": ids, "logits": zeros, "p": zeros, "sorted": False})["logits"])
            both = np.flatnonzero(l_ok & h_ok & (types == 1))
            if both.size == 0:
                break
            tok = int(rng.choice(both))
            llama.accept(ls, tok)
            hs.accept(tok)
            walk.append(tok)
        l_ok = np.isfinite(llama.apply(ls, ids, zeros, zeros, False)["logits"])
        h_ok = np.isfinite(run_halter(hs, {"ids": ids, "logits": zeros, "p": zeros, "sorted": False})["logits"])
        res["allowed"] = np.flatnonzero(l_ok).tolist()
        bad = np.flatnonzero(l_ok != h_ok)
        # documented departures: unknown / control / unused tokens as marker text, NUL-led pieces,
        # bytes that never occur in UTF-8
        special = np.isin(types[bad], (2, 3, 5)) | nul[bad]
        res["departure"] = int(special.sum())
        if (~special).any():
            res["diff"] = [f"verdicts differ on {int((~special).sum())} tokens, e.g. {bad[~special][:5].tolist()}"]
    finally:
        llama.free(ls)
    return res


# -- freezing ---------------------------------------------------------------------------------------

def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


def freeze_case(case: dict, outs: list[dict], halter: HalterSide) -> dict:
    parts = []
    for n, p in case["parts"]:
        p = dict(p)
        if n == "dry":     # llama.cpp's breaker sequences, as tokens (the test has no vocabulary)
            d = halter.make("dry", p)
            p["breaker_tokens"] = [[h, *t] for h, tails in d.breakers.items() for t in tails]
            p.pop("seq_breakers", None)
        if n == "logit_bias":
            p["biases"] = [[t, b if np.isfinite(b) else "-inf"] for t, b in p["biases"]]
        parts.append([n, p])
    return {"name": case["name"], "parts": parts, "history": case["history"],
            "inputs": [{"ids": _b64(i["ids"]), "logits": _b64(i["logits"]), "sorted": i["sorted"],
                        "shape": i["shape"]} for i in case["inputs"]],
            "outputs": [{"ids": _b64(o["ids"]), "logits": _b64(o["logits"]), "p": _b64(o["p"]),
                         "selected": o["selected"], "sorted": o["sorted"]} for o in outs]}


def interesting(case: dict) -> bool:
    small = all(i["ids"].shape[0] <= 160 for i in case["inputs"])
    return small and any(i["shape"] in ("ties", "equal", "neginf", "wide") for i in case["inputs"])


def plot(summary: dict, path: str) -> None:
    """Bar chart: cases and seconds per sampler, disagreements written on each bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(summary)
    secs = [summary[n]["seconds"] for n in names]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.bar(names, secs, color="#4c72b0")
    for i, n in enumerate(names):
        s = summary[n]
        ax.text(i, secs[i], f"{s['disagreements']}", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds (both sides)")
    ax.set_title(f"halter vs llama.cpp samplers: {summary[names[0]]['cases']} cases each; "
                 "number on each bar = disagreements")
    plt.xticks(rotation=40, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-venv", default=os.environ.get("LLAMA_VENV", "/work/venvs/llama"))
    ap.add_argument("--vocab", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "vocab",
                                                    "ggml-vocab-llama-spm.gguf"))
    ap.add_argument("--cases", type=int, default=10000, help="cases per sampler")
    ap.add_argument("--samplers", default=",".join(SAMPLERS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--freeze", default=None, help="write the frozen table of interesting cases here")
    ap.add_argument("--per-sampler-frozen", type=int, default=6)
    ap.add_argument("--show", type=int, default=5, help="disagreements printed per sampler")
    ap.add_argument("--json", default=None, help="write the summary as JSON here")
    ap.add_argument("--plot", default=None, help="write a PNG bar chart of the summary here")
    args = ap.parse_args()

    llama = LlamaSamplers(args.llama_venv, args.vocab)
    halter = HalterSide(llama, args.vocab)
    rng = np.random.default_rng(args.seed)
    summary, frozen, grammar_frozen = {}, [], []
    print(f"llama-cpp-python {llama.version}; vocabulary {os.path.basename(args.vocab)} ({llama.n_vocab} tokens)")
    types = None
    for name in args.samplers.split(","):
        t0 = time.perf_counter()
        n_dis, n_dep, shown, kept = 0, 0, 0, 0
        shapes = Counter()
        for i in range(args.cases):
            if name == "grammar":
                if types is None:
                    from halter.vocab.vocabulary import Vocabulary
                    hv = Vocabulary.from_gguf(args.vocab)
                    types = np.asarray(hv.token_types)
                    bad_utf8 = set(range(0xF5, 0x100)) | {0xC0, 0xC1}     # bytes UTF-8 never contains
                    nul = np.array([b[:1] == b"\x00" or any(x in bad_utf8 for x in b) for b in hv.token_bytes])
                res = grammar_case(rng, llama, halter, types, nul)
                n_dep += res["departure"] > 0
                if res["diff"]:
                    n_dis += 1
                    if shown < args.show:
                        print(f"  grammar DIFF {res['gbnf']!r} after {res['walk']}: {res['diff']}")
                        shown += 1
                elif len(grammar_frozen) < args.per_sampler_frozen and i % 7 == 0:
                    allowed = np.zeros(llama.n_vocab, dtype=bool)
                    allowed[res["allowed"]] = True
                    grammar_frozen.append({"gbnf": res["gbnf"], "walk": res["walk"],
                                           "allowed_bits": _b64(np.packbits(allowed, bitorder="little"))})
                continue
            case = make_case(rng, name, llama.n_vocab)
            for inp in case["inputs"]:
                shapes[inp["shape"]] += 1
            diff, outs = run_case(case, llama, halter)
            if diff:
                n_dis += 1
                if shown < args.show:
                    inp = case["inputs"][0]
                    print(f"  {name} DIFF {diff} parts={case['parts']} n={inp['ids'].shape[0]} "
                          f"shape={inp['shape']} order={inp['order']} history={len(case['history'])}")
                    shown += 1
            elif args.freeze and kept < args.per_sampler_frozen and interesting(case):
                frozen.append(freeze_case(case, outs, halter))
                kept += 1
        dt = time.perf_counter() - t0
        summary[name] = {"cases": args.cases, "disagreements": n_dis, "departures": n_dep, "seconds": round(dt, 1)}
        print(f"{name:12s} cases {args.cases:6d}  disagreements {n_dis:5d}  departures {n_dep:5d}  {dt:7.1f} s",
              flush=True)
    total = sum(v["disagreements"] for v in summary.values())
    print(f"total disagreements: {total}")
    if args.freeze:
        with open(args.freeze, "w") as f:
            json.dump({"llama_cpp_python": llama.version, "vocab": os.path.basename(args.vocab),
                       "cases": frozen, "grammar": grammar_frozen}, f, separators=(",", ":"))
        print(f"froze {len(frozen)} sampler cases and {len(grammar_frozen)} grammar states in {args.freeze}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    if args.plot:
        plot(summary, args.plot)


if __name__ == "__main__":
    main()
