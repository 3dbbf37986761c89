"""The chain and SamplingParams: llama.cpp's order, names, seeds, and the distribution dist draws from."""
import numpy as np
import pytest

from halter.sampling import (Candidates, Dist, Greedy, LogitBias, MirostatV2, Penalties, SamplerChain,
                             SamplingParams, Temperature, TopK, TopP, parse_samplers,
                             parse_sampling_seq)
from tests.sampling_stats import chi2_pvalue, softmax

DEFAULT_NAMES = ["penalties", "dry", "top-n-sigma", "top-k", "typical", "top-p", "min-p", "xtc", "temp-ext", "dist"]


def test_default_params_match_llama_server():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p, p.top_n_sigma) == (0.8, 40, 0.95, 0.05, 1.0, -1.0)
    assert (p.repeat_penalty, p.repeat_last_n, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (1.0, 64, 1.75, 2, 64)
    assert p.dry_sequence_breakers == ("\n", ":", '"', "*") and p.xtc_threshold == 0.1 and p.mirostat_tau == 5.0
    assert p.samplers == ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")


def test_default_chain_order():
    assert SamplingParams(seed=1).build(100).names == DEFAULT_NAMES


@pytest.mark.parametrize("spec, names", [
    ("penalties;top_k;temperature", ["penalties", "top_k", "temperature"]),
    ("top-k;nucleus;typ;temp", ["top_k", "top_p", "typ_p", "temperature"]),
    ("kt", ["top_k", "temperature"]),
    ("edskypmxt", ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"]),
    (["min_p", "typical"], ["min_p", "typ_p"]),
    ("top_k", ["top_k"]),
])
def test_sampler_order_by_name_alias_and_letter(spec, names):
    assert list(parse_samplers(spec)) == names


def test_custom_order_builds_that_chain():
    chain = SamplingParams(samplers="penalties;top_k;temperature", seed=3).build(50)
    assert chain.names == ["penalties", "top-k", "temp-ext", "dist"]


def test_unknown_sampler_names_are_errors():
    with pytest.raises(ValueError, match="unknown sampler name 'topk'"):
        SamplingParams(samplers="topk;temp")
    with pytest.raises(ValueError, match="unknown sampler letter 'z' at position 1"):
        parse_sampling_seq("kz")
    with pytest.raises(ValueError, match="not supported"):
        SamplingParams(samplers="infill", seed=1).build(10)


def test_temperature_zero_ends_with_greedy_and_mirostat_replaces_the_chain():
    assert isinstance(SamplingParams(temperature=0.0, seed=1).build(10)[-1], Greedy)
    m = SamplingParams(mirostat=2, seed=1, logit_bias={3: 1.0}).build(10)
    assert m.names == ["logit-bias", "temp", "mirostat-v2"]
    assert SamplingParams(mirostat=1, seed=1).build(10).names == ["temp", "mirostat"]
    with pytest.raises(ValueError, match="mirostat must be"):
        SamplingParams(mirostat=3)


def test_logit_bias_and_ignore_eos():
    chain = SamplingParams(logit_bias=[[2, False], ["1", 0.5]], ignore_eos=True, seed=1).build(5, eog_ids=[4])
    assert isinstance(chain[0], LogitBias)
    c = Candidates(logits=np.zeros(5))
    chain[0].apply(c)
    assert np.isneginf(c.logits[[2, 4]]).all() and c.logits[1] == 0.5
    with pytest.raises(ValueError, match="eog_ids"):
        SamplingParams(ignore_eos=True).build(5)


def test_params_are_frozen_and_validated():
    p = SamplingParams(seed=1)
    with pytest.raises(Exception):
        p.top_k = 3
    assert p.replace(top_k=3).top_k == 3 and p.top_k == 40
    with pytest.raises(TypeError, match="top_k must be an int"):
        SamplingParams(top_k=1.5)
    with pytest.raises(ValueError, match="seed must be in"):
        SamplingParams(seed=2**33)


def test_sample_does_not_modify_logits_and_needs_a_selector():
    logits = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    chain = SamplerChain([TopK(2), Temperature(0.5), Dist(1)])
    chain.sample(logits)
    assert logits.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="no token was selected"):
        SamplerChain([TopK(2)]).sample(logits)


def test_seeded_runs_are_reproducible_and_seeds_differ():
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((40, 300)).astype(np.float32) * 2
    params = SamplingParams(seed=42, repeat_penalty=1.3, top_k=20)

    def run(p):
        chain = p.build(300)
        out = []
        for row in rows:
            t = chain.sample(row)
            chain.accept(t)
            out.append(t)
        return out, chain

    a, chain = run(params)
    assert run(params)[0] == a
    assert run(params.replace(seed=43))[0] != a
    chain.reset()  # a reset chain replays the same seed from the start
    again = []
    for row in rows:
        t = chain.sample(row, accept=True)
        again.append(t)
    assert again == a
    assert SamplingParams(seed=None).build(10).seed is not None


def test_clone_continues_identically():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((20, 100)).astype(np.float32)
    chain = SamplingParams(seed=5, repeat_penalty=1.2, xtc_probability=0.5, xtc_threshold=0.05).build(100)
    for row in rows[:5]:
        chain.sample(row, accept=True)
    twin = chain.clone()
    assert [chain.sample(r, accept=True) for r in rows[5:]] == [twin.sample(r, accept=True) for r in rows[5:]]


def test_penalties_in_chain_only_see_accepted_tokens():
    chain = SamplerChain([Penalties(8, 100.0), Greedy()])
    logits = np.array([5.0, 4.0, 0.0], dtype=np.float32)
    assert chain.sample(logits) == 0
    assert chain.sample(logits) == 0  # not accepted: no penalty yet
    chain.accept(0)
    assert chain.sample(logits) == 1


def test_dist_draws_from_softmax_after_filters():
    # top-k 5 then temperature 0.7 on 8 tokens: tokens outside the top 5 never come out, the rest
    # follow softmax(logits / 0.7) over the top 5. 20000 seeded draws, chi-square p-value > 1e-4.
    logits = np.array([0.3, 1.5, -0.2, 2.0, 0.9, -1.0, 1.1, 0.0], dtype=np.float32)
    chain = SamplerChain([TopK(5), Temperature(0.7), Dist(2024)])
    counts = np.zeros(8)
    for _ in range(20000):
        counts[chain.sample(logits)] += 1
    top5 = np.argsort(-logits)[:5]
    expected = np.zeros(8)
    expected[top5] = softmax(logits[top5] / 0.7)
    assert counts[np.setdiff1d(np.arange(8), top5)].sum() == 0
    assert chi2_pvalue(counts, expected) > 1e-4


def test_top_p_then_dist_distribution():
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1]))
    chain = SamplerChain([TopP(0.65), Dist(7)])
    counts = np.zeros(4)
    for _ in range(10000):
        counts[chain.sample(logits)] += 1
    expected = np.array([0.4, 0.3, 0.0, 0.0]) / 0.7
    assert chi2_pvalue(counts, expected) > 1e-4


def test_mirostat_v2_chain_runs_and_stays_in_range():
    rng = np.random.default_rng(3)
    chain = SamplerChain([Temperature(1.0), MirostatV2(seed=1, tau=3.0, eta=0.1)])
    for _ in range(50):
        t = chain.sample(rng.standard_normal(64).astype(np.float32) * 3, accept=True)
        assert 0 <= t < 64
