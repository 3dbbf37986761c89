"""How many characters of a slice a parser state reads whatever they are (``slices.py``).

The depth of a slice from a state is found breadth first over the parser's own memoised transitions,
one level per character: every string of that many of the slice's characters, and every prefix of
one (mid-character too), keeps the parse alive. Bytes the grammar puts in one class, and that every
item of the state steps alike, lead to the same state, so one of each group is stepped. ``exact``
finds where every longer string dies right after the depth (a count) and after which character
counts the rule has ended on every string, for walks that skip whole subtrees of slice tokens.
"""
from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.position_depth import PositionDepth, breadth_depth
from halter.grammar.slices import DEAD, N_UTF8, SLICES, TrieSlices

if TYPE_CHECKING:
    from halter.grammar.parser_state import Node, StateSpace

MAX_DEPTH = 32
"""Slice depths are searched up to this many characters: longer tokens are rare (58 of 100k
string-character tokens on DeepSeek's vocabulary; 167 longer than 16) and walked; the search costs
a level per character, new states on a counted string (states the walk of a long token would make
anyway: 32 measured ahead of 16 and 64 on JSONSchemaBench's counted strings)."""

EXACT_STATES = 64
"""States per level past which ``SliceDepth.exact`` gives up (a count has a few per level)."""


_SLICE_STEPS: list = [None] * len(SLICES)
"""Per slice: (UTF-8 state, byte, next UTF-8 state) of every byte it reads, the same for every grammar."""
_SLICE_FIRST: list = [None] * len(SLICES)
"""Per slice: the bytes a character of it may start with."""
_CLASS_MEMO: dict = {}
"""(slice, the grammar's byte classes) -> ``_slice_classes``: schemas often share their classes."""


def _slice_classes(k: int, class_of) -> tuple:
    """Slice ``k``'s steps in a grammar's byte classes: per UTF-8 state the classes its bytes fall in
    with the next UTF-8 state (sorted by class), the classes as bits (per state and all), the boundary
    states and, per state, a picker of those classes' entries from a row of next positions."""
    class_of = np.asarray(class_of, dtype=np.int64)
    key = (k, class_of.tobytes())
    got = _CLASS_MEMO.get(key)
    if got is not None:
        return got
    steps = _SLICE_STEPS[k]
    if steps is None:
        table = SLICES[k].table[:N_UTF8]
        u, b = np.nonzero(table != DEAD)
        steps = _SLICE_STEPS[k] = (u, b, table[u, b].astype(np.int64))
    u, b, nxt = steps
    n_cls, width = int(class_of.max()) + 1, N_UTF8 + 1
    seen = np.zeros((N_UTF8, n_cls, width), dtype=bool)    # each (state, class, next state) once, sorted
    seen[u, class_of[b], nxt] = True
    su, sc, sn = np.nonzero(seen)
    cut = np.searchsorted(su, np.arange(N_UTF8 + 1)).tolist()
    sc, sn = sc.tolist(), sn.tolist()
    cls = [tuple(sc[cut[i]:cut[i + 1]]) for i in range(N_UTF8)]
    u2s = [tuple(sn[cut[i]:cut[i + 1]]) for i in range(N_UTF8)]
    need = [sum(1 << c for c in set(row)) for row in cls]
    need_all = 0
    for bits in need:
        need_all |= bits
    pick = [itemgetter(*row) if len(row) > 1 else (lambda r, row=row: tuple(r[c] for c in row)) for row in cls]
    got = _CLASS_MEMO[key] = (cls, u2s, need, need_all, SLICES[k].boundary.tolist(), pick)
    if len(_CLASS_MEMO) > 4096:
        _CLASS_MEMO.pop(next(iter(_CLASS_MEMO)))
    return got


class SliceDepth:
    """Slice depths of the parser states of one state space (memoised per state and slice)."""

    by_positions = True
    """Search over grammar positions where a start's calls read none of the slice
    (``position_depth.py``); False: always over parser states (tests compare the two)."""

    def __init__(self, space: "StateSpace", slices: TrieSlices) -> None:
        self.space = space
        self.slices = slices
        # per slice and UTF-8 state: the parser byte classes its bytes fall in, with the next
        # state (made when the slice is first used)
        self._cls: list = [None] * len(SLICES)
        self._u2s: list = [None] * len(SLICES)
        self._cols: list[dict] = [{} for _ in SLICES]     # (position, UTF-8 state) -> its next positions
        self._group_memo: list[dict] = [{} for _ in SLICES]   # (positions, UTF-8 state) -> _groups
        self._depth: list[dict[int, int]] = [{} for _ in SLICES]
        self._succ: list[dict[tuple[int, int], tuple | None]] = [{} for _ in SLICES]
        self._exact: list[dict[int, tuple | None]] = [{} for _ in SLICES]
        self._pick: list = [None] * len(SLICES)
        self._need_all: list = [0] * len(SLICES)           # per slice: all its classes, as bits
        self._boundary: list = [None] * len(SLICES)
        self._positions = PositionDepth(space, self._read_bits)
        self._need: list = [None] * len(SLICES)           # per slice and UTF-8 state: its classes, as bits
        self._first_need: list = [None] * len(SLICES)     # per slice: its first bytes' classes, as bits
        self._reads: dict[int, int] = {}                  # position -> the classes it reads, as bits
        self._node_have: dict[int, int] = {}              # state id -> the classes its items read, as bits
        self._read_rows: np.ndarray | None = None

    def _prepare(self, k: int) -> None:
        if self._cls[k] is None:
            (self._cls[k], self._u2s[k], self._need[k], self._need_all[k], self._boundary[k],
             self._pick[k]) = _slice_classes(k, self.space.class_of)

    def _reads_first(self, start: "Node", k: int) -> bool:
        """Whether ``start``'s items read every class of the slice's first bytes (a depth of 1 or
        more needs it): a check far cheaper than preparing the slice, which most states fail."""
        need = self._first_need[k]
        if need is None:
            first = _SLICE_FIRST[k]
            if first is None:
                first = _SLICE_FIRST[k] = np.flatnonzero(SLICES[k].table[0] != DEAD)
            classes = np.asarray(self.space.class_of, dtype=np.int64)[first]
            need = self._first_need[k] = sum(1 << c for c in set(classes.tolist()))
        return not need & ~self._node_reads(start)

    def _node_reads(self, node: "Node") -> int:
        """The byte classes some item of ``node`` reads, as bits (memoised per state)."""
        have = self._node_have.get(node.id)
        if have is None:
            have = 0
            for d, _ in node.scan:
                have |= self._reads.get(d) or self._read_bits(d)
            self._node_have[node.id] = have
        return have

    def _read_bits(self, d: int) -> int:
        """The byte classes position ``d`` reads, as the bits of an int (memoised)."""
        got = self._reads.get(d)
        if got is None:
            if self._read_rows is None:      # every position's classes as bytes, packed at once
                self._read_rows = np.packbits(self.space.a.next_array >= 0, axis=1, bitorder="little")
            got = self._reads[d] = int.from_bytes(self._read_rows[d].tobytes(), "little")
        return got

    def best(self, start: "Node", uniform: bool = False) -> tuple[int, int]:
        """(slice, depth) covering the most tokens from ``start``; depth 0 where none applies.
        ``uniform``: only slices whose characters are all alike (for walks below a token's prefix)."""
        best_k, best_d, best_n = 0, 0, 0
        for k, sl in enumerate(SLICES):
            if not self.slices.max_len[k] or (uniform and not sl.uniform):
                continue
            if k and best_d and best_k == 0:
                break          # a string's characters: the others (subsets of them) are for code
            # (the code slices are all tried: after `(` in C a word has depth 1 (`1a` is no token
            # of C), an identifier, possibly after a space, the whole 32)
            d = self.depth(start, k)
            if d:
                n = self.slices.n_covered(k, d)
                if n > best_n:
                    best_k, best_d, best_n = k, d, n
        return best_k, best_d

    def depth(self, start: "Node", k: int) -> int:
        """How many characters of slice ``k`` ``start`` reads whatever they are, up to the slice's
        longest token (``MAX_DEPTH`` at most): every string of the slice that many characters long,
        and every prefix of one, leaves the parser alive.

        Breadth first over (state, slice state) pairs between characters (``successors``), one
        level per character; a pair met on an earlier level is not expanded again (its strings
        were checked from a shorter prefix, so further), and a state whose depth is known bounds
        what lies beyond it.
        """
        memo = self._depth[k]
        hit = memo.get(start.id)
        if hit is not None:
            return hit
        if not self._reads_first(start, k):      # some first byte of the slice is read by no item
            memo[start.id] = 0
            return 0
        self._prepare(k)
        best = min(self.slices.max_len[k], MAX_DEPTH)
        d = self._positions.own_position(start) if self.by_positions else None
        if d is not None:              # over positions where its calls read none of the slice
            got = self._positions.depth(d, k, best, self._cls[k], self._u2s[k], self._boundary[k], self._need[k],
                                        self._need_all[k])
            if got is not None:
                memo[start.id] = got
                return got
        best = breadth_depth((start.id, 0), lambda sid, u: self.successors(sid, u, k),
                             lambda t: memo.get(t[0]) if t[1] == 0 else None, best)
        memo[start.id] = best
        return best

    def successors(self, sid: int, u: int, k: int) -> tuple | None:
        """The (state id, slice state) pairs after one more character of slice ``k`` from state
        ``sid`` in slice state ``u`` (or after the rest of the character ``u`` is inside), or None
        where some character (or the rest of one) kills the parse. Memoised.

        Classes that every item of a state steps alike lead to the same state, so one of each
        such group is stepped (the parser's transitions are memoised per class).
        """
        memo = self._succ[k]
        at = (sid, u)
        if at in memo:
            return memo[at]
        space = self.space
        nodes, step_class, boundary = space.nodes, space.step_class, SLICES[k].boundary
        out: set = set()
        node = nodes[sid]
        result: tuple | None = None
        if self._need[k][u] & ~self._node_reads(node):    # a class no item reads: dead at once
            memo[at] = None
            return None
        for cls, u2, _read in self._groups(node, u, k):   # (every class is read by some item)
            t = node.next[cls]
            t_id = t if t >= 0 else step_class(node, cls).id
            if t_id == 0:
                break
            if boundary[u2]:
                out.add((t_id, u2))
            else:                                          # mid-character: the rest of it, memoised
                rest = self.successors(t_id, u2, k)       # (states of a rule's rest are shared)
                if rest is None:
                    break
                out.update(rest)
        else:
            result = tuple(out)
        memo[at] = result
        return result

    def _groups(self, node: "Node", u: int, k: int) -> list[tuple[int, int, bool]]:
        """(class, next slice state, read by some item) for one class of each group of the classes
        of slice ``k`` from slice state ``u`` that every item of ``node`` steps alike: such classes
        lead to the same state (the parser's transitions are memoised per class)."""
        ds = tuple(d for d, _ in node.scan)   # (states differing by their contexts alone share it)
        memo = self._group_memo[k]
        got = memo.get((ds, u))
        if got is not None:
            return got
        classes, cols, byte_next = self._cls[k][u], self._cols[k], self.space.a.byte_next
        pick = self._pick[k][u]
        per_item = []
        for d in ds:
            col = cols.get((d, u))
            if col is None:
                col = cols[(d, u)] = pick(byte_next[d])
            per_item.append(col)
        # the first class of each group, kept by walking the classes backwards into a dict
        groups = dict(zip(reversed(list(zip(*per_item, self._u2s[k][u]))), reversed(classes)))
        got = memo[(ds, u)] = [(cls, key[-1], max(key[:-1], default=-1) >= 0) for key, cls in groups.items()]
        return got

    def exact(self, start: "Node", k: int, depth: int) -> tuple[int, ...] | None:
        """Where every string of slice ``k`` (a uniform one) dies right after ``depth`` characters
        from ``start`` (a count with ``depth`` left, ending its rule): the character counts ``j``
        (1..``depth``) after which the rule has ended on every such string, so that the walk takes
        every subtree of class tokens whole (``TrieSlices.escape_nodes``); None where the strings
        differ (some end the rule after ``j`` characters and some not, one ends it mid-character,
        one reads on), or a level holds more than ``EXACT_STATES`` states. Memoised per state and
        depth: along a count, each position's answer is the next one's, one character on."""
        self._prepare(k)
        return self._exact_of(start.id, k, depth)

    def _exact_of(self, sid: int, k: int, depth: int) -> tuple[int, ...] | None:
        memo = self._exact[k]
        key = (sid, depth)
        if key in memo:
            return memo[key]
        memo[key] = None                         # (a state met again on its own strings: not exact)
        level = self._step_all(sid, 0, k, depth == 0)
        if depth == 0 or level is None:
            got = () if depth == 0 and level is not None else None
        elif not level or len(level) > EXACT_STATES:
            got = None
        else:
            escaped = {self.space.nodes[t].escaped for t, _ in level}
            rests = {self._exact_of(t, k, depth - 1) for t, _ in level}
            if len(escaped) > 1 or len(rests) > 1 or None in rests:
                got = None
            else:
                got = ((1,) if escaped.pop() else ()) + tuple(j + 1 for j in rests.pop())
        memo[key] = got
        return got

    def _step_all(self, sid: int, u: int, k: int, must_die: bool):
        """The states between characters after one more character of slice ``k``: all of them
        (None where one dies, or with ``must_die`` where one lives; a state ending its rule
        mid-character: None too)."""
        space = self.space
        nodes, step_class = space.nodes, space.step_class
        boundary = SLICES[k].boundary
        out: set = set()
        todo = [(sid, u)]
        mids = set()
        while todo:
            s, u = todo.pop()
            node = nodes[s]
            for cls, u2, read in self._groups(node, u, k):
                if not read:
                    if must_die:
                        continue
                    return None
                t = node.next[cls]
                t_id = t if t >= 0 else step_class(node, cls).id
                if t_id == 0:
                    if must_die:
                        continue
                    return None
                if boundary[u2]:
                    if must_die:
                        return None
                    out.add((t_id, u2))
                elif (t_id, u2) not in mids:
                    if nodes[t_id].escaped:
                        return None
                    mids.add((t_id, u2))
                    todo.append((t_id, u2))
        return out
