"""The CPU int4 packing of quantized rows (``int4_pack``'s layout), in chunks: of one tensor
(``pack_cpu``), or of a model's layers together at load, in chunks of whole 64-row blocks that
run across layers, split between threads (``Batch``).

Packed one layer at a time, each layer part costs some sixty small torch operations whatever
its size; on two threads the threads then mostly wait for the interpreter lock to issue their
next operation (SmolLM2-135M's 121 layer builds took 0.19 s on two threads and 0.20 s on one).
Here every int4 row group of one type and width, across all layers, is packed as row slices of
one shared output: its rows are taken in chunks of about ``PACK_ROWS`` rows, gathered from as
many parts as a chunk spans (a few hundred operations for a whole model, each over a chunk that
stays in the cache). The CPU kernel's layout treats each block of 64 rows on its own, so a
group's rows of the shared output, and its bf16 scales and offsets (written per group, in the
``[K/32, N, 2]`` form), are exactly what ``pack_cpu`` makes of the group alone (a test checks
it). Groups packed together are whole 64-row blocks; only a batch's last rows may end in a
shorter block.

The scales computed are checked, so that loading reads the blocks once: a NaN or infinite
float16 scale field makes a scale or an offset non-finite, and is refused by name
(``ModelLoadError`` naming the file and the tensor).
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import torch

from halter.engine.int4_pack import PACK_ROWS, pack_codes, pack_int4
from halter.engine.quant_tensor import INT4_GROUP, LAZY_CODES, Codes, QuantTensor, header_terms, release_pages
from halter.errors import ModelLoadError

__all__ = ["Batch", "batchable", "pack_cpu"]


def pack_cpu(parts: Sequence[QuantTensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Row ``parts`` of one type and width as the CPU kernel's terms: packed ``uint8 [N, K/2]``
    and bf16 scales and offsets ``[K/32, N, 2]`` per term (row counts: multiples of 16, and of 64
    for every part but the last). File pages are dropped once read."""
    batch = Batch([parts])
    batch.run()
    return batch.result(0)


def batchable(group: Sequence[QuantTensor]) -> bool:
    """Whether ``group`` (parts of one type) can be packed in a ``Batch``: an int4 type, every
    part whole 64-row blocks."""
    return group[0].type_name in LAZY_CODES and all(p.shape[0] % 64 == 0 for p in group) \
        and group[0].shape[1] % INT4_GROUP == 0


class _Piece(NamedTuple):
    group: int          # which group
    part: QuantTensor
    start: int          # rows start:end of the part
    end: int
    row: int            # first row in the shared output
    group_row: int      # first row in the group


class Batch:
    """Row groups of one type and width packed into one shared output, chunk by chunk.

    ``jobs()`` are the chunks to run (in any order, on any threads; each writes rows of its
    own); ``result(g)`` is then group ``g``'s packed terms (row views of the shared output) and
    its scales and offsets, as ``pack_cpu`` returns them.
    """

    def __init__(self, groups: Sequence[Sequence[QuantTensor]], chunk_rows: int = PACK_ROWS) -> None:
        first = groups[0][0]
        self.type_name, K = first.type_name, first.shape[1]
        if any(p.type_name != self.type_name or p.shape[1] != K for g in groups for p in g):
            raise ValueError("a batch holds parts of one type and width")
        # whole 64-row blocks, but for the batch's last rows (which end its last chunk): a multiple
        # of 16 there, a shorter last block of the kernel's layout
        self._parts = [p for g in groups for p in g]
        if self.type_name not in LAZY_CODES or K % INT4_GROUP or \
                any(p.shape[0] % 64 for p in self._parts[:-1]) or self._parts[-1].shape[0] % 16:
            raise ValueError("a batch holds int4 parts of whole 64-row blocks (a multiple of 16 rows at its end)")
        n_terms = len(LAZY_CODES[self.type_name])
        sizes = [sum(p.shape[0] for p in g) for g in groups]
        self._offsets = [sum(sizes[:g]) for g in range(len(groups))]
        self.packed = [torch.empty((sum(sizes), K // 2), dtype=torch.uint8) for _ in range(n_terms)]
        self.sz = [[torch.empty((K // INT4_GROUP, n, 2), dtype=torch.bfloat16) for _ in range(n_terms)]
                   for n in sizes]
        self.chunks: list[list[_Piece]] = [[]]
        filled, row = 0, 0
        for gi, g in enumerate(groups):
            group_row = 0
            for p in g:
                start = 0
                while start < p.shape[0]:
                    if filled == chunk_rows:
                        self.chunks.append([])
                        filled = 0
                    end = min(p.shape[0], start + chunk_rows - filled)
                    self.chunks[-1].append(_Piece(gi, p, start, end, row, group_row))
                    n = end - start
                    filled, row, group_row, start = filled + n, row + n, group_row + n, end
        self._block_bytes = first.block_bytes
        self._row_bytes = first.raw.shape[1]
        self._codes = [c for c in LAZY_CODES[self.type_name] if c is not None]

    def jobs(self) -> list[tuple[Callable[[], None], int]]:
        """``(pack chunk, bytes it reads)`` for every chunk."""
        return [(lambda i=i: self._pack_chunk(i), sum(pc.end - pc.start for pc in c) * self._row_bytes)
                for i, c in enumerate(self.chunks)]

    def run(self) -> None:
        """Every chunk, here, in order (then every part is marked as checked)."""
        for job, _ in self.jobs():
            job()
        self.done()

    def done(self) -> None:
        """Mark every part's scales as checked (call once every job has run)."""
        for p in self._parts:
            p.scales_checked = True

    def result(self, g: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Group ``g``'s packed ``uint8 [N, K/2]`` terms and bf16 ``[K/32, N, 2]`` scales and offsets."""
        r0 = self._offsets[g]
        n = self.sz[g][0].shape[1]
        return [p[r0:r0 + n] for p in self.packed], self.sz[g]

    def _pack_chunk(self, i: int) -> None:
        pieces = self.chunks[i]
        r0 = pieces[0].row
        n = sum(pc.end - pc.start for pc in pieces)
        # the pieces' header bytes (every field a term reads) and code bytes, gathered apart: the
        # codes then need no second gather out of whole blocks
        c0 = self._codes[0]
        n_blk, head, run = self._row_bytes // self._block_bytes, c0.off, c0.groups * c0.length
        hdr = torch.empty((n, n_blk, head), dtype=torch.uint8)
        codes = torch.empty((n, n_blk, run), dtype=torch.uint8)
        at = 0
        for pc in pieces:
            k = pc.end - pc.start
            rows = pc.part.raw[pc.start:pc.end]
            _gather(hdr[at:at + k], rows, n_blk, 0, head)
            _gather(codes[at:at + k], rows, n_blk, head, run)
            at += k
        terms = header_terms(self.type_name, hdr.view(n * n_blk, head), n)
        scale, zero = terms[0][1], terms[0][2]      # a NaN/inf scale field makes these non-finite
        if not bool(torch.isfinite(scale.sum() + zero.sum())):
            self._refuse(pieces, scale, zero)
        lazy = [(c._replace(off=0), p[r0:r0 + n]) for (c, _, _), p in zip(terms, self.packed)
                if isinstance(c, Codes)]
        if lazy:
            pack_codes(codes.view(n, -1), run, [c for c, _ in lazy], [o for _, o in lazy])
        for t, ((c, s, z), p) in enumerate(zip(terms, self.packed)):
            if not isinstance(c, Codes):
                p[r0:r0 + n] = pack_int4(c)
            at = 0
            for pc in pieces:
                k = pc.end - pc.start
                dst = self.sz[pc.group][t][:, pc.group_row:pc.group_row + k]
                dst[:, :, 0] = s[at:at + k].t()
                dst[:, :, 1] = z[at:at + k].t()
                at += k
        for pc in pieces:
            release_pages(pc.part.row_slice(pc.start, pc.end))     # file pages read: not needed again

    @staticmethod
    def _refuse(pieces: list[_Piece], scale: torch.Tensor, zero: torch.Tensor) -> None:
        at = 0
        for pc in pieces:
            n = pc.end - pc.start
            if not bool(torch.isfinite(scale[at:at + n]).all() and torch.isfinite(zero[at:at + n]).all()):
                raise ModelLoadError("tensor contains NaN or infinite scales", path=pc.part.source_path,
                                     field=pc.part.source_name)
            at += n
        # finite values whose sum overflowed (beyond any real file): checked piece by piece


def _gather(dst: torch.Tensor, rows: torch.Tensor, n_blk: int, start: int, size: int) -> None:
    """``dst[r, j] = bytes start:start+size of block j of rows[r]``, copied in the widest words
    (8, 4 or 2 bytes) that the block size, the field's place and the rows' address allow: a
    copy of 4-byte runs is several times faster in 32-bit words than byte by byte."""
    block = rows.shape[1] // n_blk
    for w, dtype in ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8)):
        if block % w == 0 and start % w == 0 and size % w == 0 and rows.data_ptr() % w == 0:
            src = rows.view(dtype).view(rows.shape[0], n_blk, block // w)[:, :, start // w:(start + size) // w]
            dst.view(dtype).copy_(src)
            return
