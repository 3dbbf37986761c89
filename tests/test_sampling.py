"""Each sampler against hand-computed expectations, edge cases included (llama.cpp semantics)."""
import math

import numpy as np
import pytest

from halter.sampling import (Candidates, Dist, Dry, Greedy, LogitBias, MinP, Mirostat, MirostatV2, Mt19937,
                             Penalties, TempExt, Temperature, TopK, TopNSigma, TopP, Typical, Xtc, make_sampler)


def cand(logits, ids=None):
    return Candidates(ids=ids, logits=logits)


def probs_of(logits):
    lg = np.log(np.asarray(logits, dtype=np.float64))
    return lg  # logits whose softmax is exactly the given (normalised) probabilities


# -- the random stream --------------------------------------------------------------------------

def test_mt19937_matches_the_cpp_standard():
    # the C++ standard requires the 10000th output of a default-seeded (5489) mt19937 to be 4123659995
    rng = Mt19937(5489)
    for _ in range(9999):
        rng.next_u32()
    assert rng.next_u32() == 4123659995


def test_generate_canonical_float_and_double():
    a, b = Mt19937(42), Mt19937(42)
    w0, w1 = b.next_u32(), b.next_u32()
    assert a.uniform_double() == (w0 + w1 * 2.0**32) / 2.0**64
    c, d = Mt19937(7), Mt19937(7)
    assert c.uniform_float() == float(np.float32(np.float32(d.next_u32()) / np.float32(2.0**32)))


def test_discrete_distribution_skips_the_draw_for_one_weight():
    a, b = Mt19937(1), Mt19937(1)
    assert a.discrete(np.array([3.0])) == 0
    assert a.next_u32() == b.next_u32()


# -- candidates ---------------------------------------------------------------------------------

def test_candidates_copy_their_inputs():
    logits = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    c = cand(logits)
    Temperature(0.5).apply(c)
    assert logits.tolist() == [1.0, 2.0, 3.0]
    assert c.size == 3 and c.selected == -1 and not c.sorted


def test_candidates_validate_shapes():
    with pytest.raises(ValueError, match="does not match"):
        Candidates(ids=[0, 1], logits=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="1-D"):
        Candidates(logits=np.zeros((2, 2)))


# -- top-k ----------------------------------------------------------------------------------------

def test_top_k_keeps_k_best_sorted():
    c = cand([0.1, 3.0, 2.0, -1.0, 2.5])
    TopK(3).apply(c)
    assert c.ids.tolist() == [1, 4, 2] and c.sorted


@pytest.mark.parametrize("k", [0, -1])
def test_top_k_non_positive_disables(k):
    c = cand([0.1, 3.0, 2.0])
    TopK(k).apply(c)
    assert c.ids.tolist() == [0, 1, 2] and not c.sorted


def test_top_k_larger_than_size_sorts_everything():
    c = cand([0.1, 3.0, 2.0])
    TopK(10).apply(c)
    assert c.ids.tolist() == [1, 2, 0]


# -- top-p ----------------------------------------------------------------------------------------

def test_top_p_keeps_smallest_prefix_reaching_p():
    # probabilities 0.5, 0.3, 0.15, 0.05 (ids 0..3, given out of order)
    c = cand(np.log([0.15, 0.5, 0.05, 0.3]))
    TopP(0.75).apply(c)
    assert c.ids.tolist() == [1, 3]  # 0.5 + 0.3 reaches 0.75
    c = cand(np.log([0.15, 0.5, 0.05, 0.3]))
    TopP(0.81).apply(c)
    assert c.ids.tolist() == [1, 3, 0]
    assert c.sorted
    # probabilities are those computed before the cut, not renormalised
    assert c.p.tolist() == pytest.approx([0.5, 0.3, 0.15], abs=1e-6)


def test_top_p_boundary_is_inclusive():
    c = cand(np.log([0.5, 0.5]))
    TopP(0.5).apply(c)
    assert c.size == 1  # cumulative 0.5 >= 0.5 stops at the first token


def test_top_p_min_keep_and_disable():
    c = cand(np.log([0.9, 0.05, 0.05]))
    TopP(0.5, min_keep=2).apply(c)
    assert c.size == 2
    c = cand(np.log([0.9, 0.05, 0.05]))
    TopP(1.0).apply(c)
    assert c.size == 3 and not c.sorted


def test_top_p_large_unsorted_uses_the_same_cut():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(5000).astype(np.float32) * 4
    c = cand(logits)
    TopP(0.9).apply(c)
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    order = np.argsort(-logits, kind="stable")
    n = int(np.searchsorted(np.cumsum(p[order]), 0.9)) + 1
    assert c.ids.tolist() == order[:n].tolist()


# -- min-p ----------------------------------------------------------------------------------------

def test_min_p_unsorted_keeps_order():
    # p relative to max: 1, 0.5, 0.04, 0.2 -> min_p 0.1 keeps ids 0, 1, 3 in their order
    c = cand(np.log([1.0, 0.5, 0.04, 0.2]))
    MinP(0.1).apply(c)
    assert c.ids.tolist() == [0, 1, 3] and not c.sorted


def test_min_p_sorted_path_and_min_keep():
    c = cand(np.log([1.0, 0.5, 0.04, 0.2]))
    MinP(0.6, min_keep=3).apply(c)  # unsorted result has 1 < min_keep: sorted fallback keeps 3
    assert c.ids.tolist() == [0, 1, 3] and c.sorted
    c = cand(np.log([1.0, 0.5]))
    MinP(0.0).apply(c)
    assert c.size == 2


# -- typical --------------------------------------------------------------------------------------

def test_typical_orders_by_distance_to_entropy():
    p = np.array([0.5, 0.25, 0.125, 0.125])
    entropy = -(p * np.log(p)).sum()
    dist = np.abs(-np.log(p) - entropy)
    order = np.argsort(dist, kind="stable")
    c = cand(np.log(p))
    Typical(0.5).apply(c)
    cum = np.cumsum(p[order])
    n = int(np.flatnonzero(cum > 0.5)[0]) + 1
    assert c.ids.tolist() == order[:n].tolist() and not c.sorted
    c = cand(np.log(p))
    Typical(1.0).apply(c)
    assert c.ids.tolist() == [0, 1, 2, 3]


# -- temperature ----------------------------------------------------------------------------------

def test_temperature_divides_logits():
    c = cand([1.0, 2.0, -3.0])
    Temperature(0.5).apply(c)
    assert c.logits.tolist() == [2.0, 4.0, -6.0]


@pytest.mark.parametrize("t", [0.0, -1.0])
def test_temperature_zero_keeps_first_max_only(t):
    c = cand([1.0, 3.0, 3.0, 2.0])
    Temperature(t).apply(c)
    assert c.logits[1] == 3.0 and np.isneginf(c.logits[[0, 2, 3]]).all()


def test_temp_ext_without_delta_is_plain_temperature():
    c = cand([1.0, 2.0])
    TempExt(2.0, 0.0, 1.0).apply(c)
    assert c.logits.tolist() == [0.5, 1.0]


def test_temp_ext_dynamic_temperature():
    logits = np.array([2.0, 1.0, 0.0], dtype=np.float32)
    p = np.exp(logits - 2.0) / np.exp(logits - 2.0).sum()
    ent = -(p * np.log(p)).sum() / np.log(3)
    t = 0.5 + (1.5 - 0.5) * ent ** 2.0  # temp 1, delta 0.5, exponent 2
    c = cand(logits)
    TempExt(1.0, 0.5, 2.0).apply(c)
    assert c.logits.tolist() == pytest.approx((logits / t).tolist(), rel=1e-5)
    q = np.exp(logits / t - logits[0] / t)
    assert c.p.tolist() == pytest.approx((q / q.sum()).tolist(), rel=1e-5)


# -- top-n-sigma ----------------------------------------------------------------------------------

def test_top_n_sigma_masks_below_max_minus_n_std():
    logits = np.array([4.0, 3.0, 0.0, -5.0, -np.inf], dtype=np.float32)
    finite = logits[:4].astype(np.float64)
    thr = finite.max() - 1.0 * finite.std()
    c = cand(logits)
    TopNSigma(1.0).apply(c)
    kept = set(c.ids[np.isfinite(c.logits)].tolist())
    # llama.cpp masks in place: order (and the sorted flag) unchanged
    assert kept == {i for i in range(4) if logits[i] >= thr} and not c.sorted
    assert c.ids.tolist() == [0, 1, 2, 3, 4]
    c = cand(logits)
    TopNSigma(-1.0).apply(c)
    assert np.isfinite(c.logits[:4]).all()


# -- xtc ------------------------------------------------------------------------------------------

def test_xtc_removes_all_top_choices_but_the_last_above_threshold():
    p = [0.4, 0.3, 0.2, 0.1]
    c = cand(np.log(p))
    Xtc(1.0, 0.15, 1, seed=1).apply(c)  # probability 1: always fires; 0.4, 0.3, 0.2 >= 0.15
    assert c.ids.tolist() == [2, 3]


@pytest.mark.parametrize("prob, thr", [(0.0, 0.1), (1.0, 0.6)])
def test_xtc_disabled_and_draws_nothing(prob, thr):
    x = Xtc(prob, thr, 1, seed=5)
    c = cand(np.log([0.5, 0.5]))
    x.apply(c)
    assert c.size == 2
    assert x._rng.next_u32() == Mt19937(5).next_u32()  # no random number was consumed


def test_xtc_respects_min_keep():
    c = cand(np.log([0.4, 0.3, 0.2, 0.1]))
    Xtc(1.0, 0.15, 3, seed=1).apply(c)
    assert c.size == 4


# -- penalties ------------------------------------------------------------------------------------

def test_penalties_repeat_frequency_presence():
    pen = Penalties(penalty_last_n=3, penalty_repeat=2.0, penalty_freq=0.5, penalty_present=0.25)
    for t in [1, 2, 2, 1]:  # window of 3: [2, 2, 1]
        pen.accept(t)
    c = cand([1.0, 4.0, -2.0, 3.0])
    pen.apply(c)
    # id1: count 1: 4/2 - 0.5 - 0.25; id2: count 2: -2*2 - 1.0 - 0.25
    assert c.logits.tolist() == pytest.approx([1.0, 1.25, -5.25, 3.0])
    assert pen.history == [2, 2, 1]


def test_penalties_touch_ids_after_shuffle_and_disable():
    pen = Penalties(64, 2.0, 0.0, 0.0)
    pen.accept(5)
    c = cand([1.0, 8.0, 3.0], ids=[7, 5, 0])
    pen.apply(c)
    assert c.logits.tolist() == [1.0, 4.0, 3.0]
    off = Penalties(0, 2.0, 1.0, 1.0)
    off.accept(0)
    c = cand([1.0, 2.0])
    off.apply(c)
    assert c.logits.tolist() == [1.0, 2.0]


def test_penalties_reset_and_clone_are_independent():
    pen = Penalties(4, 2.0)
    pen.accept(0)
    twin = pen.clone()
    pen.reset()
    c1, c2 = cand([4.0, 1.0]), cand([4.0, 1.0])
    pen.apply(c1)
    twin.apply(c2)
    assert c1.logits[0] == 4.0 and c2.logits[0] == 2.0


# -- logit bias -----------------------------------------------------------------------------------

def test_logit_bias_by_id_and_ban():
    lb = LogitBias(4, {1: 2.0, 3: -math.inf})
    c = cand([0.0, 1.0, 2.0, 3.0])
    lb.apply(c)
    assert c.logits[:3].tolist() == [0.0, 3.0, 2.0] and np.isneginf(c.logits[3])
    c = cand([5.0, 6.0], ids=[3, 1])  # shuffled: found by search
    lb.apply(c)
    assert np.isneginf(c.logits[0]) and c.logits[1] == 8.0


def test_logit_bias_rejects_tokens_outside_vocab():
    with pytest.raises(ValueError, match=r"token 9 is outside the vocabulary \[0, 4\)"):
        LogitBias(4, {9: 1.0})


# -- DRY ------------------------------------------------------------------------------------------

def test_dry_penalises_the_token_that_extends_a_repeat():
    # history a b c c b c y a b c (ids a=0 b=1 c=2 y=5): c would extend "a b c" (len 3), y "b c" (len 2)
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=2, penalty_last_n=100, breaker_tokens=[])
    for t in [0, 1, 2, 2, 1, 2, 5, 0, 1, 2]:
        dry.accept(t)
    c = cand(np.zeros(6, dtype=np.float32))
    dry.apply(c)
    assert c.logits.tolist() == [0.0, 0.0, -2.0, 0.0, 0.0, -1.0]  # 1 * 2**(3-2), 1 * 2**(2-2)


def test_dry_sequence_breaker_limits_the_repeat():
    # same history, but 'y' (5) breaks sequences: the repeat "a b c" after it is still allowed,
    # while nothing before the breaker counts
    dry = Dry(1.0, 2.0, 2, 100, breaker_tokens=[[5]])
    for t in [0, 1, 2, 5, 0, 1, 2]:
        dry.accept(t)
    c = cand(np.zeros(6, dtype=np.float32))
    dry.apply(c)
    assert c.logits.tolist() == [0.0] * 6


def test_dry_string_breakers_from_vocabulary():
    vocab = ["a", "b", "\n", "x:", "c"]
    dry = Dry(1.0, 2.0, 2, 8, seq_breakers=["\n", ":"], vocab=vocab)
    assert dry.breakers == {2: [()], 3: [()]}
    with pytest.raises(ValueError, match="vocab="):
        Dry(1.0, 2.0, 2, 8, seq_breakers=["\n"])


def test_dry_disabled_does_nothing():
    dry = Dry(0.0, 2.0, 2, -1, breaker_tokens=[])
    for t in [0, 1, 0, 1, 0, 1]:
        dry.accept(t)
    c = cand(np.zeros(3, dtype=np.float32))
    dry.apply(c)
    assert c.logits.tolist() == [0.0, 0.0, 0.0] and dry.history == []


# -- selectors ------------------------------------------------------------------------------------

def test_greedy_picks_first_max():
    c = cand([1.0, 5.0, 5.0])
    Greedy().apply(c)
    assert c.selected == 1


def test_dist_reproduces_the_llama_cpp_draw():
    logits = np.array([1.0, 2.0, 0.5, 3.0], dtype=np.float32)
    c = cand(logits)
    Dist(1234).apply(c)
    w = np.exp(logits - logits.max())
    u = Mt19937(1234).uniform_double()
    expected = int(np.searchsorted(np.cumsum(w.astype(np.float64)), u * w.astype(np.float64).sum()))
    assert c.selected == expected
    assert c.p.sum() == pytest.approx(1.0, abs=1e-6)


def test_dist_single_candidate_still_draws_once():
    # llama.cpp's dist consumes one double (two words) even for a single candidate
    d = Dist(9)
    c = cand([0.3])
    d.apply(c)
    assert c.selected == 0 and c.p[0] == 1.0
    ref = Mt19937(9)
    ref.uniform_double()
    assert d._rng.next_u32() == ref.next_u32()


def test_dist_seed_reset_and_clone():
    logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)

    def draws(d, n=20):
        out = []
        for _ in range(n):
            c = cand(logits)
            d.apply(c)
            out.append(c.selected)
        return out

    a = Dist(77)
    first = draws(a)
    assert draws(Dist(77)) == first
    a.reset()
    assert draws(a, 5) == first[:5]
    twin = a.clone()
    assert draws(twin) == draws(a)


def test_mirostat_v2_truncates_by_surprise_and_updates_mu():
    p = np.array([0.6, 0.3, 0.1])
    m = MirostatV2(seed=3, tau=1.0, eta=0.5)  # mu = 2: keep tokens with -log2(p) <= 2 (0.6 and 0.3)
    c = cand(np.log(p))
    m.apply(c)
    assert c.size == 2 and c.selected in (0, 1)
    kept = np.array([0.6, 0.3]) / 0.9
    surprise = -np.log2(kept[c.selected])
    assert m.mu == pytest.approx(2.0 - 0.5 * (surprise - 1.0), rel=1e-5)
    m.reset()
    assert m.mu == 2.0


def test_mirostat_v1_selects_and_updates_mu():
    rng = np.random.default_rng(5)
    logits = np.sort(rng.standard_normal(200).astype(np.float32) * 3)[::-1].copy()
    m = Mirostat(n_vocab=200, seed=11, tau=5.0, eta=0.1, m=100)
    c = cand(logits)
    m.apply(c)
    assert 0 <= c.selected < c.size and c.sorted
    assert m.mu != 10.0
    twin = m.clone()
    c1, c2 = cand(logits), cand(logits)
    m.apply(c1)
    twin.apply(c2)
    assert c1.ids[c1.selected] == c2.ids[c2.selected] and m.mu == twin.mu


# -- make_sampler ---------------------------------------------------------------------------------

def test_make_sampler_uses_llama_cpp_names_and_parameters():
    assert isinstance(make_sampler("top_k", k=5), TopK)
    assert isinstance(make_sampler("top-p", p=0.9, min_keep=1), TopP)
    assert isinstance(make_sampler("temp_ext", t=0.8, delta=0.5, exponent=1.0), TempExt)
    assert isinstance(make_sampler("mirostat", n_vocab=10, seed=1, tau=5, eta=0.1, m=100), Mirostat)
    assert isinstance(make_sampler("penalties", penalty_last_n=64, penalty_repeat=1.1, penalty_freq=0,
                                   penalty_present=0), Penalties)
    assert make_sampler("xtc", p=0.5, t=0.1, min_keep=1, seed=3).name == "xtc"
    with pytest.raises(ValueError, match="unknown sampler 'topk'"):
        make_sampler("topk")
    with pytest.raises(TypeError, match="make_sampler\\('top_k'\\)"):
        make_sampler("top_k", kk=3)


def test_peeked_doubles_come_again_and_leave_the_stream_unchanged() -> None:
    a, b = Mt19937(1234), Mt19937(1234)
    a.uniform_float()
    b.uniform_float()
    peeked = a.peek_doubles(2)
    assert a.peek_doubles(1) == peeked[:1]
    assert a.uniform_double() == peeked[0] == b.uniform_double()
    c = a.copy()                       # a copy keeps the word still peeked ahead
    assert [a.next_u32() for _ in range(5)] == [b.next_u32() for _ in range(5)] == [c.next_u32() for _ in range(5)]
    a.peek_doubles(3)
    a.reseed()
    assert a.uniform_double() == Mt19937(1234).uniform_double()
