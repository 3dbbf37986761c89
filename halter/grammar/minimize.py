"""Moore minimisation of one rule's DFA (its byte rows, call edges and token edges), used when
positions are not merged across rules (``build_automata(merge=False)``)."""
from __future__ import annotations

import numpy as np

from halter.grammar.array_sets import count_distinct

SMALL_DFA = 16
"""DFAs with at most this many states are refined in plain Python; larger ones with numpy."""


def minimize_rule(acc, byte_next, calls, tokens):
    """Moore partition refinement; returns the four tables merged.

    A state's signature is its block, its byte row mapped to blocks and its call/token edges mapped
    to blocks; a round splits blocks by signature, until a round splits none.
    """
    n = len(acc)
    block = _refine_small(acc, byte_next, calls, tokens) if n <= SMALL_DFA else \
        _refine_numpy(acc, byte_next, calls, tokens)
    # renumber so the start state stays 0
    remap: dict[int, int] = {}
    for q in range(n):
        remap.setdefault(block[q], len(remap))
    m = len(remap)
    final = [remap[block[q]] for q in range(n)] + [-1]
    get = final.__getitem__
    out_acc, out_bytes = [False] * m, [None] * m
    out_calls, out_toks = [None] * m, [None] * m
    for q in range(n):
        b = final[q]
        if out_bytes[b] is None:
            out_acc[b] = acc[q]
            out_bytes[b] = list(map(get, byte_next[q]))
            out_calls[b] = sorted({(r, final[t]) for r, t in calls[q]})
            out_toks[b] = sorted({(k, final[t]) for k, t in tokens[q]})
    return out_acc, out_bytes, out_calls, out_toks


def _refine_small(acc, byte_next, calls, tokens) -> list[int]:
    """The coarsest stable partition, one dict of signatures per round (most rules are a few states)."""
    n = len(acc)
    block = [1 if a else 0 for a in acc]
    n_blocks = len(set(block))
    while True:
        get = (block + [-1]).__getitem__          # the last entry answers a missing edge's -1
        sigs: dict[tuple, int] = {}
        new = []
        for q in range(n):
            cl, tk = calls[q], tokens[q]
            key = (block[q], tuple(map(get, byte_next[q])),
                   tuple([(r, block[t]) for r, t in cl]) if cl else (),
                   tuple([(k, block[t]) for k, t in tk]) if tk else ())
            new.append(sigs.setdefault(key, len(sigs)))
        if len(sigs) == n_blocks:
            return block
        block, n_blocks = new, len(sigs)


def _refine_numpy(acc, byte_next, calls, tokens) -> list[int]:
    """The coarsest stable partition, each round vectorised over states and byte classes."""
    n = len(acc)
    table = np.asarray(byte_next, dtype=np.int64).reshape(n, -1)
    block = np.asarray(acc, dtype=np.int64)
    n_blocks = count_distinct(block)
    with_extra = [q for q in range(n) if calls[q] or tokens[q]]     # states with call/token edges
    extra_col = np.zeros(n, dtype=np.int64)
    while True:
        mapped = np.where(table >= 0, block[np.maximum(table, 0)], -1)
        cols = [block[:, None], mapped]
        if with_extra:
            blk = block.tolist()
            extra: dict[tuple, int] = {}
            for q in with_extra:
                extra_col[q] = extra.setdefault((tuple((r, blk[t]) for r, t in calls[q]),
                                                 tuple((k, blk[t]) for k, t in tokens[q])), len(extra) + 1)
            cols.append(extra_col[:, None])
        rows = np.ascontiguousarray(np.hstack(cols), dtype=np.int32)
        keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
        _, new = np.unique(keys, return_inverse=True)
        new = new.reshape(-1).astype(np.int64)
        count = int(new.max()) + 1 if n else 0
        if count == n_blocks:
            return block.tolist()
        block, n_blocks = new, count
