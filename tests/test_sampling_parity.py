"""llama.cpp's own outputs, frozen by ``bench/sampler_diff.py --freeze``, replayed through halter.

Each case holds a sampler (or a chain) with its parameters, the tokens accepted before, one to
four candidate arrays, and what llama.cpp's samplers (llama-cpp-python 0.3.36) left in them: ids,
logits and probabilities bit for bit, ``selected`` and ``sorted``. The grammar states hold the
ids llama.cpp's grammar sampler allowed after a walk of accepted tokens (they need the
vocabulary from ``../shared/vocab``).
"""
import base64
import json
from pathlib import Path

import numpy as np
import pytest

from halter.sampling import (Candidates, Dist, Dry, Greedy, LogitBias, MinP, Mirostat, MirostatV2, Penalties,
                             SamplerChain, TempExt, Temperature, TopK, TopNSigma, TopP, Typical, Xtc)

DATA = Path(__file__).parent / "data" / "sampler_parity.json"
TABLE = json.loads(DATA.read_text())
STATEFUL = {"dist", "xtc", "mirostat", "mirostat_v2", "penalties", "dry", "chain"}


def _arr(s: str, dtype) -> np.ndarray:
    return np.frombuffer(base64.b64decode(s), dtype=dtype).copy()


def make(name: str, p: dict):
    if name == "greedy":
        return Greedy()
    if name == "dist":
        return Dist(p["seed"])
    if name == "top_k":
        return TopK(p["k"])
    if name == "top_p":
        return TopP(p["p"], p["min_keep"])
    if name == "min_p":
        return MinP(p["p"], p["min_keep"])
    if name == "typical":
        return Typical(p["p"], p["min_keep"])
    if name == "temp":
        return Temperature(p["t"])
    if name == "temp_ext":
        return TempExt(p["t"], p["delta"], p["exponent"])
    if name == "xtc":
        return Xtc(p["p"], p["t"], p["min_keep"], p["seed"])
    if name == "top_n_sigma":
        return TopNSigma(p["n"])
    if name == "mirostat":
        return Mirostat(p["n_vocab"], p["seed"], p["tau"], p["eta"], p["m"])
    if name == "mirostat_v2":
        return MirostatV2(p["seed"], p["tau"], p["eta"])
    if name == "penalties":
        return Penalties(p["penalty_last_n"], p["penalty_repeat"], p["penalty_freq"], p["penalty_present"])
    if name == "dry":
        return Dry(p["multiplier"], p["base"], p["allowed_length"], p["penalty_last_n"],
                   breaker_tokens=p["breaker_tokens"])
    if name == "logit_bias":
        return LogitBias(p["n_vocab"], [(t, float(b)) for t, b in p["biases"]])
    raise ValueError(name)


def _bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint32), b.view(np.uint32)) or np.array_equal(a, b, equal_nan=True)


def test_the_table_covers_every_sampler():
    names = {c["name"] for c in TABLE["cases"]}
    assert {"dist", "top_k", "top_p", "min_p", "typical", "temp_ext", "xtc", "top_n_sigma", "mirostat",
            "mirostat_v2", "penalties", "dry", "logit_bias", "chain"} <= names


@pytest.mark.parametrize("case", TABLE["cases"], ids=lambda c: c["name"])
def test_halter_gives_llama_cpps_numbers(case):
    parts = case["parts"]
    smpl = SamplerChain([make(n, p) for n, p in parts]) if case["name"] == "chain" else make(*parts[0])
    for t in case["history"]:
        smpl.accept(t)
    for step, (inp, out) in enumerate(zip(case["inputs"], case["outputs"])):
        ids, logits = _arr(inp["ids"], np.int32), _arr(inp["logits"], np.float32)
        c = Candidates(ids=ids, logits=logits, sorted=inp["sorted"])
        with np.errstate(all="ignore"):
            smpl.apply(c)
        want_ids = _arr(out["ids"], np.int32)
        assert c.ids.tolist() == want_ids.tolist(), f"step {step}: ids"
        assert _bits(c.logits, _arr(out["logits"], np.float32)), f"step {step}: logits"
        assert _bits(c.p, _arr(out["p"], np.float32)), f"step {step}: probabilities"
        assert (c.selected, c.sorted) == (out["selected"], out["sorted"]), f"step {step}: selected/sorted"
        if case["name"] in STATEFUL:
            sel = out["selected"]
            smpl.accept(int(want_ids[sel]) if 0 <= sel < want_ids.shape[0] else int(ids[0]))


@pytest.fixture(scope="module")
def spm_vocab():
    from tests.conftest import shared_path
    from halter.vocab.vocabulary import Vocabulary
    return Vocabulary.from_gguf(shared_path("vocab", TABLE["vocab"]))


@pytest.mark.parametrize("state", TABLE["grammar"], ids=lambda s: f"{s['gbnf'][:20]}+{len(s['walk'])}")
def test_grammar_sampler_allows_what_llama_cpp_allows(state, spm_vocab):
    from halter.grammar.grammar import Grammar
    from halter.sampling import GrammarSampler

    g = GrammarSampler(Grammar.from_gbnf(state["gbnf"]).compile(spm_vocab))
    for t in state["walk"]:
        g.accept(t)
    c = Candidates.from_logits(np.zeros(spm_vocab.size, dtype=np.float32))
    g.apply(c)
    allowed = set(np.flatnonzero(np.isfinite(c.logits)).tolist())
    bits = np.unpackbits(np.frombuffer(base64.b64decode(state["allowed_bits"]), dtype=np.uint8), bitorder="little")
    want = set(np.flatnonzero(bits[:spm_vocab.size]).tolist())
    types = np.asarray(spm_vocab.token_types)
    never = set(range(0xF5, 0x100)) | {0xC0, 0xC1}
    nul = np.array([b[:1] == b"\x00" or any(x in never for x in b) for b in spm_vocab.token_bytes])
    special = set(np.flatnonzero(np.isin(types, (2, 3, 5)) | nul).tolist())
    # documented departures: control / unknown / unused tokens never stand for their marker text;
    # llama.cpp refuses every token whose text starts with a NUL byte and takes bytes that never
    # occur in UTF-8 (0xC0, 0xC1, 0xF5-0xFF) as the start of a sequence
    assert allowed - special == want - special


# llama.cpp's top-k with k = n (its bucket sort: 128 buckets over [-10, 10], each std::sort-ed) on
# 160 logits drawn from five values, one of them on a bucket edge (-0.9375003 lands in bucket 58
# when ``6.4f * v + 64.0f`` is rounded twice, in 57 under a fused multiply-add): the tie order of
# llama.cpp's output depends on which bucket it is in. Ids as llama-cpp-python 0.3.36 returned them.
_EDGE_VALUES = np.array([-3.0, -0.9875003099441528, -0.9375002980232239, -0.8875002861022949, 2.0],
                        dtype=np.float32)
_EDGE_PICKS = "0424330142113322222420011314240421030002434114221024113444120002231341311421221033200121203313410214424431440114130110204003411002204041102221204120202404001422"
_EDGE_LLAMA_IDS = [94, 157, 153, 151, 144, 134, 132, 124, 120, 111, 107, 106, 103, 102, 100, 99, 1, 73, 68, 57, 56, 55, 51, 45, 42, 40, 31, 29, 27, 19, 8, 3, 4, 90, 81, 80, 91, 93, 70, 67, 65, 104, 113, 54, 123, 41, 35, 5, 25, 12, 13, 148, 88, 159, 2, 97, 158, 150, 138, 101, 146, 142, 140, 118, 129, 139, 130, 46, 9, 14, 15, 16, 17, 18, 20, 28, 32, 39, 86, 47, 50, 59, 63, 64, 74, 76, 77, 82, 115, 85, 87, 92, 95, 98, 105, 109, 110, 112, 78, 116, 125, 126, 135, 136, 141, 145, 156, 48, 10, 11, 23, 24, 26, 33, 43, 44, 7, 52, 53, 58, 66, 69, 71, 72, 75, 108, 121, 60, 155, 131, 38, 117, 30, 127, 62, 152, 137, 89, 96, 22, 114, 49, 119, 6, 122, 61, 128, 34, 133, 79, 149, 143, 84, 154, 37, 0, 21, 36, 83, 147]


def test_bucket_sort_edge_matches_llama_cpp() -> None:
    logits = _EDGE_VALUES[np.array([int(ch) for ch in _EDGE_PICKS])]
    c = Candidates(np.arange(logits.size, dtype=np.int32), logits.copy())
    TopK(int(logits.size)).apply(c)
    assert c.ids.tolist() == _EDGE_LLAMA_IDS
