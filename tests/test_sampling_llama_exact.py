"""Places where halter's samplers used to part from llama.cpp's (the llama.cpp bundled with
llama-cpp-python 0.3.36), each pinned by a case that the old code got wrong."""
import ctypes
import ctypes.util

import numpy as np
import pytest

from halter.sampling import (Candidates, Dist, Dry, LogitBias, MinP, Mirostat, SamplerChain, SamplingParams,
                             TempExt, TopNSigma, TopP)
from halter.sampling.cmath import HAVE_GLIBC, expf, sum_f32
from halter.sampling.llama_sort import partial_sort, sort_order, std_sort


def cand(logits, ids=None, sorted_=False):
    return Candidates(ids=ids, logits=np.asarray(logits, dtype=np.float32), sorted=sorted_)


def test_logit_bias_listed_twice_for_a_moved_token_applies_the_first_only():
    # llama.cpp searches moved tokens and stops at the first bias listed for each
    ids = np.array([3, 5, 1, 0], dtype=np.int32)
    c = cand([0.0, 0.0, 0.0, 0.0], ids=ids)
    LogitBias(10, [(5, 1.0), (5, 2.0), (0, -1.0)]).apply(c)
    assert c.logits.tolist() == [0.0, 1.0, 0.0, -1.0]


def test_logit_bias_listed_twice_in_place_applies_both():
    c = cand([0.0] * 6)
    LogitBias(6, [(5, 1.0), (5, 2.0)]).apply(c)
    assert c.logits.tolist() == [0.0] * 5 + [3.0]


def test_dry_negative_window_is_off_as_llama_sampler_init_dry_clamps_it():
    hist = [0, 1, 2, 2, 1, 2, 5, 0, 1, 2]
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=2, penalty_last_n=-1, breaker_tokens=[])
    for t in hist:
        dry.accept(t)
    c = cand(np.zeros(6))
    dry.apply(c)
    assert c.logits.tolist() == [0.0] * 6


def test_sampling_params_dry_minus_one_means_the_whole_context():
    chain = SamplingParams(dry_multiplier=1.0, dry_base=2.0, dry_penalty_last_n=-1, dry_sequence_breakers=(),
                           samplers="dry", temperature=0.0).build(6)
    for t in [0, 1, 2, 2, 1, 2, 5, 0, 1, 2]:
        chain.accept(t)
    c = cand(np.zeros(6))
    chain.samplers[0].apply(c)
    assert c.logits.tolist() == [0.0, 0.0, -2.0, 0.0, 0.0, -1.0]


def test_top_n_sigma_masks_in_place_so_min_p_keeps_the_order():
    # top-n-sigma used to sort; llama.cpp only masks, and min-p then filters in array order
    logits = np.array([1.0, 5.0, 4.0, -3.0, 4.5, 0.5], dtype=np.float32)
    c = cand(logits)
    SamplerChain([TopNSigma(1.0), MinP(0.05)]).apply(c)
    assert c.ids.tolist() == [1, 2, 4] and not c.sorted


def test_softmax_sums_left_to_right_in_float():
    # a pairwise float sum (numpy's) differs from the sequential one here in the last bit
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, 4096).astype(np.float32)
    c = cand(x)
    c.softmax(do_sort=False)
    p = expf(x - x.max())
    seq = np.float32(0)
    for v in p.tolist():
        seq = np.float32(seq + np.float32(v))
    assert sum_f32(p) == seq
    assert np.array_equal(c.p, p / seq)


@pytest.mark.skipif(not HAVE_GLIBC, reason="the C library here is not glibc")
def test_expf_is_glibc_expf_bit_for_bit():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(0, 10, 3000), -rng.exponential(30, 3000), [0.0, -0.0, -87.3, -103.9, -104.0,
                        88.7, 88.8, -np.inf, np.inf]]).astype(np.float32)
    ref = np.array([libm.expf(float(v)) for v in x], dtype=np.float32)
    assert np.array_equal(expf(x), ref)
    with np.errstate(over="ignore"):
        assert (np.exp(x) != ref).any()      # numpy's float32 exp is not the same function


def test_dist_divides_probabilities_in_double():
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2, 300).astype(np.float32)
    c = cand(x)
    Dist(7).apply(c)
    w = expf(x - x.max())
    total = float(np.cumsum(w, dtype=np.float64)[-1])
    assert np.array_equal(c.p, (w.astype(np.float64) / total).astype(np.float32))


@pytest.mark.skipif(not HAVE_GLIBC, reason="the C library here is not glibc")
def test_temp_ext_renormalises_float_rounded_exponentials_by_a_double_sum():
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.exp.restype, libm.exp.argtypes = ctypes.c_double, [ctypes.c_double]
    x = np.random.default_rng(4).normal(0, 3, 2000).astype(np.float32)
    c = cand(x)
    TempExt(1.0, 0.5, 1.0).apply(c)
    lg = c.logits.astype(np.float64)
    e = np.array([libm.exp(v) for v in (lg - lg[0]).tolist()])
    total = float(np.cumsum(e)[-1])
    # llama.cpp sums the double exponentials left to right, stores float(exp) and divides that
    # float by the double sum
    assert np.array_equal(c.p, (e.astype(np.float32).astype(np.float64) / total).astype(np.float32))
    assert c.sorted


def test_libstdcxx_sort_emulation_sorts_and_keeps_ties_in_its_own_order():
    rng = np.random.default_rng(0)
    for n in (2, 15, 16, 17, 40, 200, 1000):
        keys = rng.integers(0, 5, n).astype(float).tolist()
        a = list(zip(keys, range(n)))
        std_sort(a, 0, n, lambda x, y: x[0] < y[0])
        assert [k for k, _ in a] == sorted(keys)
        assert sorted(i for _, i in a) == list(range(n))
    # introsort is not stable: some tie group comes out of order for a big enough input
    keys = rng.integers(0, 3, 500).astype(float).tolist()
    a = list(zip(keys, range(500)))
    std_sort(a, 0, 500, lambda x, y: x[0] < y[0])
    assert [i for _, i in a] != sorted(range(500), key=lambda i: keys[i])


@pytest.mark.parametrize("n,k", [(50, 10), (50, 50), (300, 40), (300, 300), (5000, 256), (5000, 5000)])
def test_sort_order_is_a_descending_order_of_the_top_k(n, k):
    rng = np.random.default_rng(n + k)
    x = (rng.integers(-6, 6, n) * 0.5).astype(np.float32)
    o = sort_order(x, k)
    assert len(set(o.tolist())) == k
    assert np.array_equal(x[o], np.sort(x)[::-1][:k])


@pytest.mark.parametrize("n,k", [(60, 7), (3000, 40), (20000, 128)])
def test_top_k_with_ties_is_libstdcxx_partial_sort(n, k):
    # logits rounded to bfloat16 (as the packed engine's int4 products return them) tie often;
    # the heap select that orders ties must leave what std::partial_sort over every entry leaves
    rng = np.random.default_rng(k)
    x = rng.normal(0, 3, n).astype(np.float32)
    x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    a = list(zip((-x.astype(np.float64)).tolist(), range(n)))
    partial_sort(a, 0, k, n, lambda p, q: p[0] < q[0])
    assert sort_order(x, k).tolist() == [i for _, i in a[:k]]


def test_top_p_and_mirostat_run_on_all_equal_logits():
    c = cand(np.zeros(3000))
    TopP(0.5).apply(c)
    assert c.size == 1500 and c.sorted
    m = Mirostat(3000, seed=1)
    c = cand(np.zeros(300))
    m.apply(c)
    assert 0 <= c.selected < c.size


def test_dist_falls_back_to_the_last_candidate_when_the_sum_is_nan():
    # a logit bias of -inf on the first entry of a sorted array: max = -inf, every weight NaN or inf;
    # llama.cpp's running sum never reaches its (NaN) target and it takes the last candidate
    c = cand([-np.inf, 1.0, 1.0, 0.5], sorted_=True)
    with np.errstate(invalid="ignore"):
        Dist(3).apply(c)
    assert c.selected == 3


@pytest.mark.parametrize("compiled", [True, False])
def test_heap_select_kernel_and_fallback_keep_libstdcxx_tie_order(compiled, monkeypatch):
    # the compiled heap select (numba) and the Python heap over tuples must both leave exactly what
    # std::partial_sort leaves, with ties, -inf and NaN among the logits
    from halter.sampling import heap_select
    if not compiled:
        monkeypatch.setattr(heap_select, "select", lambda values, k, load=True: None)
    elif heap_select.select(np.zeros(2, np.float32), 1) is None:
        pytest.skip("numba not installed")
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(2, 3000))
        k = int(rng.integers(1, min(n, 128) + 1))
        x = (rng.integers(-4, 4, n) * 0.25).astype(np.float32)
        x[rng.random(n) < 0.05] = -np.inf
        if trial % 4 == 0:
            x[rng.integers(0, n)] = np.nan
        a = list(zip((-x.astype(np.float64)).tolist(), range(n)))
        partial_sort(a, 0, k, n, lambda p, q: p[0] < q[0])
        expected = [i for _, i in a[:k]]
        assert sort_order(x, k).tolist() == expected
        assert heap_select.select_py(x, k).tolist() == expected
