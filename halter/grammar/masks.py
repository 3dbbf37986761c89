"""Token masks from parser states: vectorised walks of the token trie, per-position tables, escapes.

The mask of a parser state is the set of tokens whose bytes the grammar can read from it. Computing
it from scratch would walk the whole trie, so it is split the way XGrammar splits it:

* per grammar *position* ``d`` (computed once, at compile time): walk the trie from ``d`` with an
  unknown caller (the ``OPAQUE`` context). Tokens that survive are **accepted** whatever the stack;
  a token that makes ``d``'s rule end after ``k`` of its bytes **escapes** at ``k``: whether it fits
  depends on the caller, so the pair (token, k) is recorded.
* at run time, a state's mask is the OR of its items' accepted sets, plus, for each item, its
  escaping tokens checked from the caller's continuation (one vectorised walk over just those
  suffixes), plus — when the rule can end right away — the caller's own mask. All memoised.

Walks are level-synchronous numpy gathers through a dense transition table
``table[state, byte class]`` that is filled lazily from ``StateSpace``.
"""
from __future__ import annotations

import numpy as np

from halter.grammar.parser_state import Node, StateSpace
from halter.grammar.trie import TokenTrie


class TransitionTable:
    """Dense ``(state id, byte class) -> state id`` table over interned nodes; -1 = not computed yet."""

    def __init__(self, space: StateSpace) -> None:
        self.space = space
        self.n_classes = space.a.n_classes
        self.table = np.full((1024, self.n_classes), -1, dtype=np.int32)
        self.table[0] = 0
        self.escaped = np.zeros(1024, dtype=bool)
        self.class_of = np.asarray(space.class_of, dtype=np.int64)

    def _grow(self, n: int) -> None:
        cap = len(self.table)
        if n < cap:
            return
        while cap <= n:
            cap *= 2
        t = np.full((cap, self.n_classes), -1, dtype=np.int32)
        t[:len(self.table)] = self.table
        e = np.zeros(cap, dtype=bool)
        e[:len(self.escaped)] = self.escaped
        self.table, self.escaped = t, e

    def register(self, node: Node) -> None:
        self._grow(node.id)
        self.escaped[node.id] = node.escaped

    def step(self, states: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Next state for each (state, class) pair, computing unknown transitions on the way."""
        nxt = self.table[states, classes]
        unknown = nxt < 0
        if unknown.any():
            pairs = np.unique(states[unknown].astype(np.int64) * self.n_classes + classes[unknown])
            nodes = self.space.nodes
            for p in pairs.tolist():
                s, c = divmod(p, self.n_classes)
                node = self.space.step_class(nodes[s], c)
                self.register(node)
                self.table[s, c] = node.id
            nxt = self.table[states, classes]
        return nxt


def walk_trie(tt: TransitionTable, trie: TokenTrie, start: Node):
    """Walk every token from ``start``. Returns (row_ok, escape_nodes).

    ``row_ok[r]``: the whole token row ``r`` can be read. ``escape_nodes``: trie nodes (with children)
    where ``start``'s rule, called with the OPAQUE context, has just ended: the longer tokens under
    such a node fit only if the caller's continuation reads the rest (see ``walk_subtrees``).
    """
    row_ok, node_state = _walk(tt, trie, start, np.arange(trie.level_start[0], trie.level_start[1] if
                                                         trie.n_nodes else 0, dtype=np.int64))
    visited = np.flatnonzero(node_state > 0)
    esc = visited[tt.escaped[node_state[visited]]]
    esc = esc[trie.child_hi[esc] > trie.child_lo[esc]]
    return row_ok, esc


def walk_subtrees(tt: TransitionTable, trie: TokenTrie, start: Node, nodes: np.ndarray) -> np.ndarray:
    """Rows strictly below trie ``nodes`` whose remaining bytes (below the node) can be read from ``start``."""
    if start.id == 0 or not len(nodes):
        return np.zeros(trie.n_rows, dtype=bool)
    row_ok, _ = _walk(tt, trie, start, trie.children_of(np.sort(nodes)), rows_under=nodes)
    return row_ok


def _walk(tt: TransitionTable, trie: TokenTrie, start: Node, frontier: np.ndarray, rows_under=None):
    tt.register(start)
    node_state = np.zeros(trie.n_nodes, dtype=np.int32)
    prev_states = np.full(len(frontier), start.id, dtype=np.int32)
    level = frontier
    while len(level):
        st = tt.step(prev_states, tt.class_of[trie.byte[level]])
        node_state[level] = st
        live = st != 0
        level = level[live]
        children = trie.children_of(level)
        if not len(children):
            break
        prev_states = node_state[trie.parent[children]]
        level = children
    ends = trie.row_end_node
    row_ok = np.zeros(trie.n_rows, dtype=bool)
    if rows_under is None:
        has_end = ends >= 0
        row_ok[has_end] = node_state[ends[has_end]] != 0
    else:
        lo, hi = trie.row_lo[rows_under], trie.row_hi[rows_under]
        counts = hi - lo
        rows = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        rows = rows[trie.row_len[rows] > np.repeat(trie.depth[rows_under], counts)]
        row_ok[rows] = node_state[ends[rows]] != 0
    return row_ok, node_state


def pack_bits(mask: np.ndarray) -> np.ndarray:
    """Bool mask -> uint32 words, bit i of word j = element 32*j + i."""
    n_words = (len(mask) + 31) // 32
    padded = np.zeros(n_words * 32, dtype=bool)
    padded[:len(mask)] = mask
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32)


def unpack_bits(words: np.ndarray, n: int) -> np.ndarray:
    """uint32 words -> bool mask of length ``n``."""
    as_bytes = np.ascontiguousarray(words, dtype="<u4").view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n].astype(bool)
