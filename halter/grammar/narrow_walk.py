"""Trie walks for narrow frontiers, one trie node at a time in plain Python.

``trie_walk.walk_subtrees`` advances a whole trie level per numpy call, which pays off when the frontier
is wide (string contents, where most bytes are allowed) but costs a dozen array operations per level
however few nodes survive. Schema grammars mostly meet the other case: below the escape point of a
key or a literal (``"``, `` "``, ``\\``) the caller's continuation allows one or two bytes, and the
walk dies after a few levels. Here such walks go depth-first over the trie's arrays (read through
memoryviews, so indexing yields plain ints) and the parser states' memoised transitions. A node's
children are sorted by byte, so when a state allows few bytes and the node has many children, the
allowed children are found by binary search instead of trying each.
"""
from __future__ import annotations

from bisect import bisect_left
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from halter.grammar.parser_state import Node, StateSpace
    from halter.grammar.trie import TokenTrie

# a start state allowing at least this many bytes, above this many tokens below its nodes, walks with numpy
WIDE_LIVE_BYTES = 48
WIDE_ROWS = 256
MAX_START_NODES = 64
# a position whose opaque node reads at most this many bytes (a literal's next byte, a few
# alternatives) has its whole-trie walk done here, where it looks at most NARROW_WALK_NODES child
# nodes (past that, as below a letter that starts a word, the compiled walk is faster)
NARROW_POSITION_BYTES = 4
NARROW_WALK_NODES = 64


class NarrowWalker:
    """Depth-first subtree walks for one (state space, trie) pair; caches the per-state allowed bytes."""

    def __init__(self, space: "StateSpace", trie: "TokenTrie") -> None:
        self.space = space
        self.class_of = list(space.class_of)
        self._bytes_of_class: list[list[int]] = [[] for _ in range(space.a.n_classes)]
        for b, c in enumerate(self.class_of):
            self._bytes_of_class[c].append(b)
        self._pos_bytes: dict[int, tuple[int, ...]] = {}
        self._live: dict[int, tuple[int, ...]] = {}
        self.child_lo = memoryview(trie.child_lo).cast("B").cast("q")
        self.child_hi = memoryview(trie.child_hi).cast("B").cast("q")
        self.node_row = memoryview(trie.node_row).cast("B").cast("q")
        self.row_lo = memoryview(trie.row_lo).cast("B").cast("q")
        self.row_hi = memoryview(trie.row_hi).cast("B").cast("q")
        self.byte = memoryview(trie.byte).cast("B")
        self.first = (trie.level_start[0], trie.level_start[1] if trie.n_nodes else 0)

    def _position_bytes(self, d: int) -> tuple[int, ...]:
        live = self._pos_bytes.get(d)
        if live is None:
            by_class = self._bytes_of_class
            parts = [by_class[c] for c, t in enumerate(self.space.a.byte_next[d]) if t >= 0]
            live = self._pos_bytes[d] = tuple(sorted(b for part in parts for b in part))
        return live

    def live_bytes(self, node: "Node") -> tuple[int, ...]:
        """The bytes some item of ``node`` can read next (from the rule automata alone: no closures)."""
        live = self._live.get(node.id)
        if live is None:
            scan = node.scan
            if len(scan) == 1:
                live = self._position_bytes(scan[0][0])
            else:
                live = tuple(sorted(set().union(*(self._position_bytes(d) for d, _ in scan))))
            self._live[node.id] = live
        return live

    def is_narrow(self, start: "Node", nodes: list[int]) -> bool:
        """Should a walk from ``start`` below trie ``nodes`` go depth-first (rather than with numpy)?

        Yes when ``start`` allows few bytes (the walk dies within a few nodes), or when the subtrees
        hold few tokens (the rows below a node are one contiguous range) whatever it allows.
        """
        if len(nodes) > MAX_START_NODES:
            return False
        lo, hi = self.row_lo, self.row_hi
        if sum(hi[n] - lo[n] for n in nodes) < WIDE_ROWS:
            return True
        return len(self.live_bytes(start)) < WIDE_LIVE_BYTES

    def walk(self, start: "Node", nodes, want_escapes: bool) -> tuple[list[int], list[int]]:
        """(rows below ``nodes`` readable from ``start``, escape points met), like ``walk_subtrees``."""
        return self._walk_pairs([(n, start) for n in nodes], want_escapes, -1, self.space.step_class)

    def _walk_pairs(self, stack: list, want_escapes: bool, budget: int, step_class) -> tuple[list[int], list[int]] | None:
        """``walk`` below each (trie node, state) pair of ``stack``, new transitions made by
        ``step_class(state, class)``; None where a ``budget`` (>= 0) of child nodes to look at runs out."""
        states = self.space.nodes
        class_of, child_lo, child_hi = self.class_of, self.child_lo, self.child_hi
        node_row, byte = self.node_row, self.byte
        found: list[int] = []
        escapes: list[int] = []
        while stack:
            n, state = stack.pop()
            lo, hi = child_lo[n], child_hi[n]
            if hi - lo > 8:
                live = self.live_bytes(state)
                if len(live) * 4 < hi - lo:          # few allowed bytes: find them by bisection
                    kids = []
                    for b in live:
                        k = bisect_left(byte, b, lo, hi)
                        if k < hi and byte[k] == b:
                            kids.append(k)
                else:
                    kids = range(lo, hi)
            else:
                kids = range(lo, hi)
            if budget >= 0:
                budget -= len(kids)
                if budget < 0:
                    return None
            nexts = state.next
            for k in kids:
                c = class_of[byte[k]]
                nid = nexts[c]
                if nid == 0:
                    continue
                nxt = states[nid] if nid > 0 else step_class(state, c)
                if nxt.id == 0:
                    continue
                r = node_row[k]
                if r >= 0:
                    found.append(r)
                if child_hi[k] > child_lo[k]:
                    if want_escapes and nxt.escaped:
                        escapes.append(k)
                    stack.append((k, nxt))
        return found, escapes

    def walk_whole(self, start: "Node") -> tuple[list[int], list[int]] | None:
        """(rows readable from ``start``, escape points met) of a walk of the whole trie, as
        ``trie_kernel.TrieKernel.walk_position`` finds them, where ``start`` reads at most
        ``NARROW_POSITION_BYTES`` bytes and no space (so no slice applies: a slice's first bytes are
        many, or a space) and the walk looks at most ``NARROW_WALK_NODES`` child nodes; None
        otherwise."""
        live = self.live_bytes(start)
        if len(live) > NARROW_POSITION_BYTES or 0x20 in live:
            return None
        step_class, class_of, byte, node_row = self.space.step_class, self.class_of, self.byte, self.node_row
        child_lo, child_hi = self.child_lo, self.child_hi
        lo, hi = self.first
        rows: list[int] = []
        escapes: list[int] = []
        byte_next = self.space.a.byte_next
        pairs = []
        for b in live:                       # the first level, sorted by byte: found by bisection
            k = bisect_left(byte, b, lo, hi)
            if k >= hi or byte[k] != b:
                continue
            if self.row_hi[k] - self.row_lo[k] > NARROW_WALK_NODES:
                # many tokens below: where the positions after the byte read many bytes (a word's
                # letters, a string's characters), the compiled walk is the faster
                after = {byte_next[x][class_of[b]] for x, _ in start.scan}
                if sum(len(self._position_bytes(t)) for t in after if t >= 0) > NARROW_POSITION_BYTES:
                    return None
            nxt = step_class(start, class_of[b])
            if nxt.id == 0:
                continue
            if node_row[k] >= 0:
                rows.append(node_row[k])
            if child_hi[k] > child_lo[k]:
                if nxt.escaped:
                    escapes.append(k)
                pairs.append((k, nxt))
        got = self._walk_pairs(pairs, True, NARROW_WALK_NODES, step_class)
        if got is None:
            return None
        rows.extend(got[0])
        escapes.extend(got[1])
        return rows, escapes
