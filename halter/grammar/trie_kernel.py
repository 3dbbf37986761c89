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
from halter.grammar import slice_depth, slices
from halter.grammar.array_sets import sorted_unique


def _set_subtree(bits, row_lo, row_hi, row_first, row_count, tok_sorted, k):
    """Set every token below trie node ``k`` in ``bits`` (its rows ``row_lo[k]:row_hi[k]``)."""
    for r in range(row_lo[k], row_hi[k]):
        f = row_first[r]
        for j in range(f, f + row_count[r]):
            t = tok_sorted[j]
            bits[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


_set_subtree_impl = _set_subtree      # what ``_walk`` calls: the compiled ``_set_subtree`` once built


def _build(numba):
    global _set_subtree_impl
    _set_subtree_impl = numba.njit(cache=True, nogil=True, inline="always")(_set_subtree)
    return numba.njit(cache=True, nogil=True)(_walk)


def _compiled():
    """The JIT-compiled walk, or None without numba (or with ``HALTER_NO_NUMBA`` set); numba (and
    llvmlite) load only when a mask needs the walk, not when halter is imported."""
    return jit.build_once(_build)


def _walk(table, escaped, byte_cls, node_byte, child_lo, child_hi, node_row, row_first, row_count, tok_sorted,
          it_node, it_state, it_depth, bits, stack_n, stack_s, stack_d, esc_out, n_esc, pend_n, pend_s, pend_d,
          single_pos, next_pos, opaque_ids, skip, fill, row_lo, row_hi):
    """Walk below (node, state, depth) items; returns (escapes written, pending items written), or
    pending -1 where the buffers were too small (items below nested nodes: the caller grows them).

    A transition not in ``table`` from a state that is one position with an unknown caller
    (``single_pos``) leads to the next position's opaque node: filled in here when that node
    exists (``opaque_ids``), set aside otherwise (and where ``next_pos`` says -2: another item of
    the state reads that class, see ``TransitionTable.register``). A node whose ``skip`` is at most
    its item's depth is not walked: every token below it is accepted (``slices.py``); with ``fill``
    those tokens are set here (else the caller has set them).
    """
    n_pend = 0
    cap = len(stack_n)
    if len(it_node) > cap:
        return n_esc, -1
    sp = 0                   # a queue, not a stack: trie nodes are numbered level by level, so a
    for i in range(len(it_node)):  # breadth-first walk reads the trie's arrays nearly in order
        stack_n[sp] = it_node[i]
        stack_s[sp] = it_state[i]
        stack_d[sp] = it_depth[i]
        sp += 1
    head = 0
    while head < sp:
        k = stack_n[head]
        s = stack_s[head]
        dep = stack_d[head]
        head += 1
        if dep > 0 and skip[k] <= dep:
            if fill:
                _set_subtree_impl(bits, row_lo, row_hi, row_first, row_count, tok_sorted, k)
            continue
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
                if n_esc >= cap:
                    return n_esc, -1
                esc_out[n_esc] = k
                n_esc += 1
            for c in range(lo, hi):
                if dep > 0 and skip[c] <= dep:
                    if fill:
                        _set_subtree_impl(bits, row_lo, row_hi, row_first, row_count, tok_sorted, c)
                    continue
                cls = byte_cls[node_byte[c]]
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
                    if sp >= cap:
                        return n_esc, -1
                    stack_n[sp] = c
                    stack_s[sp] = nxt
                    stack_d[sp] = dep
                    sp += 1
                elif nxt < 0:
                    if n_pend >= cap:
                        return n_esc, -1
                    pend_n[n_pend] = c
                    pend_s[n_pend] = s
                    pend_d[n_pend] = dep
                    n_pend += 1
    return n_esc, n_pend


def warm() -> None:
    """Load (or JIT-compile, the first time on a machine) the compiled walk now: ~0.5 s once per
    process, paid with the vocabulary's trie rather than inside the first mask."""
    kernel = _compiled()
    if kernel is None:
        return
    z64, z32 = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int32)
    kernel(np.zeros((1, 1), dtype=np.int32), np.zeros(1, dtype=bool), z32, np.zeros(1, dtype=np.uint8), z32, z32,
           z32 - 1, z32, z32, z32,
           z64[:0], z32[:0], z32[:0], np.zeros(1, dtype=np.uint32), z64.copy(), z32.copy(), z32.copy(), z64.copy(), 0,
           z64.copy(), z32.copy(), z32.copy(), z64 - 1, np.zeros((1, 1), dtype=np.int32), z32 - 1, z32, False,
           z32, z32)


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
                    (trie.child_lo, trie.child_hi, trie.node_row, trie._row_first, trie._row_count, trie._tok_sorted,
                     trie.row_lo, trie.row_hi))
        trie._kernel_arrays = got
        slices.trie_slices(trie)             # per vocabulary too: the slices' token sets (~0.03 s)
    return got


class TrieKernel:
    """The flat arrays of one (trie, transition table) pair that the compiled walk reads."""

    use_slices = True
    """Whole-trie walks skip the tokens a slice accepts (``slices.py``); False: walk every node."""

    def __init__(self, trie, table) -> None:
        self.trie, self.tt = trie, table
        self.flat = flat_arrays(trie)
        self.byte_cls = np.asarray(table.class_of, dtype=np.int32)          # byte -> this grammar's class
        self._grow(trie.n_nodes + 1)
        self.first_level = np.arange(trie.level_start[0], trie.level_start[1] if trie.n_nodes else 0, dtype=np.int64)
        self.first_classes = self._classes(self.first_level)      # (every whole-trie walk steps them)
        self.first_depths = np.zeros(len(self.first_level), dtype=np.int32)
        self.n_words = (trie.n_vocab + 31) // 32
        self.slices = slices.trie_slices(trie)
        self.depths = slice_depth.SliceDepth(table.space, self.slices)
        self.row_range = self.flat[-2:]

    def _classes(self, nodes: np.ndarray) -> np.ndarray:
        """The byte classes of trie ``nodes`` (their last bytes), as int64."""
        return self.byte_cls[self.trie.byte[nodes]].astype(np.int64)

    def _grow(self, n: int) -> None:
        self.stack_n = np.empty(n, dtype=np.int64)
        self.stack_s = np.empty(n, dtype=np.int32)
        self.stack_d = np.empty(n, dtype=np.int32)
        self.esc = np.empty(n, dtype=np.int64)
        self.pend_n = np.empty(n, dtype=np.int64)
        self.pend_s = np.empty(n, dtype=np.int32)
        self.pend_d = np.empty(n, dtype=np.int32)

    def walk_position(self, start) -> tuple[np.ndarray, np.ndarray]:
        """(packed accepted tokens, sorted escape points) of a walk of the whole trie from ``start``
        (an opaque node), as ``trie_walk.walk_trie_batch`` gives them for a batch of one, except
        escape points below which every token is accepted (a slice's: ``slices.py``)."""
        k, depth = self.depths.best(start) if self.use_slices else (0, 0)
        if not depth:
            return self._walk_from(start, self.first_level, self.first_depths)
        # the slice's tokens at once; the walk skips the nodes above only them, or, where every
        # longer string of the slice dies (a count), above only the slice's tokens
        sl = self.slices
        ends = None
        if slices.SLICES[k].uniform and depth < min(sl.max_len[k], slice_depth.MAX_DEPTH):
            ends = self.depths.exact(start, k, depth)
        skip = sl.node_max[k]
        within = depth if ends is None else slices.NOT - 1
        items = self.first_level[skip[self.first_level] > within]
        bits, esc = self._walk_from(start, items, np.full(len(items), within, dtype=np.int32), skip,
                                    sl.covered_bits(k, depth), False)
        if ends:
            esc = sorted_unique(np.concatenate((esc, sl.escape_nodes(k, ends, depth))))
        return bits, esc

    def walk_below(self, start, nodes: np.ndarray, first_bytes=None) -> tuple[np.ndarray, np.ndarray]:
        """(packed tokens strictly below trie ``nodes`` readable from ``start``, escape points), as
        ``trie_walk.walk_subtrees(..., want_escapes=True)`` gives them (a node below another is
        walked from each: from two offsets), except escape points below which every token is in.

        Below a node whose bytes are ``j`` characters of a slice, every token of the slice at most
        ``j`` + the slice's depth from ``start`` long is readable: such subtrees are taken whole.
        """
        trie = self.trie
        nodes = np.asarray(nodes, dtype=np.int64)
        kids = trie.children_with_bytes(nodes, first_bytes) if first_bytes is not None else trie.children_of(nodes)
        k, depth = self.depths.best(start, uniform=True) if self.use_slices and len(kids) else (0, 0)
        if depth:
            before = self.slices.prefix_len[k][trie.parent[kids]]
            deps = np.where(before < slices.NOT, before + depth, 0).astype(np.int32)
            return self._walk_from(start, kids, deps, self.slices.node_max[k], None, True)
        return self._walk_from(start, kids, np.zeros(len(kids), dtype=np.int32))

    def _walk_from(self, start, items_n, items_d, skip=None, bits=None, fill: bool = False):
        while True:
            got = self._try_walk(start, items_n, items_d, skip, bits, fill)
            if got is not None:
                return got
            self._grow(2 * len(self.stack_n))          # nested starts overflowed the buffers

    def _try_walk(self, start, items_n: np.ndarray, items_d: np.ndarray, skip, bits, fill: bool):
        tt = self.tt
        tt.register(start)
        bits = np.zeros(self.n_words, dtype=np.uint32) if bits is None else bits.copy()
        if skip is None:
            skip = self.slices.node_max[0]              # (read only where an item's depth is > 0)
        items_s = np.full(len(items_n), start.id, dtype=np.int32)
        whole = (items_d > 0) & (skip[items_n] <= items_d)    # taken whole: no transition needed
        n_esc = 0
        # the first level's transitions, looked up (and made) together: most starts read few bytes
        if whole.any():
            st = items_s.copy()
            rest = ~whole
            st[rest] = tt.step(items_s[rest], self._classes(items_n[rest]))
        else:
            st = tt.step(items_s, self.first_classes if items_n is self.first_level else self._classes(items_n))
        live = st != 0
        items_n, items_s, items_d = items_n[live], st[live].astype(np.int32), items_d[live]
        next_pos = tt.next_positions()
        row_lo, row_hi = self.row_range
        while len(items_n):
            n_esc, n_pend = _compiled()(tt.table, tt.escaped, self.byte_cls, self.trie.byte, *self.flat[:6], items_n, items_s, items_d,
                                        bits, self.stack_n, self.stack_s, self.stack_d, self.esc, n_esc,
                                        self.pend_n, self.pend_s, self.pend_d, tt.single_pos, next_pos,
                                        tt.opaque_ids, skip, fill, row_lo, row_hi)
            if n_pend < 0:
                return None
            if not n_pend:
                break
            pn, ps, pd = self.pend_n[:n_pend].copy(), self.pend_s[:n_pend].copy(), self.pend_d[:n_pend].copy()
            # states made outside the walks (stepping bytes, Python walks) have not had their
            # dead classes filled in: every class they cannot read would come back here one by one
            nodes = tt.space.nodes
            for s in set(ps.tolist()):
                tt.register(nodes[s])
            cls = self._classes(pn)
            pos = tt.single_pos[ps]
            single = pos >= 0
            if single.any():          # new opaque nodes, and those of the positions a few bytes on
                self._make_opaque(next_pos[pos[single], cls[single]])
            st = tt.step(ps, cls)
            live = st != 0
            items_n, items_s, items_d = pn[live], st[live].astype(np.int32), pd[live]
        esc = np.sort(self.esc[:n_esc])
        return bits, esc

    LOOKAHEAD = 8
    """Bytes ahead of a newly met position whose opaque nodes are made with it (one kernel round
    each instead of one per byte along a counted string). Not more: entering an object walks every
    key's position at once, and slices keep most walks out of counted strings."""

    def _make_opaque(self, targets: np.ndarray) -> None:
        tt, space = self.tt, self.tt.space
        next_pos, opaque_ids = tt.next_positions(), tt.opaque_ids
        frontier = targets[targets >= 0].tolist()       # a few dozen positions: sets, not np.unique
        for _ in range(self.LOOKAHEAD):
            new = sorted({t for t in frontier if opaque_ids[t] < 0})
            if not new:
                break
            for t in new:
                node = space.opaque_node(t)
                tt.register(node)
                opaque_ids[t] = node.id
            rows = next_pos[new]
            frontier = rows[rows >= 0].tolist()
