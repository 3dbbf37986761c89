"""The candidates array samplers work on: llama.cpp's ``llama_token_data_array`` as numpy arrays.

Struct of arrays: ``ids`` (int32 token ids), ``logits`` (float32), ``p`` (float32 probabilities,
valid only after a sampler computed them), ``selected`` (index into the arrays, -1 = none) and
``sorted`` (whether the entries are in descending logit order). Truncation shortens the arrays
(views, like llama.cpp shrinking ``size``); samplers modify a ``Candidates`` in place.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from halter.sampling.cmath import expf, sum_f32
from halter.sampling.llama_sort import sort_order

_ARANGE_CACHE: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    ids = _ARANGE_CACHE.get(n)
    if ids is None:
        ids = np.arange(n, dtype=np.int32)
        ids.setflags(write=False)
        if len(_ARANGE_CACHE) > 8:
            _ARANGE_CACHE.clear()
        _ARANGE_CACHE[n] = ids
    return ids


class Candidates:
    """Token candidates for one sampling step (``llama_token_data_array``).

    ``Candidates(ids=, logits=, p=, sorted=)`` copies what it is given, so samplers never touch
    the caller's arrays. ``Candidates.from_logits(row)`` builds the full-vocabulary array
    (``ids = 0..V-1``) for one logits row.
    """

    __slots__ = ("ids", "logits", "p", "selected", "sorted")

    def __init__(self, ids: Any = None, logits: Any = None, p: Any = None, sorted: bool = False,
                 selected: int = -1) -> None:
        if logits is None:
            raise TypeError("Candidates needs logits")
        lg = np.array(logits, dtype=np.float32, copy=True)
        if lg.ndim != 1:
            raise ValueError(f"Candidates: logits must be 1-D, got shape {lg.shape}")
        n = lg.shape[0]
        if ids is None:
            ids_arr = np.arange(n, dtype=np.int32)
        else:
            ids_arr = np.array(ids, dtype=np.int64, copy=True)
            if ids_arr.shape != (n,):
                raise ValueError(f"Candidates: ids shape {ids_arr.shape} does not match logits shape {lg.shape}")
            if n and (ids_arr.min() < 0 or ids_arr.max() > np.iinfo(np.int32).max):
                raise ValueError("Candidates: token ids must be non-negative int32 values")
            ids_arr = ids_arr.astype(np.int32)
        if p is None:
            p_arr = np.zeros(n, dtype=np.float32)
        else:
            p_arr = np.array(p, dtype=np.float32, copy=True)
            if p_arr.shape != (n,):
                raise ValueError(f"Candidates: p shape {p_arr.shape} does not match logits shape {lg.shape}")
        if not -1 <= selected < max(n, 0):
            raise ValueError(f"Candidates: selected {selected} is out of range for {n} candidates")
        self.ids = ids_arr
        self.logits = lg
        self.p = p_arr
        self.sorted = bool(sorted)
        self.selected = int(selected)

    @classmethod
    def from_logits(cls, logits: Any) -> "Candidates":
        """Full-vocabulary candidates for one logits row (copied, never modified)."""
        row = np.asarray(logits)
        if row.ndim != 1:
            raise ValueError(f"expected one logits row (1-D), got shape {row.shape}")
        if row.shape[0] == 0:
            raise ValueError("expected a non-empty logits row")
        c = cls.__new__(cls)
        c.logits = np.array(row, dtype=np.float32, copy=True)
        c.ids = _arange(row.shape[0])
        c.p = np.zeros(row.shape[0], dtype=np.float32)
        c.sorted = False
        c.selected = -1
        return c

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    @property
    def selected_id(self) -> int:
        """Token id of the selected entry (raises if nothing is selected)."""
        if not 0 <= self.selected < self.size:
            raise ValueError("no token is selected")
        return int(self.ids[self.selected])

    def copy(self) -> "Candidates":
        c = Candidates.__new__(Candidates)
        c.ids = self.ids.copy()
        c.logits = self.logits.copy()
        c.p = self.p.copy()
        c.sorted = self.sorted
        c.selected = self.selected
        return c

    # -- editing helpers used by the samplers ---------------------------------------------

    def take(self, order: np.ndarray) -> None:
        """Keep the entries at ``order`` (indices), in that order."""
        self.ids = self.ids[order]
        self.logits = self.logits[order]
        self.p = self.p[order]

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` entries (``cur_p->size = n``)."""
        self.ids = self.ids[:n]
        self.logits = self.logits[:n]
        self.p = self.p[:n]

    def drop_front(self, n: int) -> None:
        """Drop the first ``n`` entries (``cur_p->data += n``)."""
        self.ids = self.ids[n:]
        self.logits = self.logits[n:]
        self.p = self.p[n:]

    def sort_desc(self, k: int | None = None) -> None:
        """Sort by descending logit, keeping only the top ``k`` (all when ``None``).

        The order is the one llama.cpp's ``llama_token_data_array_partial_sort_inplace`` leaves,
        equal logits included (``halter.sampling.llama_sort``).
        """
        n = self.size
        order = sort_order(self.logits, n if k is None else min(k, n))
        self.take(order)
        self.sorted = True

    def softmax(self, do_sort: bool) -> None:
        """``llama_sampler_softmax_impl``: fill ``p`` from the current logits (optionally sorting).

        float32 throughout as llama.cpp: glibc's ``expf``, a left-to-right float sum, one division.
        """
        if self.size == 0:
            raise ValueError("softmax of an empty candidates array")
        if do_sort and not self.sorted:
            self.sort_desc()
        max_l = self.logits[0] if self.sorted else self.logits.max()
        p = expf(self.logits - max_l)
        p /= sum_f32(p)
        self.p = p

    def positions_of(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``tokens`` in ``ids`` as ``(token_index, position)`` pairs.

        Fast path as llama.cpp's logit-bias: while the array is still in vocabulary order
        (``ids[t] == t``) a token's position is its id; otherwise a search over the ids.
        """
        tokens = np.asarray(tokens, dtype=np.int64)
        n = self.size
        in_range = (tokens >= 0) & (tokens < n)
        direct = np.zeros(tokens.shape, dtype=bool)
        if in_range.any():
            cand = tokens[in_range]
            direct[in_range] = self.ids[cand] == cand
        tok_idx = np.flatnonzero(direct)
        pos = tokens[direct]
        rest = np.flatnonzero(~direct)
        if rest.size:
            rest_tokens = tokens[rest]
            hit = np.flatnonzero(np.isin(self.ids, rest_tokens))
            if hit.size:
                lookup = {int(t): i for i, t in zip(rest.tolist(), rest_tokens.tolist())}
                extra_idx = np.array([lookup[int(t)] for t in self.ids[hit]], dtype=np.int64)
                tok_idx = np.concatenate([tok_idx, extra_idx])
                pos = np.concatenate([pos, hit])
        return tok_idx, pos

    def __repr__(self) -> str:
        head = ", ".join(f"{int(i)}:{float(l):.3g}" for i, l in zip(self.ids[:5], self.logits[:5]))
        more = ", ..." if self.size > 5 else ""
        return f"Candidates(size={self.size}, sorted={self.sorted}, selected={self.selected}, [{head}{more}])"
