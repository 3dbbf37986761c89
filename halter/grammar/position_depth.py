"""Slice depths found over grammar positions, without making parser states (``slice_depth.py``).

A slice depth is searched from the opaque node of one position (``slice_depth.SliceDepth.depth``),
stepping every character of the slice breadth first. The opaque node holds the position's own item
with the unknown (OPAQUE) caller and what its calls predict. Where every called rule is either
unable to read a byte of the slice (a JSON key's complement calls the escape rule, which starts with
a backslash) or tail-called (the call ends the caller's rule, so the callee's items take the OPAQUE
context too: a large key complement is cut into parts called that way), and none can match the
empty string, the items that read slice characters are a set of positions, all with the OPAQUE
context, and a character moves them to the set of their next positions, closed the same way. The
search then runs over those sets and the automata's ``next_array``, with no parser state made: the
depth of a key complement, whose states are one per key prefix, costs a few lookups per prefix
instead of a closure each. A set that calls otherwise (a counted string's multi-byte characters are
a call that returns to the next count) sends the whole search back to parser states (``None``).

Depths are memoised per set: along a key or a count, the next position's search is a lookup.
"""
from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable

from halter.grammar.contexts import OPAQUE_ID

if TYPE_CHECKING:
    from halter.grammar.parser_state import Node, StateSpace

NOT_SIMPLE = False
"""What ``_close`` and ``_successors`` give where the search must run over parser states instead."""

MAX_RETURNS = 6
"""Nested calls an item may be inside (recursion past it: parser states)."""

ANY = -1
"""``_first_of`` where a cycle of predictions is met: every class (as bits, ``-1 & x == x``)."""

MAX_ITEMS = 8
"""Items a set may hold: past it (a long string's counted chunks nest several rules, each with
alternatives) stepping sets costs more than parser states, which merge contexts."""


class PositionDepth:
    """Depths of slices over sets of positions with the OPAQUE context (memoised per set)."""

    def __init__(self, space: "StateSpace", read_bits) -> None:
        self.space = space
        self.a = space.a
        self._read_bits = read_bits               # position -> the classes it reads, as bits
        self._first: dict[int, int] = {}          # position -> classes its prediction closure reads (bits)
        self._first_open: set[int] = set()
        self._closed: dict[tuple, tuple | bool] = {}   # (items, slice classes) -> their closure
        self._depth: dict[tuple, int | None] = {}
        self._succ: dict[tuple, tuple | bool | None] = {}
        self._picks: dict[int, tuple] = {}        # a class list's id -> (the list, its itemgetter)

    def own_position(self, start: "Node") -> int | None:
        """The position ``start`` is the opaque node of (one of its items with the OPAQUE context), or None."""
        opaque = self.space._opaque_nodes
        for d, c in start.scan:
            if c == OPAQUE_ID and opaque.get(d) is start:
                return d
        return None

    # -- what calls may read ------------------------------------------------------------------
    def _first_of(self, x: int) -> int:
        """Classes read by the items the prediction closure of position ``x`` holds (``x``'s own
        reads, its callees' starts and theirs, the positions after nullable callees), as bits;
        ``ANY`` (every bit) where a cycle of predictions is met. Memoised, cycles included: an
        answer is never smaller than the truth."""
        got = self._first.get(x)
        if got is not None:
            return got
        if x in self._first_open:
            return ANY
        self._first_open.add(x)
        try:
            a = self.a
            bits = self._read_bits(x)
            for rule, after in a.calls[x]:
                bits |= self._first_of(a.start[rule])
                if a.nullable[rule]:
                    bits |= self._first_of(after)
                if bits == ANY:
                    break
        finally:
            self._first_open.discard(x)
        self._first[x] = bits
        return bits

    def _close(self, items: tuple, need_all: int) -> tuple | bool:
        """The items (sorted ``(position, returns)`` pairs) of the closure of ``items``, or
        ``NOT_SIMPLE`` where the returns would grow past ``MAX_RETURNS`` (recursion) or the items
        past ``MAX_ITEMS``.

        ``returns`` is the stack of positions the item's rule returns to, innermost last (``()``: the
        unknown caller). A call predicts the callee's start returning to the position after it (a
        tail call: to where the caller returns); a callee that can read no byte of the slice first
        is left out (its items die on the first character), and a nullable one also completes at
        once. An item where its rule may end completes into what its returns say (with none left,
        the unknown caller's rule has ended: the item stays, the escape that keeps the parse alive
        at that point)."""
        key = (items, need_all)
        got = self._closed.get(key)
        if got is not None:
            return got
        a, tail = self.a, self.space.tail_returns
        out: set = set()
        todo = list(items)
        got = None
        while todo:
            it = todo.pop()
            if it in out:
                continue
            out.add(it)
            x, st = it
            if a.accepting[x] and st:
                todo.append((st[-1], st[:-1]))
            for rule, after in a.calls[x]:
                if a.nullable[rule]:
                    todo.append((after, st))
                start = a.start[rule]
                if tail[after]:
                    todo.append((start, st))
                    continue
                if not self._first_of(start) & need_all:
                    continue
                if len(st) >= MAX_RETURNS:
                    got = NOT_SIMPLE
                    break
                todo.append((start, st + (after,)))
            if got is NOT_SIMPLE:
                break
        if got is None:
            got = tuple(sorted(out)) if len(out) <= MAX_ITEMS else NOT_SIMPLE
        self._closed[key] = got
        return got

    # -- the search ---------------------------------------------------------------------------
    def depth(self, d: int, k: int, limit: int, classes: list, u2s: list, boundary, need: list,
              need_all: int) -> int | None:
        """The depth of slice ``k`` from the opaque node of ``d`` (at most ``limit``), or None where
        the search meets a set that calls otherwise (parser states are needed). ``classes[u]`` /
        ``u2s[u]``: the slice's (class, next UTF-8 state) pairs per UTF-8 state; ``need[u]``: their
        classes, as bits; ``need_all``: every class of the slice. Breadth first (``breadth_depth``)."""
        first = self._close(((d, ()),), need_all)
        if first is NOT_SIMPLE:
            return None
        key = (first, k)
        if key in self._depth:
            return self._depth[key]
        memo = self._depth
        best = breadth_depth((first, 0), lambda q, u: self._successors(q, u, k, classes, u2s, boundary, need, need_all),
                             lambda t: memo.get((t[0], k)) if t[1] == 0 else None, limit)
        memo[key] = None if best is NOT_SIMPLE else best
        return memo[key]

    def _successors(self, q: tuple, u: int, k: int, classes: list, u2s: list, boundary, need: list, need_all: int):
        """(position set, UTF-8 state) pairs after one more character of the slice from the set
        ``q`` in UTF-8 state ``u`` (or the rest of the character ``u`` is inside); None where some
        character kills every item; ``NOT_SIMPLE`` where a set met calls otherwise."""
        at = (q, u, k)
        if at in self._succ:
            return self._succ[at]
        have = 0
        for x, _ in q:
            have |= self._read_bits(x)
        if need[u] & ~have:                    # a class of the slice no item reads: dead at once
            self._succ[at] = None
            return None
        byte_next = self.a.byte_next
        pick = self._picks.get(id(classes[u]))
        if pick is None:
            cl = classes[u]
            pick = self._picks[id(classes[u])] = (classes[u], itemgetter(*cl) if len(cl) > 1 else (lambda r: (r[cl[0]],)))
        out: set = set()
        result = None
        if len(q) == 1:               # one item (most sets: a key's prefix, a count): its own column
            x, st = q[0]
            # (classes alike step together; every class of the slice is read, by the check above)
            keys = [(((t, st),) if t >= 0 else (), u2) for t, u2 in set(zip(pick[1](byte_next[x]), u2s[u]))]
        else:
            cols = [pick[1](byte_next[x]) for x, _ in q]
            # classes that move every item alike make one successor: each distinct column once
            keys = [(tuple(sorted({(t, st) for t, (_, st) in zip(col, q) if t >= 0})), u2)
                    for col, u2 in set(zip(zip(*cols), u2s[u]))]
        for nxt, u2 in keys:
            if not nxt:
                break
            t = self._close(nxt, need_all)
            if t is NOT_SIMPLE:
                result = NOT_SIMPLE
                break
            if boundary[u2]:
                out.add((t, u2))
            else:
                rest = self._successors(t, u2, k, classes, u2s, boundary, need, need_all)
                if rest is None or rest is NOT_SIMPLE:
                    result = rest
                    break
                out.update(rest)
        else:
            result = tuple(out)
        self._succ[at] = result
        return result


def breadth_depth(start: tuple, successors: "Callable[[Any, int], Any]", known: "Callable[[tuple], int | None]",
                  best: int) -> "int | bool":
    """The depth of a slice from the pair ``start`` (what lies between characters: a state or set
    of positions, and the slice's UTF-8 state), breadth first, at most ``best``.

    ``successors(x, u)`` gives the pairs after one more character (None where some character kills
    the parse, ``NOT_SIMPLE`` to give up); ``known(t)`` the depth already known beyond a pair, or
    None. A pair met on an earlier level is not expanded again (its strings were checked from a
    shorter prefix). Returns the depth, or ``NOT_SIMPLE``.
    """
    level, seen, j = [start], {start}, 0
    while level and j < best:
        nxt = []
        for x, u in level:
            succ = successors(x, u)
            if succ is NOT_SIMPLE:
                return NOT_SIMPLE
            if succ is None:             # a character read after j of them kills the parse
                best = j
                break
            for t in succ:
                if t not in seen:
                    seen.add(t)
                    depth = known(t)
                    if depth is not None:
                        best = min(best, j + 1 + depth)
                    else:
                        nxt.append(t)
        level = nxt
        j += 1
    return best
