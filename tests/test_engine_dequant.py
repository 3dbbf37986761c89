"""Dequantization of every supported GGML type against gguf-py's reference decoder."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from halter.engine.dequant import GGML_TYPES, dequantize
from halter.engine.tiny import quantize_q4_k

gguf = pytest.importorskip("gguf")

# byte offsets of the fp16 scale fields in each block: random bytes there could be NaN/inf
HALF_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}


@pytest.mark.parametrize("name", sorted(HALF_FIELDS))
def test_block_types_match_gguf_py(name: str) -> None:
    type_id = next(k for k, v in GGML_TYPES.items() if v[0] == name)
    _, block_len, block_bytes = GGML_TYPES[type_id]
    rng = np.random.default_rng(type_id)
    n_blocks = 12
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in HALF_FIELDS[name]:
        blocks[:, off:off + 2] = rng.standard_normal(n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    rows = blocks.reshape(3, -1)                                  # 3 rows of 4 blocks
    expected = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType[name])
    ours = dequantize(rows, type_id, (3, 4 * block_len))
    assert ours.dtype == torch.float32 and ours.shape == (3, 4 * block_len)
    np.testing.assert_array_equal(ours.numpy(), expected.astype(np.float32))


@pytest.mark.parametrize("name", ["F32", "F16", "BF16"])
def test_float_types(name: str) -> None:
    values = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    type_id = next(k for k, v in GGML_TYPES.items() if v[0] == name)
    raw = gguf.quants.quantize(values, gguf.GGMLQuantizationType[name]) if name == "BF16" \
        else values.astype(np.float16 if name == "F16" else np.float32)
    ours = dequantize(raw, type_id, (4, 8), dtype=torch.float32)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[name]) if name == "BF16" \
        else raw.astype(np.float32)
    np.testing.assert_array_equal(ours.numpy(), expected)


def test_target_dtype_is_respected() -> None:
    raw = gguf.quants.quantize(np.ones((2, 32), np.float32), gguf.GGMLQuantizationType.Q8_0)
    out = dequantize(raw, 8, (2, 32), dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16 and torch.all(out == 1)


def test_wrong_byte_count_is_an_error() -> None:
    with pytest.raises(ValueError, match="Q8_0 tensor of shape"):
        dequantize(np.zeros(33, np.uint8), 8, (32,))


def test_q4_k_encoder_round_trips_closely() -> None:
    w = np.random.default_rng(1).standard_normal((8, 512)).astype(np.float32)
    back = dequantize(quantize_q4_k(w), 12, w.shape).numpy()
    assert np.abs(back - w).max() < 0.25                       # 4-bit steps of a ~±3.5 range
    assert np.corrcoef(back.ravel(), w.ravel())[0, 1] > 0.99
