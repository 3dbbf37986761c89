"""A preallocated key/value cache for several independent sequences, with llama.cpp's sequence ops.

Layout: ``k`` and ``v`` are ``[n_layer, n_seq, n_head_kv, n_ctx, head_dim]``; row ``s`` holds
sequence ``s``. A sequence's tokens always occupy the dense prefix ``[0, used[s])`` of its row,
and ``pos[s, cell]`` is the position stored in each cell (-1 when empty). Attention masks are
built from ``pos``, so the cells need not be in position order, and the shapes never change
(what CUDA graphs need): every operation below writes into ``k``, ``v`` and ``pos`` in place and
none reallocates them, so graphs captured over these tensors stay valid. Removing positions
compacts the row; shifting positions re-rotates the cached keys with the model's rotary
embedding, so no token is ever recomputed.
"""
from __future__ import annotations

import mmap

import numpy as np
import torch

from halter.engine.rope import Rope


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A zero tensor; on the CPU an anonymous memory map, so its pages become resident only when
    written (pages only read are the kernel's shared zero page). Not ``calloc`` through numpy:
    numpy advises huge pages for large arrays, and one written cell would commit 2 MiB."""
    if torch.device(device).type != "cpu":
        return torch.zeros(shape, dtype=dtype, device=device)
    itemsize = torch.empty((), dtype=dtype).element_size()
    n_bytes = max(1, int(np.prod(shape)) * itemsize)
    raw = np.frombuffer(mmap.mmap(-1, n_bytes), dtype=np.uint8)     # the array keeps the map alive
    return torch.from_numpy(raw).view(dtype).view(shape)


class KVCache:
    """Keys and values of ``n_seq`` sequences of up to ``n_ctx`` tokens each."""

    def __init__(self, *, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, head_dim: int,
                 rope: Rope, dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (n_layer, n_seq, n_head_kv, n_ctx, head_dim)
        self.k, self.v = _zeros(shape, dtype, device), _zeros(shape, dtype, device)
        self.pos = torch.full((n_seq, n_ctx), -1, dtype=torch.long, device=device)
        self.pos_host = np.full((n_seq, n_ctx), -1, dtype=np.int64)   # mirror, never read back
        self.used = np.zeros(n_seq, dtype=np.int64)
        self.n_seq, self.n_ctx, self.rope = n_seq, n_ctx, rope
        self.layer_ropes: list[Rope] | None = None   # per-layer ropes, when layers differ (gemma3)

    @property
    def nbytes(self) -> int:
        """Bytes held by keys and values."""
        return 2 * self.k.numel() * self.k.element_size()

    def _check(self, seq: int) -> int:
        if not isinstance(seq, (int, np.integer)) or not 0 <= seq < self.n_seq:
            raise ValueError(f"sequence id {seq!r} out of range: this cache holds {self.n_seq} "
                             f"sequences (0..{self.n_seq - 1})")
        return int(seq)

    def n_tokens(self, seq: int) -> int:
        """How many cells sequence ``seq`` occupies."""
        return int(self.used[self._check(seq)])

    def seq_pos_max(self, seq: int) -> int:
        """Largest position cached for ``seq`` (-1 when empty); the next token goes at this + 1."""
        seq = self._check(seq)
        n = self.used[seq]
        return int(self.pos_host[seq, :n].max()) if n else -1

    def seq_positions(self, seq: int) -> np.ndarray:
        """Positions held by ``seq``, in cell order (a copy)."""
        seq = self._check(seq)
        return self.pos_host[seq, :self.used[seq]].copy()

    def reserve(self, seqs: list[int], positions: np.ndarray, *, write_device: bool = True
                ) -> np.ndarray:
        """Claim cells for ``positions [B, T]`` appended to each of ``seqs``; returns cells ``[B, T]``.

        Records the positions (host, and device unless ``write_device=False``: the static decode
        step writes them itself); the caller writes keys and values into the cells.
        Raises ``ValueError`` when a sequence has no room (the caller should shift the context).
        """
        n_new = positions.shape[1]
        cells = np.empty_like(positions)
        for b, seq in enumerate(seqs):
            seq = self._check(seq)
            start = int(self.used[seq])
            if start + n_new > self.n_ctx:
                raise ValueError(f"sequence {seq} is full: {start} + {n_new} tokens exceed "
                                 f"n_ctx = {self.n_ctx}; shift the context or raise n_ctx")
            cells[b] = np.arange(start, start + n_new)
        for b, seq in enumerate(seqs):      # second pass: only commit once every row fits
            self.used[seq] += n_new
            self.pos_host[seq, cells[b]] = positions[b]
        if not write_device:
            return cells
        rows = torch.as_tensor(np.asarray(seqs)[:, None], device=self.pos.device)
        self.pos[rows, torch.as_tensor(cells, device=self.pos.device)] = torch.as_tensor(
            positions, device=self.pos.device)
        return cells

    def clear(self, seq: int | None = None) -> None:
        """Forget every token of ``seq`` (of all sequences when ``None``)."""
        seqs = range(self.n_seq) if seq is None else [self._check(seq)]
        for s in seqs:
            self.pos_host[s] = -1
            self.pos[s] = -1
            self.used[s] = 0

    def _compact(self, seq: int, keep: np.ndarray) -> None:
        """Keep cells ``keep`` (in that order) as the row's dense prefix."""
        n = len(keep)
        if n == self.used[seq] and np.array_equal(keep, np.arange(n)):
            return
        idx = torch.as_tensor(keep, device=self.k.device)
        for cache in (self.k, self.v):
            cache[:, seq, :, :n] = cache[:, seq, :, idx]
        self.pos_host[seq, :n] = self.pos_host[seq, keep]
        self.pos_host[seq, n:] = -1
        self.pos[seq] = torch.as_tensor(self.pos_host[seq], device=self.pos.device)
        self.used[seq] = n

    def seq_rm(self, seq: int, p0: int = 0, p1: int | None = None) -> None:
        """Remove the tokens of ``seq`` at positions ``p0 <= p < p1`` (``p1=None``: to the end)."""
        seq = self._check(seq)
        pos = self.pos_host[seq, :self.used[seq]]
        hit = (pos >= p0) & (pos < (np.iinfo(np.int64).max if p1 is None else p1))
        self._compact(seq, np.flatnonzero(~hit))

    def seq_add(self, seq: int, p0: int, p1: int | None, delta: int) -> None:
        """Add ``delta`` to the positions ``p0 <= p < p1`` of ``seq``, re-rotating their keys.

        As in llama.cpp, tokens whose position would become negative are removed.
        """
        seq = self._check(seq)
        if delta == 0:
            return
        n = int(self.used[seq])
        pos = self.pos_host[seq, :n]
        hit = np.flatnonzero((pos >= p0) & (pos < (np.iinfo(np.int64).max if p1 is None else p1)))
        if hit.size == 0:
            return
        idx = torch.as_tensor(hit, device=self.k.device)
        ropes = self.layer_ropes or [self.rope] * self.k.shape[0]
        for rope in dict.fromkeys(ropes):                  # each distinct rope, over its layers
            layers = torch.as_tensor([i for i, r in enumerate(ropes) if r is rope], device=self.k.device)
            cos, sin = rope.cos_sin(torch.tensor([delta], device=self.k.device))
            keys = self.k[layers[:, None], seq, :, idx]    # [n_layers, len(hit), n_head_kv, head_dim]
            self.k[layers[:, None], seq, :, idx] = rope.apply(keys, cos, sin)
        self.pos_host[seq, hit] += delta
        self.pos[seq, :n] = torch.as_tensor(self.pos_host[seq, :n], device=self.pos.device)
        dropped = self.pos_host[seq, :n] < 0
        if dropped.any():
            self._compact(seq, np.flatnonzero(~dropped))

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> None:
        """Make ``dst`` a copy of the tokens of ``src`` at positions ``p0 <= p < p1``.

        Unlike llama.cpp's shared cells, rows are separate: ``dst``'s previous tokens are replaced.
        """
        src, dst = self._check(src), self._check(dst)
        if src == dst:
            return
        pos = self.pos_host[src, :self.used[src]]
        keep = np.flatnonzero((pos >= p0) & (pos < (np.iinfo(np.int64).max if p1 is None else p1)))
        n = len(keep)
        idx = torch.as_tensor(keep, device=self.k.device)
        for cache in (self.k, self.v):
            cache[:, dst, :, :n] = cache[:, src, :, idx]
        self.pos_host[dst] = -1
        self.pos_host[dst, :n] = pos[keep]
        self.pos[dst] = torch.as_tensor(self.pos_host[dst], device=self.pos.device)
        self.used[dst] = n
