"""The fused CPU decode step (``decode="fused"``): the traced step's logits and cache, every architecture."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from halter import Model, jit
from halter.engine import build_tiny_gguf, fused_decode, static_decode
from tests.conftest import sequence_operations

pytestmark = pytest.mark.skipif(not jit.available(), reason="the fused step needs numba")


def _tokens(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, 250, n).tolist()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _run(path: str, mode: str, feed: list[int]) -> tuple[Model, list[torch.Tensor]]:
    m = Model.load(path, n_ctx=64, n_seq_max=2, progress=False, decode=mode)
    m.eval_prompt(_tokens(11, 1), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")            # no fallback: the fused step itself ran
        return m, [m.decode([[t]], [0])[0].clone() for t in feed]


# int4 products of one term (bfloat16 results) and of two (Q8_0: float32 results); biases (qwen2),
# head norms (qwen3, gemma3), soft-capping and post norms (gemma2), sliding windows with their own
# rope (gemma3, window 8: the 16 steps go past it), separate gate and up products (phi3)
@pytest.mark.parametrize("arch,dtype", [("llama", "Q4_0"), ("llama", "Q8_0"), ("qwen2", "Q4_1"),
                                        ("qwen3", "Q4_0"), ("gemma2", "Q4_0"), ("gemma3", "Q5_0"),
                                        ("phi3", "Q4_0")])
def test_fused_steps_follow_the_traced_step(tmp_path, arch: str, dtype: str) -> None:
    path = build_tiny_gguf(tmp_path / f"{arch}.gguf", arch=arch, dtype=dtype, n_embd=64, n_head=4,
                           n_head_kv=2, n_ff=128, seed=3, rope_base_swa=1000.0 if arch == "gemma3" else None)
    feed = _tokens(16, 2)
    fused, got = _run(path, "fused", feed)
    traced, want = _run(path, "static", feed)   # the steps "trace" records (some tiny outputs are
                                                 # too short for the int4 kernel: not traceable)
    assert fused.decode_mode == "fused"
    assert set(fused._static._fused_steps) == {1} and not fused._static.steps   # no bucket step
    # the two sum in other orders and round bfloat16 inputs where those sums land: the last bits
    # of some product inputs differ, nothing more
    assert max(_rel(a, b) for a, b in zip(got, want)) < 2e-2
    used = int(fused.cache.used[0])
    assert used == int(traced.cache.used[0]) == 27
    for a, b in ((fused.cache.k, traced.cache.k), (fused.cache.v, traced.cache.v)):
        assert _rel(a[:, 0, :, :used], b[:, 0, :, :used]) < 1e-2
    assert torch.equal(fused.cache.pos, traced.cache.pos)


def test_auto_picks_the_fused_step_for_packed_weights_on_the_cpu(tmp_path, monkeypatch) -> None:
    path = build_tiny_gguf(tmp_path / "q.gguf", dtype="Q4_0", seed=5)
    assert Model.load(path, n_ctx=64, progress=False).decode_mode == "fused"
    # float matrices, or no numba: the traced step
    f32 = build_tiny_gguf(tmp_path / "f.gguf", dtype="F32", seed=5)
    assert Model.load(f32, n_ctx=64, progress=False).decode_mode == "trace"
    with pytest.raises(ValueError, match="'fused' cannot run this model: it needs quantized matrices"):
        Model.load(f32, n_ctx=64, progress=False, decode="fused")
    with pytest.raises(ValueError, match="'fused' cannot run this model: it needs quantized"):
        Model.load(path, n_ctx=64, progress=False, decode="fused", weights="dequantize")
    monkeypatch.setattr(jit, "available", lambda: False)
    # what auto chose before the fused step: eager, as the tiny output matrix (310 rows) is
    # decoded at every product, which the tracer cannot record
    assert Model.load(path, n_ctx=64, progress=False).decode_mode == "eager"
    with pytest.raises(ValueError, match="it needs numba"):
        Model.load(path, n_ctx=64, progress=False, decode="fused")


def test_batches_are_fused_and_long_rows_run_the_other_steps(tmp_path, monkeypatch) -> None:
    path = build_tiny_gguf(tmp_path / "q.gguf", dtype="Q4_0", seed=6)
    fused = Model.load(path, n_ctx=256, n_seq_max=3, progress=False, decode="fused")
    plain = Model.load(path, n_ctx=256, n_seq_max=3, progress=False, decode="static")
    monkeypatch.setattr(static_decode, "MAX_SPAN", 64)     # a sequence past 64 cells: not fused
    out = []
    for m in (fused, plain):
        m.eval_prompt(_tokens(5, 3), 0)
        m.eval_prompt(_tokens(9, 4), 2)
        # rows 2 and 0, in that order (the logits follow seq_ids), then each alone
        short = [m.decode([[7], [8]], [2, 0]), m.decode([[9]], [2]), m.decode([[6]], [0])]
        m.eval_prompt(_tokens(60, 5), 0)                    # row 0 now holds 67 cells
        out.append((short, [m.decode([[7], [8]], [2, 0]), m.decode([[9]], [0])]))
    assert set(fused._static._fused_steps) == {1, 2}
    assert set(fused._static.steps) == {(3, 128), (1, 128)}       # the plain buckets
    for a, b in zip(out[0][0], out[1][0]):
        assert a.shape == b.shape and _rel(a, b) < 2e-2      # fused, against the plain step
    for a, b in zip(out[0][1], out[1][1]):
        assert torch.equal(a, b)                             # the same plain steps, bit for bit
    used = int(fused.cache.used[2])
    for a, b in ((fused.cache.k, plain.cache.k), (fused.cache.v, plain.cache.v)):
        assert _rel(a[:, 2, :, :used], b[:, 2, :, :used]) < 1e-2
        assert torch.equal(a[:, 1], b[:, 1]) and not a[:, 1].any()    # row 1: untouched


def test_a_failing_fused_step_degrades_to_the_static_step(tmp_path, monkeypatch) -> None:
    path = build_tiny_gguf(tmp_path / "q.gguf", dtype="Q4_0", seed=8)
    plain = Model.load(path, n_ctx=64, progress=False, decode="static")
    want = plain.generate([5, 6, 7], max_tokens=6, temperature=0.0, ignore_eos=True).tokens

    def broken(self) -> None:
        raise RuntimeError("no kernel")
    monkeypatch.setattr(fused_decode.FusedStep, "run", broken)
    m = Model.load(path, n_ctx=64, progress=False, decode="fused")
    # (the tiny model's 310-row output layer is dequantized per product: the traced step leaves it
    # to Python and records the layers)
    with pytest.warns(RuntimeWarning, match=r"the fused decode step failed \(RuntimeError: no kernel\); "
                                            r"decode steps run the static step traced"):
        got = m.generate([5, 6, 7], max_tokens=6, temperature=0.0, ignore_eos=True).tokens
    assert got == want


def test_fused_generation_matches_the_static_one(tmp_path) -> None:
    # a wider model than the others, so that greedy choices are not near ties
    path = build_tiny_gguf(tmp_path / "w.gguf", dtype="Q4_0", n_embd=128, n_ff=256, n_layer=2, seed=9)
    runs = [Model.load(path, n_ctx=64, progress=False, decode=mode)
            .generate([72, 101, 108, 108, 111], max_tokens=20, temperature=0.0, ignore_eos=True)
            for mode in ("fused", "static")]
    assert runs[0].tokens == runs[1].tokens


def test_one_sequence_in_another_row_is_fused_too(tmp_path) -> None:
    path = build_tiny_gguf(tmp_path / "q.gguf", dtype="Q4_0", seed=10)
    out = {}
    for mode in ("fused", "static"):
        m = Model.load(path, n_ctx=64, n_seq_max=3, progress=False, decode=mode)
        m.eval_prompt(_tokens(9, 1), 0)
        m.eval_prompt(_tokens(6, 2), 2)
        out[mode] = (m, [m.decode([[t]], [2])[0].clone() for t in _tokens(8, 3)] + [m.decode([[4]], [0])[0]])
    fused, plain = out["fused"][0], out["static"][0]
    assert set(fused._static._fused_steps) == {1} and not fused._static.steps
    assert max(_rel(a, b) for a, b in zip(out["fused"][1], out["static"][1])) < 2e-2
    for a, b in ((fused.cache.k, plain.cache.k), (fused.cache.v, plain.cache.v)):
        assert _rel(a[:, 2, :, :14], b[:, 2, :, :14]) < 1e-2
        assert torch.equal(a[:, 1], b[:, 1]) and not a[:, 1].any()    # the rows between: untouched
    assert torch.equal(fused.cache.pos, plain.cache.pos)


def test_fused_steps_after_sequence_operations(tmp_path) -> None:
    # the fused step reads positions and used cells from the cache as the static step does
    path = build_tiny_gguf(tmp_path / "q.gguf", dtype="Q4_0", seed=12)
    ids = _tokens(40, 5)
    runs = [sequence_operations(Model.load(path, n_ctx=64, n_seq_max=4, progress=False, decode=mode), ids)
            for mode in ("fused", "static")]
    for a, b in zip(*runs):
        assert a.shape == b.shape and _rel(a, b) < 2e-2
