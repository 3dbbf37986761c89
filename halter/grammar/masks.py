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

from halter.grammar.parser_state import OPAQUE_ID, Node, StateSpace
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
        self.opaque_ids = np.full(space.a.n_positions, -1, dtype=np.int32)  # position -> its opaque node, registered

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
                if ctx == OPAQUE_ID:
                    self.single_pos[nid] = d
            else:
                row[np.logical_and.reduce([self._position_dead(d) for d, _ in scan])] = 0

    def _position_dead(self, d: int) -> np.ndarray:
        dead = self._dead.get(d)
        if dead is None:
            dead = self._dead[d] = np.asarray(self.space.a.byte_next[d]) < 0
        return dead

    def next_positions(self) -> np.ndarray:
        """``byte_next`` as an int32 array ``[position, class]`` (-1: no transition)."""
        if self._next_pos is None:
            self._next_pos = np.asarray(self.space.a.byte_next, dtype=np.int32)
        return self._next_pos

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
                target = self.next_positions()[pos[single], uc[single]]      # >= 0: dead classes are filled
                ids = self.opaque_ids[target]
                for t in sorted_unique(target[ids < 0]).tolist():
                    node = self.space.opaque_node(t)
                    self.register(node)
                    self.opaque_ids[t] = node.id
                self.table[us[single], uc[single]] = self.opaque_ids[target]
                us, uc = us[~single], uc[~single]
            nodes = self.space.nodes
            for p in sorted_unique(us.astype(np.int64) * self.n_classes + uc).tolist():
                s, c = divmod(p, self.n_classes)
                node = self.space.step_class(nodes[s], c)
                self.register(node)
                self.table[s, c] = node.id
            nxt = self.table[states, classes]
        return nxt


BATCH = 64
"""Starts walked together by ``walk_trie_batch``: each owns one bit of a uint64 mask."""


def walk_trie_batch(tt: TransitionTable, trie: TokenTrie, starts: list[Node]):
    """Walk every token from each of ``starts`` (opaque nodes, at most ``BATCH``), one trie level at a time.

    The walk advances (trie node, parser state) pairs, each carrying a mask of the starts it came
    from. Pairs that reach the same trie node in the same state are merged, masks ORed, so their
    subtrees are walked once: the starts of one rule mostly fall into the same few states after a
    byte or two (every prefix of a known key, read past the key, is inside the same free string), so
    this walks a fraction of the pairs that one walk per start would.

    Returns ``(rows, row_owners)``: trie rows (tokens) that can be read, with the starts that read
    them as a uint64 mask (a row may come twice, from different states), and ``(esc_nodes,
    esc_owners)``: escape points, trie nodes (with children) where a start position's rule has just
    ended, so that longer tokens below them depend on the caller.
    """
    if len(starts) > BATCH:
        raise ValueError(f"at most {BATCH} starts per batch")
    for node in starts:
        tt.register(node)
    first = np.arange(trie.level_start[0], trie.level_start[1] if trie.n_nodes else 0, dtype=np.int64)
    n_first = len(first)
    level = np.tile(first, len(starts))
    owners = np.repeat(np.left_shift(np.uint64(1), np.arange(len(starts), dtype=np.uint64)), n_first)
    prev_states = np.repeat(np.array([n.id for n in starts], dtype=np.int32), n_first)
    ok_r, ok_m, esc_n, esc_m = [], [], [], []
    while len(level):
        st = tt.step(prev_states, tt.class_of[trie.byte[level]])
        live = st != 0
        level, st, owners = level[live], st[live], owners[live]
        if len(level) > 1:                              # merge equal (trie node, state) pairs
            pick, owners = or_by_key(level * (len(tt.table) + 1) + st, owners)
            level, st = level[pick], st[pick]
        rows = trie.node_row[level]
        ends = rows >= 0
        ok_r.append(rows[ends])
        ok_m.append(owners[ends])
        esc = tt.escaped[st]
        if esc.any():
            en = level[esc]
            keep = trie.child_hi[en] > trie.child_lo[en]
            esc_n.append(en[keep])
            esc_m.append(owners[esc][keep])
        counts = trie.child_hi[level] - trie.child_lo[level]
        if not counts.any():
            break
        prev_states = np.repeat(st, counts)
        owners = np.repeat(owners, counts)
        level = trie.children_of(level)
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt))
    return (cat(ok_r, np.int64), cat(ok_m, np.uint64)), (cat(esc_n, np.int64), cat(esc_m, np.uint64))


def or_by_key(key: np.ndarray, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices of one entry per distinct ``key``, in key order; each key's ``owners`` ORed).

    ``key`` must be non-empty. A stable sort: keys that are nearly sorted already cost little.
    """
    order = np.argsort(key, kind="stable")
    k = key[order]
    first_of = np.empty(len(k), dtype=bool)
    first_of[0] = True
    np.not_equal(k[1:], k[:-1], out=first_of[1:])
    if first_of.all():
        return order, owners[order]
    at = np.flatnonzero(first_of)
    return order[at], np.bitwise_or.reduceat(owners[order], at)


_T8 = [(np.uint64(7), np.uint64(0x00AA00AA00AA00AA)), (np.uint64(14), np.uint64(0x0000CCCC0000CCCC)),
       (np.uint64(28), np.uint64(0x00000000F0F0F0F0))]


def owners_to_rows(by_token: np.ndarray, n_owners: int) -> np.ndarray:
    """Per-token uint64 owner masks (length a multiple of 32) -> packed token masks per owner.

    Row ``j`` of the result (uint32 words, bit i of word w = token 32w+i) holds the tokens whose
    mask has bit ``j``: a transpose of a bit matrix, done 8x8 bits at a time inside uint64 words
    (three shift-and-mask rounds), which is ~10x faster than unpacking to one byte per bit.
    """
    n = len(by_token)
    cols = by_token.view(np.uint8).reshape(n, 8)          # [token, k]: bits of owners 8k..8k+7
    n_groups = (n_owners + 7) // 8
    out = np.empty((n_groups, 8, n // 8), np.uint8)        # [k, j, 8 tokens]
    for k in range(n_groups):
        x = np.ascontiguousarray(cols[:, k]).view("<u8")   # 8 tokens x 8 owners per word
        for shift, keep in _T8:
            t = (x ^ (x >> shift)) & keep
            x = x ^ t ^ (t << shift)
        out[k] = x.view(np.uint8).reshape(-1, 8).T        # now: 8 owners x 8 tokens per word
    return out.reshape(n_groups * 8, n // 8)[:n_owners].copy().view("<u4")


def owner_bits(masks: np.ndarray, n_owners: int) -> np.ndarray:
    """uint64 owner masks -> bool array ``(len(masks), n_owners)``: entry [i, j] = bit j of mask i."""
    as_bytes = np.ascontiguousarray(masks, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :n_owners].astype(bool)


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
