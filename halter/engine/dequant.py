"""Dequantize GGML tensor blocks to floating point, vectorised over whole tensors with torch.

Each GGML quantization type stores a tensor as a run of fixed-size blocks (32 values for the
legacy types Q4_0..Q8_0, 256 for the K-quants Q2_K..Q6_K). The functions here take the raw bytes
of a tensor viewed as ``uint8 [n_blocks, block_bytes]`` and return ``float32 [n_blocks, block_len]``.
Block layouts follow ggml's ``block_q*`` structs (``ggml/src/ggml-common.h``); the bit
arithmetic is written from their description, with no per-block Python loop.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

# ggml type id -> (name, values per block, bytes per block)
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 30: ("BF16", 1, 2),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210),
}
# Rows of blocks dequantized at a time, bounding the float32 intermediates (~1 GiB for K-quants).
_CHUNK_BLOCKS = 1 << 20


def _f16(b: torch.Tensor) -> torch.Tensor:
    """Two uint8 columns -> float32 [n, 1] (little-endian IEEE half)."""
    if torch.compiler.is_compiling() or b.stride(0) % 2 or b.storage_offset() % 2:
        b = b.contiguous()         # (a compiled step cannot branch on the storage offset)
    return b.view(torch.float16).float()           # a strided view: no copy of the columns


def _u32(b: torch.Tensor) -> torch.Tensor:
    """Four uint8 columns -> int64 [n, 1] (little-endian uint32)."""
    b = b.long()
    return b[:, 0:1] | (b[:, 1:2] << 8) | (b[:, 2:3] << 16) | (b[:, 3:4] << 24)


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[n, 16] packed bytes -> [n, 32]: low nibbles are values 0..15, high nibbles 16..31."""
    return torch.cat([qs & 0x0F, qs >> 4], dim=1)


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    return (_nibbles(b[:, 2:18]).float() - 8.0) * _f16(b[:, 0:2])


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    return _nibbles(b[:, 4:20]).float() * _f16(b[:, 0:2]) + _f16(b[:, 2:4])


def _q5_high(qh: torch.Tensor) -> torch.Tensor:
    """uint32 [n, 1] -> the fifth bit (0 or 16) of each of the 32 values."""
    bits = torch.arange(32, device=qh.device)
    return ((qh >> bits) & 1) << 4


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles(b[:, 6:22]).long() | _q5_high(_u32(b[:, 2:6]))
    return (q.float() - 16.0) * _f16(b[:, 0:2])


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles(b[:, 8:24]).long() | _q5_high(_u32(b[:, 4:8]))
    return q.float() * _f16(b[:, 0:2]) + _f16(b[:, 2:4])


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:34].contiguous().view(torch.int8).float() * _f16(b[:, 0:2])


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    scales, qs = b[:, 0:16], b[:, 16:80]
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).view(1, 1, 4, 1)
    # two halves of 128 values; each half reads 32 bytes four times at shifts 0,2,4,6
    q = (qs.view(n, 2, 1, 32) >> shifts) & 3                      # [n, 2, 4, 32]
    q = q.reshape(n, 16, 16).float()                               # 16 groups of 16 values
    dl = d * (scales & 0x0F).float()
    ml = dmin * (scales >> 4).float()
    return (dl.unsqueeze(2) * q - ml.unsqueeze(2)).reshape(n, 256)


def _q3_k_scales(s: torch.Tensor) -> torch.Tensor:
    """12 packed bytes -> 16 signed 6-bit scales: low 4 bits from bytes 0..7, high 2 from 8..11."""
    low = torch.cat([s[:, 0:8] & 0x0F, s[:, 0:8] >> 4], dim=1)      # scale k: k<8 low, else high nibble
    hi_src = s[:, 8:12].repeat(1, 4)                               # byte 8 + k%4
    hi_shift = torch.arange(4, device=s.device).repeat_interleave(4).to(torch.uint8) * 2
    high = (hi_src >> hi_shift) & 3
    return (low | (high << 4)).float() - 32.0


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    hmask, qs, scales, d = b[:, 0:32], b[:, 32:96], b[:, 96:108], _f16(b[:, 108:110])
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).view(1, 1, 4, 1)
    q = ((qs.view(n, 2, 1, 32) >> shifts) & 3).to(torch.int16)    # [n, 2, 4, 32]
    bit = torch.arange(8, dtype=torch.uint8, device=b.device).view(1, 2, 4, 1)
    hm = (hmask.view(n, 1, 1, 32) >> bit) & 1                      # high bit h*4+j
    q = q - 4 * (1 - hm.to(torch.int16))
    dl = d * _q3_k_scales(scales)
    return (dl.unsqueeze(2) * q.reshape(n, 16, 16).float()).reshape(n, 256)


def _k4_scales(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """12 packed bytes -> 8 six-bit scales and 8 six-bit mins (shared by Q4_K and Q5_K)."""
    sc = torch.cat([s[:, 0:4] & 63, (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)], dim=1)
    mn = torch.cat([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], dim=1)
    return sc.float(), mn.float()


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k4_scales(b[:, 4:16])
    qs = b[:, 16:144].view(n, 4, 1, 32)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=2).reshape(n, 8, 32).float()
    return ((d * sc).unsqueeze(2) * q - (dmin * mn).unsqueeze(2)).reshape(n, 256)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k4_scales(b[:, 4:16])
    qh, qs = b[:, 16:48], b[:, 48:176].view(n, 4, 1, 32)
    q = torch.cat([qs & 0x0F, qs >> 4], dim=2).reshape(n, 8, 32)
    bit = torch.arange(8, dtype=torch.uint8, device=b.device).view(1, 8, 1)
    q = q | (((qh.view(n, 1, 32) >> bit) & 1) << 4)
    return ((d * sc).unsqueeze(2) * q.float() - (dmin * mn).unsqueeze(2)).reshape(n, 256)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    n = b.shape[0]
    ql, qh = b[:, 0:128].view(n, 2, 2, 32), b[:, 128:192].view(n, 2, 1, 32)
    scales = b[:, 192:208].contiguous().view(torch.int8).float()
    d = _f16(b[:, 208:210])
    low = torch.cat([ql & 0x0F, ql >> 4], dim=2)                   # [n, 2, 4, 32]: r = 0..3
    shift = torch.tensor([0, 2, 4, 6], dtype=torch.uint8, device=b.device).view(1, 1, 4, 1)
    high = (qh >> shift) & 3
    q = (low | (high << 4)).float() - 32.0
    return ((d * scales).unsqueeze(2) * q.reshape(n, 16, 16)).reshape(n, 256)


_BLOCK_FNS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
    "Q2_K": _q2_k, "Q3_K": _q3_k, "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k,
}


def dequantize_blocks(blocks: torch.Tensor, name: str) -> torch.Tensor:
    """``uint8 [n, block_bytes]`` blocks of quantized type ``name`` -> ``float32 [n, block_len]``."""
    return _BLOCK_FNS[name](blocks)


# Byte offsets of the float16 scale fields (d, dmin) in each quantized type's block: the only
# fields whose bits can encode NaN or infinity (every other field is an integer code).
SCALE_FIELDS: dict[str, tuple[int, ...]] = {
    "Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,),
    "Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,),
}


def type_name(ggml_type: int) -> str:
    """The ggml type's name, e.g. ``"Q4_K"`` (gguf-py's name for types halter cannot decode)."""
    if ggml_type in GGML_TYPES:
        return GGML_TYPES[ggml_type][0]
    try:
        import gguf
        return gguf.GGMLQuantizationType(ggml_type).name
    except (ImportError, ValueError):
        return f"type {ggml_type}"


def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...],
               dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> torch.Tensor:
    """Decode one tensor's raw GGUF data into a ``dtype`` tensor of ``shape`` on ``device``.

    ``raw`` is the tensor's data as ``GGUFReader`` exposes it (any numpy dtype, read as bytes);
    ``shape`` is the torch (row-major) shape. The work runs on ``device`` in chunks of blocks, so
    a CUDA device also dequantizes on the GPU. Raises ``KeyError`` for an unknown type and
    ``ValueError`` when the byte count does not match the shape.
    """
    name, block_len, block_bytes = GGML_TYPES[ggml_type]
    n_values = int(np.prod(shape)) if shape else 1
    data = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if n_values % block_len or data.size != n_values // block_len * block_bytes:
        raise ValueError(f"{name} tensor of shape {tuple(shape)} needs "
                         f"{n_values // block_len * block_bytes} bytes, found {data.size}")
    if name in ("F32", "F16", "BF16"):
        np_dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[name]
        t = torch.from_numpy(data.view(np_dtype).copy())
        if name == "BF16":
            t = t.view(torch.bfloat16)
        return t.to(device=device, dtype=dtype).reshape(shape)
    fn = _BLOCK_FNS[name]
    blocks = data.reshape(-1, block_bytes)
    out = torch.empty((blocks.shape[0], block_len), dtype=dtype, device=device)
    for start in range(0, blocks.shape[0], _CHUNK_BLOCKS):
        chunk = torch.from_numpy(blocks[start:start + _CHUNK_BLOCKS].copy()).to(device)
        out[start:start + chunk.shape[0]] = fn(chunk).to(dtype)
    return out.reshape(shape)
