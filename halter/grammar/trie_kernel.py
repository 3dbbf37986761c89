"""A compiled depth-first walk of the token trie from one grammar position (numba, when installed).

A position's token tables (``compiled.py``) come from walking every token from the position's opaque
parser state: the tokens that stay readable, and the trie nodes where the state has *escaped* (the
position's rule ended mid-token). ``trie_walk.walk_trie_batch`` does that level by level with numpy;
here the same walk runs as a loop over flat arrays, JIT-compiled by numba: the trie's child ranges,
each trie node's byte class, and the dense ``table[state, class]`` of memoised transitions
(``transitions.TransitionTable``). Transitions not computed yet (-1) cannot be computed inside compiled
code (they build parser states), so the kernel sets those (trie node, parser state) pairs aside; the
caller computes them with ``TransitionTable.step`` and the kernel resumes from the nodes they lead
to, until none is left. Accepted tokens are written straight into a packed bitmask.

numba is optional (``pip install numba``; a pure-Python package, no toolchain at install). Without it
``available()`` is False and the numpy walk is used; the tests compare the two.
"""
from __future__ import annotations

import numpy as np

from halter import jit

def _build(numba):
    return numba.njit(cache=True, nogil=True)(_walk)


def _compiled():
    """The JIT-compiled walk, or None without numba (or with ``HALTER_NO_NUMBA`` set); numba (and
    llvmlite) load only when a mask needs the walk, not when halter is imported."""
    return jit.build_once(_build)


def _walk(table, escaped, node_cls, child_lo, child_hi, node_row, row_first, row_count, tok_sorted,
          it_node, it_state, bits, stack_n, stack_s, esc_out, n_esc, pend_n, pend_s,
          single_pos, next_pos, opaque_ids):
    """Walk below (node, state) items; returns (escapes written, pending pairs written).

    A transition not in ``table`` from a state that is one position with an unknown caller
    (``single_pos``) leads to the next position's opaque node: filled in here when that node
    exists (``opaque_ids``), set aside otherwise (and where ``next_pos`` says -2: another item of
    the state reads that class, see ``TransitionTable.register``).
    """
    n_pend = 0
    sp = 0                   # a queue, not a stack: trie nodes are numbered level by level, so a
    for i in range(len(it_node)):  # breadth-first walk reads the trie's arrays nearly in order
        stack_n[sp] = it_node[i]
        stack_s[sp] = it_state[i]
        sp += 1
    head = 0
    while head < sp:
        k = stack_n[head]
        s = stack_s[head]
        head += 1
        r = node_row[k]
        if r >= 0:
            f = row_first[r]
            for j in range(f, f + row_count[r]):
                t = tok_sorted[j]
                bits[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        lo = child_lo[k]
        hi = child_hi[k]
        if hi > lo:
            if escaped[s]:
                esc_out[n_esc] = k
                n_esc += 1
            for c in range(lo, hi):
                cls = node_cls[c]
                nxt = table[s, cls]
                if nxt < 0 and single_pos[s] >= 0:
                    t = next_pos[single_pos[s], cls]
                    if t == -1:
                        nxt = 0
                    elif t >= 0 and opaque_ids[t] >= 0:
                        nxt = opaque_ids[t]
                    if nxt >= 0:
                        table[s, cls] = nxt
                if nxt > 0:
                    stack_n[sp] = c
                    stack_s[sp] = nxt
                    sp += 1
                elif nxt < 0:
                    pend_n[n_pend] = c
                    pend_s[n_pend] = s
                    n_pend += 1
    return n_esc, n_pend


def warm() -> None:
    """Load (or JIT-compile, the first time on a machine) the compiled walk now: ~0.5 s once per
    process, paid with the vocabulary's trie rather than inside the first mask."""
    kernel = _compiled()
    if kernel is None:
        return
    z64, z32 = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32)
    kernel(np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=bool), z32, z32, z32, z32 - 1, z32, z32, z32,
            z64[:0], z32[:0], np.zeros(1, dtype=np.uint32), z64.copy(), z32.copy(), z64.copy(), 0, z64.copy(),
            z32.copy(), z64 - 1, np.zeros((1, 1), dtype=np.int32), z32 - 1)


def available() -> bool:
    """Is the compiled walk usable here (numba installed and not disabled by ``HALTER_NO_NUMBA``)?"""
    return _compiled() is not None


def flat_arrays(trie) -> tuple:
    """The trie arrays the walk reads, as int32 (half the memory traffic of the int64 originals):
    child ranges, row per node, and the row -> tokens index. Made once per trie."""
    got = getattr(trie, "_kernel_arrays", None)
    if got is None:
        trie.tokens_of_rows(np.zeros(0, dtype=np.int64))            # builds the row -> tokens index
        got = tuple(np.ascontiguousarray(x, dtype=np.int32) for x in
                    (trie.child_lo, trie.child_hi, trie.node_row, trie._row_first, trie._row_count, trie._tok_sorted))
        trie._kernel_arrays = got
    return got


class TrieKernel:
    """The flat arrays of one (trie, transition table) pair that the compiled walk reads."""

    def __init__(self, trie, table) -> None:
        self.trie, self.tt = trie, table
        self.flat = flat_arrays(trie)
        self.node_cls = np.asarray(table.class_of, dtype=np.int64)[trie.byte].astype(np.int32)
        n = trie.n_nodes
        self.stack_n = np.empty(n + 1, dtype=np.int64)
        self.stack_s = np.empty(n + 1, dtype=np.int32)
        self.esc = np.empty(n + 1, dtype=np.int64)
        self.pend_n = np.empty(n + 1, dtype=np.int64)
        self.pend_s = np.empty(n + 1, dtype=np.int32)
        self.first_level = np.arange(trie.level_start[0], trie.level_start[1] if n else 0, dtype=np.int64)
        self.n_words = (trie.n_vocab + 31) // 32

    def walk_position(self, start) -> tuple[np.ndarray, np.ndarray]:
        """(packed accepted tokens, sorted escape points) of a walk of the whole trie from ``start``
        (an opaque node), as ``trie_walk.walk_trie_batch`` gives them for a batch of one."""
        return self._walk_from(start, self.first_level)

    def walk_below(self, start, nodes: np.ndarray, first_bytes=None) -> tuple[np.ndarray, np.ndarray] | None:
        """(packed tokens strictly below trie ``nodes`` readable from ``start``, escape points), as
        ``trie_walk.walk_subtrees(..., want_escapes=True)`` gives them; None when some of ``nodes`` lie
        below others (the walk's buffers hold each trie node once: the caller walks with numpy)."""
        trie = self.trie
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) > 1:
            lo = trie.row_lo[nodes]
            order = np.argsort(lo, kind="stable")
            if (lo[order][1:] < trie.row_hi[nodes][order][:-1]).any():
                return None
        kids = trie.children_with_bytes(nodes, first_bytes) if first_bytes is not None else trie.children_of(nodes)
        return self._walk_from(start, kids)

    def _walk_from(self, start, items_n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tt = self.tt
        tt.register(start)
        bits = np.zeros(self.n_words, dtype=np.uint32)
        items_s = np.full(len(items_n), start.id, dtype=np.int32)
        n_esc = 0
        # the first level's transitions, looked up (and made) together: most starts read few bytes
        st = tt.step(items_s, self.node_cls[items_n].astype(np.int64))
        live = st != 0
        items_n, items_s = items_n[live], st[live].astype(np.int32)
        next_pos = tt.next_positions()
        while len(items_n):
            n_esc, n_pend = _compiled()(tt.table, tt.escaped, self.node_cls, *self.flat, items_n, items_s, bits,
                                    self.stack_n, self.stack_s, self.esc, n_esc, self.pend_n, self.pend_s,
                                    tt.single_pos, next_pos, tt.opaque_ids)
            if not n_pend:
                break
            pn, ps = self.pend_n[:n_pend].copy(), self.pend_s[:n_pend].copy()
            cls = self.node_cls[pn].astype(np.int64)
            pos = tt.single_pos[ps]
            single = pos >= 0
            if single.any():          # new opaque nodes, and those of the positions a few bytes on
                self._make_opaque(next_pos[pos[single], cls[single]])
            st = tt.step(ps, cls)
            live = st != 0
            items_n, items_s = pn[live], st[live].astype(np.int32)
        esc = np.sort(self.esc[:n_esc])
        return bits, esc

    LOOKAHEAD = 32
    """Bytes ahead of a newly met position whose opaque nodes are made with it (one kernel round
    each instead of one per byte along a counted string)."""

    def _make_opaque(self, targets: np.ndarray) -> None:
        tt, space = self.tt, self.tt.space
        next_pos = tt.next_positions()
        frontier = targets[targets >= 0]
        for _ in range(self.LOOKAHEAD):
            frontier = frontier[tt.opaque_ids[frontier] < 0]
            if not len(frontier):
                break
            frontier = np.unique(frontier)
            for t in frontier.tolist():
                node = space.opaque_node(t)
                tt.register(node)
                tt.opaque_ids[t] = node.id
            frontier = next_pos[frontier].ravel()
            frontier = frontier[frontier >= 0]
