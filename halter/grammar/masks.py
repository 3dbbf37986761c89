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
        self._dead: dict[int, np.ndarray] = {}         # position -> classes it cannot read
        self.single_pos = np.full(1024, -1, dtype=np.int64)   # state -> its one position, caller unknown
        self._registered = bytearray(1024)            # state -> its row has been set up
        self._next_pos: np.ndarray | None = None       # byte_next as an array, built when first needed

    def reserve(self, n: int) -> None:
        """Make room for state ids below ``n`` now, so that decoding does not pause to copy the table."""
        self._grow(n - 1)

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
        sp = np.full(cap, -1, dtype=np.int64)
        sp[:len(self.single_pos)] = self.single_pos
        self.table, self.escaped, self.single_pos = t, e, sp
        self._registered.extend(bytes(cap - len(self._registered)))

    def register(self, node: Node) -> None:
        """Make room for ``node`` and fill in, at once, the byte classes none of its items can read
        (most of them): walks then only ever compute the transitions that lead somewhere."""
        nid = node.id
        if nid < len(self._registered) and self._registered[nid]:
            return
        self._grow(nid)
        self._registered[nid] = 1
        self.escaped[nid] = node.escaped
        row = self.table[nid]
        if nid != 0:
            scan = node.scan
            if not scan:
                row[:] = 0
            elif len(scan) == 1:
                d, ctx = scan[0]
                row[self._position_dead(d)] = 0
                if ctx is self.space.opaque:
                    self.single_pos[nid] = d
            else:
                row[np.logical_and.reduce([self._position_dead(d) for d, _ in scan])] = 0

    def _position_dead(self, d: int) -> np.ndarray:
        dead = self._dead.get(d)
        if dead is None:
            dead = self._dead[d] = np.asarray(self.space.a.byte_next[d]) < 0
        return dead

    def step(self, states: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Next state for each (state, class) pair, computing unknown transitions on the way.

        A state that is one position with an unknown caller (most states of the compile-time
        walks) steps to the opaque node of the next position: those are looked up together, and
        only positions met for the first time build a node.
        """
        nxt = self.table[states, classes]
        unknown = nxt < 0
        if unknown.any():
            us, uc = states[unknown], classes[unknown]
            pos = self.single_pos[us]
            single = pos >= 0
            if single.any():
                if self._next_pos is None:
                    self._next_pos = np.asarray(self.space.a.byte_next, dtype=np.int32)
                target = self._next_pos[pos[single], uc[single]]      # >= 0: dead classes are filled
                ids = self.space.opaque_ids[target]
                for t in sorted_unique(target[ids < 0]).tolist():
                    self.register(self.space.opaque_node(t))
                self.table[us[single], uc[single]] = self.space.opaque_ids[target]
                us, uc = us[~single], uc[~single]
            nodes = self.space.nodes
            for p in sorted_unique(us.astype(np.int64) * self.n_classes + uc).tolist():
                s, c = divmod(p, self.n_classes)
                node = self.space.step_class(nodes[s], c)
                self.register(node)
                self.table[s, c] = node.id
            nxt = self.table[states, classes]
        return nxt


def walk_trie_batch(tt: TransitionTable, trie: TokenTrie, starts: list[Node]):
    """Walk every token from each of ``starts`` (opaque nodes), all in one batch per trie level.

    Returns ``(ok_start, ok_row)`` pairs (row ``ok_row[i]`` can be read from ``starts[ok_start[i]]``)
    and ``(esc_start, esc_node)`` pairs, sorted by start: escape points, trie nodes (with children)
    where the start position's rule has just ended, so that longer tokens below them depend on the
    caller.
    """
    for node in starts:
        tt.register(node)
    first = np.arange(trie.level_start[0], trie.level_start[1] if trie.n_nodes else 0, dtype=np.int64)
    n_first = len(first)
    level = np.tile(first, len(starts))
    owner = np.repeat(np.arange(len(starts), dtype=np.int64), n_first)
    prev_states = np.repeat(np.array([n.id for n in starts], dtype=np.int32), n_first)
    ok_s, ok_r, esc_s, esc_n = [], [], [], []
    while len(level):
        st = tt.step(prev_states, tt.class_of[trie.byte[level]])
        live = st != 0
        level, st, owner = level[live], st[live], owner[live]
        rows = trie.node_row[level]
        ends = rows >= 0
        ok_s.append(owner[ends])
        ok_r.append(rows[ends])
        esc = tt.escaped[st]
        if esc.any():
            en = level[esc]
            keep = trie.child_hi[en] > trie.child_lo[en]
            esc_s.append(owner[esc][keep])
            esc_n.append(en[keep])
        counts = trie.child_hi[level] - trie.child_lo[level]
        if not counts.any():
            break
        prev_states = np.repeat(st, counts)
        owner = np.repeat(owner, counts)
        level = trie.children_of(level)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))
    ok_s, ok_r, esc_s, esc_n = cat(ok_s), cat(ok_r), cat(esc_s), cat(esc_n)
    order = np.lexsort((esc_n, esc_s))
    esc_s, esc_n = esc_s[order], esc_n[order]
    if len(esc_s):                                   # the same node can be reached twice: dedupe
        first_of = np.ones(len(esc_s), dtype=bool)
        first_of[1:] = (esc_s[1:] != esc_s[:-1]) | (esc_n[1:] != esc_n[:-1])
        esc_s, esc_n = esc_s[first_of], esc_n[first_of]
    return ok_s, ok_r, esc_s, esc_n


def walk_subtrees(tt: TransitionTable, trie: TokenTrie, start: Node, nodes: np.ndarray,
                  want_escapes: bool = False, first_bytes: np.ndarray | None = None):
    """Rows strictly below trie ``nodes`` whose bytes below that node can be read from ``start``.

    Each node's subtree is walked from ``start`` on its own (a node nested under another is walked
    twice, from two different offsets), all in one batch of (trie node, parser state) pairs; the
    state belongs to the pair, not to the trie node. Returns the row indices (may repeat) and, with
    ``want_escapes``, the escape points met on the way (as in ``walk_trie_batch``; ``start`` should
    then be an opaque node). ``first_bytes`` (sorted), when given, are the only bytes ``start`` can
    read: the first level then looks up just those children instead of expanding all of them.
    """
    found, escapes = [], []
    if start.id != 0 and len(nodes):
        tt.register(start)
        nodes = np.asarray(nodes, dtype=np.int64)
        if first_bytes is not None:
            level = trie.children_with_bytes(nodes, first_bytes)
        else:
            level = trie.children_of(nodes)
        prev_states = np.full(len(level), start.id, dtype=np.int32)
        while len(level):
            st = tt.step(prev_states, tt.class_of[trie.byte[level]])
            live = st != 0
            level, st = level[live], st[live]
            rows = trie.node_row[level]
            found.append(rows[rows >= 0])
            if want_escapes:
                esc = level[tt.escaped[st]]
                escapes.append(esc[trie.child_hi[esc] > trie.child_lo[esc]])
            counts = trie.child_hi[level] - trie.child_lo[level]
            if not counts.any():
                break
            prev_states = np.repeat(st, counts)
            level = trie.children_of(level)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))
    if want_escapes:
        return cat(found), sorted_unique(cat(escapes))
    return cat(found)


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array, sorted: ``np.unique`` without its hashing path,
    which numpy 2.x takes for plain calls and which costs ~15x a sort on arrays of trie nodes."""
    if len(values) < 2:
        return values.copy()
    out = np.sort(values)
    keep = np.empty(len(out), dtype=bool)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


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
