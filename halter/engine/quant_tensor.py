"""A GGUF tensor kept in its quantized blocks, and its decomposition into 4-bit terms.

``QuantTensor`` holds the raw blocks of one weight matrix ``[N, K]`` (row ``n`` is the
``K / block_len`` consecutive blocks of that row), as a view of the memory-mapped file or a copy on
a device. It dequantizes whole (into a caller's buffer) or by rows (embedding lookups), and its row
parts concatenate (fused Q/K/V) without decoding.

``int4_terms`` rewrites a tensor of type Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K or Q8_0 as a sum of
one or two matrices of 4-bit codes ``c`` with a scale ``s`` and an offset ``z`` per group of 32
values, ``w = (c - 8) * s + z``: the form of torch's weight-only int4 kernels. The rewrite is exact
in float32 (5-bit and 8-bit codes split into a low nibble and a high part, each its own term);
only the rounding of ``s`` and ``z`` to the kernel's dtype is lost.
"""
from __future__ import annotations

import ctypes
import mmap
from typing import NamedTuple

import numpy as np
import torch

from halter.engine.dequant import GGML_TYPES, SCALE_FIELDS, _f16, _k4_scales, \
    dequantize_blocks

INT4_GROUP = 32
INT4_TYPES = ("Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q8_0")
Term = tuple[torch.Tensor, torch.Tensor, torch.Tensor]    # codes uint8 [n, L] 0..15, scale, zero [n, L/32]


class QuantTensor:
    """Raw GGUF blocks of a ``[N, K]`` weight: ``raw`` is ``uint8 [N, K / block_len * block_bytes]``."""

    def __init__(self, raw: torch.Tensor, ggml_type: int, shape: tuple[int, int]) -> None:
        self.type_name, self.block_len, self.block_bytes = GGML_TYPES[ggml_type]
        self.ggml_type, self.shape = ggml_type, (int(shape[0]), int(shape[1]))
        if self.shape[1] % self.block_len:
            raise ValueError(f"{self.type_name} rows of {self.shape[1]} values are not whole blocks")
        self.raw = raw.reshape(self.shape[0], self.shape[1] // self.block_len * self.block_bytes)
        self.file_backed = False           # a view of a memory-mapped file (``release_pages``)
        self.source_path: str | None = None      # the file and tensor it came from (errors name them)
        self.source_name: str | None = None
        self.scales_checked = False        # its scale fields were found finite (``scales_finite``, packing)

    @classmethod
    def from_map(cls, mapped: np.ndarray, offset: int, ggml_type: int, shape: tuple[int, int]) -> "QuantTensor":
        """A view of the tensor's bytes at ``offset`` of ``mapped``, a private (copy-on-write)
        memory map of the file (``np.memmap(path, mode="c")``; one map for all of a file's tensors).

        Nothing is read until used; pages read stay file-backed (shared with the page cache).
        """
        _, block_len, block_bytes = GGML_TYPES[ggml_type]
        n = shape[0] * shape[1] // block_len * block_bytes
        q = cls(torch.from_numpy(mapped[offset:offset + n]), ggml_type, shape)
        q.file_backed = True
        return q

    @property
    def nbytes(self) -> int:
        return self.raw.numel()

    @property
    def device(self) -> torch.device:
        return self.raw.device

    def to(self, device: torch.device | str) -> "QuantTensor":
        if self.raw.device == torch.device(device):
            return self
        q = QuantTensor(self.raw.to(device), self.ggml_type, self.shape)
        q.source_path, q.source_name, q.scales_checked = self.source_path, self.source_name, self.scales_checked
        return q

    def blocks(self) -> torch.Tensor:
        return self.raw.reshape(-1, self.block_bytes)

    def scales_finite(self) -> bool:
        """Whether every float16 scale field is finite (the codes themselves are integers)."""
        b = self.blocks()            # a half is NaN or infinite when its five exponent bits are all ones
        return not any(bool(((b[:, o + 1] & 0x7C) == 0x7C).any()) for o in SCALE_FIELDS[self.type_name])

    def dequantize(self, dtype: torch.dtype = torch.float32, out: torch.Tensor | None = None) -> torch.Tensor:
        """The float ``[N, K]`` matrix, written into ``out`` when given (a reused buffer)."""
        values = dequantize_blocks(self.blocks(), self.type_name)
        if out is None:
            return values.to(dtype).reshape(self.shape)
        out.view(values.shape).copy_(values)
        return out

    def rows(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``ids`` (any shape) dequantized: ``[*ids.shape, K]`` (an embedding lookup)."""
        picked = self.raw.index_select(0, ids.reshape(-1).to(self.raw.device))
        values = dequantize_blocks(picked.reshape(-1, self.block_bytes), self.type_name)
        return values.to(dtype).reshape(*ids.shape, self.shape[1])

    def row_slice(self, start: int, end: int) -> "QuantTensor":
        """Rows ``start:end`` (a view of the same blocks: rows are independent in every type)."""
        q = QuantTensor(self.raw[start:end], self.ggml_type, (end - start, self.shape[1]))
        q.file_backed, q.source_path, q.source_name = self.file_backed, self.source_path, self.source_name
        q.scales_checked = self.scales_checked
        return q

    @staticmethod
    def cat(parts: list["QuantTensor"]) -> "QuantTensor":
        """Row-wise concatenation of tensors of one type and width (fused projections)."""
        first = parts[0]
        if any(p.ggml_type != first.ggml_type or p.shape[1] != first.shape[1] for p in parts):
            raise ValueError("only tensors of one type and width concatenate")
        return QuantTensor(torch.cat([p.raw for p in parts]), first.ggml_type,
                           (sum(p.shape[0] for p in parts), first.shape[1]))

    def int4_terms(self, row_start: int = 0, row_end: int | None = None) -> list[Term]:
        """Rows ``row_start:row_end`` as 4-bit terms ``(codes [n, K], scale, zero [n, K/32])``."""
        b = self.raw[row_start:row_end].reshape(-1, self.block_bytes)
        return [(c.materialise(b).reshape(s.shape[0], -1) if isinstance(c, Codes) else c, s, z)
                for c, s, z in self.int4_lazy_terms(row_start, row_end)]

    def int4_lazy_terms(self, row_start: int = 0, row_end: int | None = None) -> list[LazyTerm]:
        """As ``int4_terms``, but codes that lie in the blocks as they are come as ``Codes``."""
        rows = self.raw[row_start:row_end]
        return header_terms(self.type_name, rows.reshape(-1, self.block_bytes), rows.shape[0])


def header_terms(type_name: str, blocks: torch.Tensor, n_rows: int) -> list[LazyTerm]:
    """The lazy int4 terms of ``n_rows`` rows of ``blocks`` (``[n_blocks, bytes]``): whole blocks,
    or only their first ``LAZY_CODES[type_name][0].off`` bytes, where every field a term reads
    lies (scales, minimums, the 5-bit types' fifth bits: all before the 4-bit codes)."""
    terms = _TERM_FNS[type_name](blocks)
    return [(c if isinstance(c, Codes) else c.reshape(n_rows, -1), s.reshape(n_rows, -1), z.reshape(n_rows, -1))
            for c, s, z in terms]


def release_pages(q: QuantTensor) -> None:
    """Drop a file-backed tensor's pages from this process (they stay in the page cache).

    After a pass over the tensor (packing it into another form, the load-time scale check), its
    pages would otherwise count in the process's resident memory although only a few rows
    (embedding lookups) or none (packed weights) are read afterwards; a page read again comes
    back from the page cache. Only whole pages inside the tensor's bytes are dropped (the map
    is private and never written, so nothing is lost). Linux only; elsewhere it does nothing.
    """
    if not q.file_backed or _MADVISE is None:
        return
    start = q.raw.data_ptr()
    end = start + q.raw.numel()
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, end // page * page
    if hi > lo:
        _MADVISE(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), mmap.MADV_DONTNEED)


def _libc_madvise():
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
    return fn


_MADVISE = _libc_madvise()


# byte -> its 8 bits (lowest first) as codes 8 or 9, packed in one int64 (8 bytes, little-endian)
_BITS8 = torch.tensor([[((v >> j) & 1) | 8 for j in range(8)] for v in range(256)],
                      dtype=torch.uint8).view(torch.int64).reshape(256)


def _high_bits(qh: torch.Tensor) -> torch.Tensor:
    """uint8 ``[n, 4]`` (a little-endian uint32 of single bits) -> the 32 bits as codes 8 or 9."""
    table = _BITS8.to(qh.device)
    return table[qh.reshape(-1).long()].view(torch.uint8).reshape(-1, 32)


class Codes(NamedTuple):
    """Where a term's 4-bit codes lie in each block, so packing reads them without materialising them.

    ``"nibbles"``: ``groups`` runs of ``length`` bytes from byte ``off``, byte ``j`` of run ``g``
    holding value ``2 g length + j`` (low nibble) and ``2 g length + length + j`` (high nibble);
    ``"low"`` / ``"high"``: one value a byte (``length`` bytes), codes ``q & 15`` / ``(q >> 4) ^ 8``.
    """

    kind: str
    off: int
    groups: int
    length: int

    def materialise(self, b: torch.Tensor) -> torch.Tensor:
        """uint8 codes ``[n_blocks, values]`` of blocks ``b``."""
        qs = b[:, self.off:self.off + self.groups * self.length]
        if self.kind == "low":
            return qs & 15
        if self.kind == "high":
            return (qs >> 4) ^ 8
        qs = qs.reshape(-1, self.groups, 1, self.length)
        return torch.cat([qs & 0x0F, qs >> 4], dim=2).reshape(b.shape[0], -1)


LazyTerm = tuple["Codes | torch.Tensor", torch.Tensor, torch.Tensor]

# where each term's codes lie in a block (None: materialised, the 5-bit types' fifth bits)
LAZY_CODES: dict[str, tuple[Codes | None, ...]] = {
    "Q4_0": (Codes("nibbles", 2, 1, 16),), "Q4_1": (Codes("nibbles", 4, 1, 16),),
    "Q5_0": (Codes("nibbles", 6, 1, 16), None), "Q5_1": (Codes("nibbles", 8, 1, 16), None),
    "Q8_0": (Codes("low", 2, 1, 32), Codes("high", 2, 1, 32)),
    "Q4_K": (Codes("nibbles", 16, 4, 32),), "Q5_K": (Codes("nibbles", 48, 4, 32), None),
}


def _t_q4_0(b: torch.Tensor) -> list[LazyTerm]:
    d = _f16(b[:, 0:2])
    return [(LAZY_CODES["Q4_0"][0], d, torch.zeros_like(d))]


def _t_q4_1(b: torch.Tensor) -> list[LazyTerm]:
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    return [(LAZY_CODES["Q4_1"][0], d, 8 * d + m)]


def _t_q5_0(b: torch.Tensor) -> list[LazyTerm]:
    d = _f16(b[:, 0:2])               # (lo + 16 h - 16) d = [(lo - 8) d - 8 d] + [(h + 8 - 8) 16 d]
    return [(LAZY_CODES["Q5_0"][0], d, -8 * d), (_high_bits(b[:, 2:6]), 16 * d, torch.zeros_like(d))]


def _t_q5_1(b: torch.Tensor) -> list[LazyTerm]:
    d, m = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    return [(LAZY_CODES["Q5_1"][0], d, 8 * d + m), (_high_bits(b[:, 4:8]), 16 * d, torch.zeros_like(d))]


def _t_q8_0(b: torch.Tensor) -> list[LazyTerm]:
    d = _f16(b[:, 0:2])               # q = 16 hi + lo, lo = q & 15 in 0..15, hi = q >> 4 in -8..7
    # as bytes: hi + 8 is the unsigned high nibble with bit 3 flipped
    return [(LAZY_CODES["Q8_0"][0], d, 8 * d), (LAZY_CODES["Q8_0"][1], 16 * d, torch.zeros_like(d))]


def _t_q4_k(b: torch.Tensor) -> list[LazyTerm]:
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k4_scales(b[:, 4:16])
    s = d * sc                        # c s - dmin mn = (c - 8) s + (8 s - dmin mn), per 32 values
    return [(LAZY_CODES["Q4_K"][0], s, 8 * s - dmin * mn)]


def _t_q5_k(b: torch.Tensor) -> list[LazyTerm]:
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, mn = _k4_scales(b[:, 4:16])
    s = d * sc
    bit = torch.arange(8, dtype=torch.uint8, device=b.device).view(1, 8, 1)
    high = (((b[:, 16:48].reshape(-1, 1, 32) >> bit) & 1) | 8).reshape(-1, 256)
    return [(LAZY_CODES["Q5_K"][0], s, 8 * s - dmin * mn), (high, 16 * s, torch.zeros_like(s))]


_TERM_FNS = {"Q4_0": _t_q4_0, "Q4_1": _t_q4_1, "Q5_0": _t_q5_0, "Q5_1": _t_q5_1, "Q8_0": _t_q8_0,
             "Q4_K": _t_q4_k, "Q5_K": _t_q5_k}
