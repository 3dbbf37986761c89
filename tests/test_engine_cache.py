"""KV cache behaviour users rely on: incremental decoding, independent sequences, sequence ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.conftest import tiny_path
from halter.engine import Model


def _tokens(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 300, n).tolist()


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return ((a - b).norm() / b.norm()).item() < tol


@pytest.fixture
def model(tiny_llama: Model) -> Model:
    tiny_llama.cache.clear()
    yield tiny_llama
    tiny_llama.cache.clear()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_incremental_decoding_equals_full_forward(tiny_gguf_dir: str, arch: str) -> None:
    m = Model.load(tiny_path(tiny_gguf_dir, arch, "F32"), device="cpu", n_ctx=64, n_batch=5,
                   progress=False)
    ids = _tokens(24)
    full = m.logits(ids)
    m.cache.clear()
    steps = [m.eval_prompt(ids[:11], 0)]                       # chunks of n_batch = 5
    steps += [m.decode([[t]], [0])[0] for t in ids[11:]]
    assert _close(torch.stack(steps), full[10:])


def test_batched_sequences_do_not_leak(model: Model) -> None:
    a, b = _tokens(9, 1), _tokens(17, 2)
    alone_a, alone_b = model.logits(a), model.logits(b)
    model.eval_prompt(a[:-1], 0)
    model.eval_prompt(b[:-1], 1)
    both = model.decode([[a[-1]], [b[-1]]], [0, 1])           # one batch, two positions
    assert _close(both[0], alone_a[-1]) and _close(both[1], alone_b[-1])
    assert not _close(both[0], both[1], 1e-2)


def test_shifting_every_position_changes_nothing(model: Model) -> None:
    ids = _tokens(12, 3)
    reference = model.logits(ids)[-1]
    model.eval_prompt(ids[:-1], 0)
    model.cache.seq_add(0, 0, None, 7)                          # keys re-rotated by 7 positions
    assert model.cache.seq_positions(0).tolist() == list(range(7, 18))
    shifted = model.decode([[ids[-1]]], [0])[0]                # evaluated at position 18
    assert _close(shifted, reference, 1e-4)


def test_seq_rm_then_recompute(model: Model) -> None:
    ids = _tokens(15, 4)
    reference = model.logits(ids)
    model.eval_prompt(_tokens(15, 5), 0)                       # a different tail to be removed
    model.cache.seq_rm(0, 0, None)
    model.eval_prompt(ids[:6], 0)
    model.eval_prompt([9, 9, 9], 0)
    model.cache.seq_rm(0, 6, None)                             # drop the wrong continuation
    assert model.cache.seq_pos_max(0) == 5
    tail = model.eval_prompt(ids[6:], 0, all_logits=True)
    assert _close(tail, reference[6:])


def test_seq_cp_gives_an_independent_copy(model: Model) -> None:
    ids = _tokens(10, 6)
    model.eval_prompt(ids, 0)
    model.cache.seq_cp(0, 2)
    out = model.decode([[5], [5]], [0, 2])
    assert _close(out[0], out[1], 1e-6)
    model.decode([[7]], [2])                                    # grows only sequence 2
    assert model.cache.n_tokens(0) == 11 and model.cache.n_tokens(2) == 12


def test_negative_positions_are_removed(model: Model) -> None:
    model.eval_prompt(_tokens(6), 0)
    model.cache.seq_add(0, 0, None, -4)
    assert model.cache.seq_positions(0).tolist() == [0, 1]


def test_full_sequence_is_a_clear_error(model: Model) -> None:
    model.eval_prompt(_tokens(60), 0)
    with pytest.raises(ValueError, match="sequence 0 is full"):
        model.decode([[1, 2, 3, 4, 5]], [0])
    assert model.cache.n_tokens(0) == 60                       # nothing half-written
    with pytest.raises(ValueError, match="sequence id 9 out of range"):
        model.cache.seq_rm(9)
    with pytest.raises(ValueError, match="token ids must be in"):
        model.decode([[100000]], [1])


def test_logits_do_not_disturb_other_sequences(model: Model) -> None:
    model.eval_prompt(_tokens(5), 1)
    model.logits(_tokens(8))
    assert model.cache.n_tokens(1) == 5 and model.cache.n_tokens(0) == 0
