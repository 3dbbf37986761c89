"""Packed token bitmasks: layout, round trips, and in-place masking of numpy and torch logits."""
import numpy as np
import pytest
import torch

from halter.grammar.bitmask import (allocate_bitmask, apply_bitmask, apply_token_bitmask_inplace,
                                    bitmask_to_bool, bool_to_bitmask)


def test_allocate_shapes_and_all_allowed():
    bm = allocate_bitmask(3, 70)
    assert bm.shape == (3, 3) and bm.dtype == np.int32 and (bm == -1).all()
    assert allocate_bitmask(None, 64).shape == (2,)


@pytest.mark.parametrize("bad", [0, -5, 2.5])
def test_allocate_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="vocab_size"):
        allocate_bitmask(1, bad)
    with pytest.raises(ValueError, match="batch_size"):
        allocate_bitmask(bad, 10)


def test_bit_layout_matches_xgrammar():
    # token 32*j + i is bit i of word j
    mask = np.zeros(70, dtype=bool)
    mask[[0, 5, 31, 32, 69]] = True
    bm = bool_to_bitmask(mask)
    assert bm.shape == (3,)
    assert bm[0] == np.int32((1 << 0) | (1 << 5) | np.int64(1 << 31) - (1 << 32))
    assert bm[1] == 1 and bm[2] == 1 << 5


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 1000])
def test_round_trip(vocab):
    rng = np.random.default_rng(vocab)
    mask = rng.random((4, vocab)) < 0.5
    assert np.array_equal(bitmask_to_bool(bool_to_bitmask(mask), vocab), mask)


def test_apply_numpy_1d_sets_exactly_disallowed_and_keeps_input_values():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(100).astype(np.float32)
    mask = rng.random(100) < 0.3
    out = logits.copy()
    apply_bitmask(out, bool_to_bitmask(mask))
    assert np.array_equal(np.isneginf(out), ~mask)
    assert np.array_equal(out[mask], logits[mask])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_apply_numpy_dtypes(dtype):
    logits = np.arange(40, dtype=dtype) - 20
    mask = np.arange(40) % 3 == 0
    apply_bitmask(logits, bool_to_bitmask(mask))
    assert np.array_equal(np.isneginf(logits), ~mask)


def test_padding_columns_beyond_vocab_are_disallowed():
    logits = np.zeros(70, dtype=np.float32)
    bm = bool_to_bitmask(np.ones(50, dtype=bool))  # 2 words = 64 tokens of capacity
    apply_bitmask(logits, bm, vocab_size=50)
    assert np.isfinite(logits[:50]).all() and np.isneginf(logits[50:]).all()
    logits = np.zeros(70, dtype=np.float32)
    apply_bitmask(logits, allocate_bitmask(None, 64))  # default vocab = min(70, 64)
    assert np.isfinite(logits[:64]).all() and np.isneginf(logits[64:]).all()


def test_batch_and_indices():
    rng = np.random.default_rng(1)
    masks = rng.random((3, 40)) < 0.5
    bm = bool_to_bitmask(masks)
    logits = np.zeros((3, 40), dtype=np.float32)
    apply_bitmask(logits, bm, indices=[0, 2])
    assert np.array_equal(np.isneginf(logits[0]), ~masks[0])
    assert np.isfinite(logits[1]).all()
    assert np.array_equal(np.isneginf(logits[2]), ~masks[2])


def test_torch_matches_numpy_including_batch_and_indices():
    rng = np.random.default_rng(2)
    masks = rng.random((3, 77)) < 0.4
    bm = bool_to_bitmask(masks)
    base = rng.standard_normal((3, 80)).astype(np.float32)
    ref = base.copy()
    apply_bitmask(ref, bm, vocab_size=77, indices=[1, 2])
    t = torch.from_numpy(base.copy())
    apply_token_bitmask_inplace(t, torch.from_numpy(bm), vocab_size=77, indices=[1, 2])
    assert np.array_equal(t.numpy(), ref)
    t1 = torch.from_numpy(base[0].copy())
    apply_bitmask(t1, bm[0])  # a numpy bitmask with a tensor works too
    r1 = base[0].copy()
    apply_bitmask(r1, bm[0])
    assert np.array_equal(t1.numpy(), r1)


@pytest.mark.parametrize("logits, bitmask, kwargs, err, msg", [
    (np.zeros(10, np.float32), np.zeros(1, np.int64), {}, TypeError, "int32"),
    (np.zeros(10, np.int32), np.zeros(1, np.int32), {}, TypeError, "floating point"),
    (np.zeros((2, 10), np.float32), np.zeros((3, 1), np.int32), {}, ValueError, "rows"),
    (np.zeros((2, 10), np.float32), np.zeros(1, np.int32), {}, ValueError, "both be 1-D or both be 2-D"),
    (np.zeros(10, np.float32), np.zeros(1, np.int32), {"vocab_size": 40}, ValueError, "does not fit"),
    (np.zeros((2, 10), np.float32), np.zeros((2, 1), np.int32), {"indices": [5]}, IndexError, "out of range"),
    (np.zeros(10, np.float32), torch.zeros(1, dtype=torch.int32), {}, TypeError, "numpy bitmask"),
])
def test_clear_errors(logits, bitmask, kwargs, err, msg):
    with pytest.raises(err, match=msg):
        apply_bitmask(logits, bitmask, **kwargs)


def test_bool_to_bitmask_rejects_non_bool():
    with pytest.raises(TypeError, match="boolean"):
        bool_to_bitmask(np.zeros(4, dtype=np.int32))
