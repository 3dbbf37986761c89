"""Deterministic automata over Unicode code points, for the set operations grammars lack.

A grammar can take unions but not complements or intersections. JSON Schema needs both:
``patternProperties`` splits keys into "matches these patterns and not those", and a ``pattern``
next to ``minLength``/``maxLength`` is an intersection. This module builds a ``Dfa`` from the
regex syntax tree of regex.py (``Literal``, ``CharClass``, ``Seq``, ``Alt``, ``Repeat``): a
Thompson NFA, then subset construction over interval partitions (transitions are labelled by
code-point ranges, so ``\\p{L}`` costs a few hundred ranges, not 100,000 symbols). ``product``
runs several DFAs in lockstep over the whole code-point range; with a choice of accepting
states it gives intersection, union, difference and complement. ``minimize`` (Moore refinement)
and ``trim`` keep results small. Every construction stops with ``AutomatonTooLarge`` at ``limit``
states, so the callers can fall back to an approximation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from halter.grammar.ast import MAX_CODE_POINT, Alt, AnyChar, CharClass, Expr, Literal, Repeat, Seq

DEFAULT_LIMIT = 2000
"""Most DFA (or product) states built before giving up."""

Trans = list[tuple[int, int, int]]     # sorted, disjoint (lo, hi, target) ranges of one state


class AutomatonTooLarge(Exception):
    """A construction would exceed its state limit."""


@dataclass
class Dfa:
    """States ``0..n-1``; ``trans[q]`` maps code-point ranges to states (missing = reject)."""
    trans: list[Trans]
    accept: list[bool]
    start: int = 0

    def __len__(self) -> int:
        return len(self.trans)

    def step(self, q: int, cp: int) -> int:
        for lo, hi, t in self.trans[q]:
            if lo <= cp <= hi:
                return t
            if cp < lo:
                break
        return -1

    def matches(self, text: str) -> bool:
        """Whether the whole of ``text`` is in the language."""
        q = self.start
        for ch in text:
            q = self.step(q, ord(ch))
            if q < 0:
                return False
        return self.accept[q]

    def is_empty(self) -> bool:
        return not any(self.accept[q] for q in _reachable(self))

    def complement(self, limit: int = DEFAULT_LIMIT) -> "Dfa":
        """Every code-point string not in the language."""
        return product([self], lambda s: not s[0], limit)

    def intersect(self, other: "Dfa", limit: int = DEFAULT_LIMIT) -> "Dfa":
        return product([self, other], all, limit)

    def union(self, other: "Dfa", limit: int = DEFAULT_LIMIT) -> "Dfa":
        return product([self, other], any, limit)

    def minus(self, other: "Dfa", limit: int = DEFAULT_LIMIT) -> "Dfa":
        return product([self, other], lambda s: s[0] and not s[1], limit)


# ---------------------------------------------------------------------------------------------
# regex syntax tree -> NFA -> DFA

class _Nfa:
    def __init__(self, limit: int) -> None:
        self.chars: list[list[tuple[tuple[tuple[int, int], ...], int]]] = []
        self.eps: list[list[int]] = []
        self.limit = limit

    def new(self) -> int:
        if len(self.chars) >= self.limit:
            raise AutomatonTooLarge(f"more than {self.limit} NFA states")
        self.chars.append([])
        self.eps.append([])
        return len(self.chars) - 1

    def build(self, e: Expr, start: int) -> int:
        """Add ``e`` starting at state ``start``; return its end state."""
        if isinstance(e, Literal):
            q = start
            for ch in e.text:
                nxt = self.new()
                self.chars[q].append((((ord(ch), ord(ch)),), nxt))
                q = nxt
            return q
        if isinstance(e, (CharClass, AnyChar)):
            ranges = tuple(e.code_point_ranges()) if isinstance(e, CharClass) else ((0, MAX_CODE_POINT),)
            end = self.new()
            if ranges:
                self.chars[start].append((ranges, end))
            return end
        if isinstance(e, Seq):
            q = start
            for it in e.items:
                q = self.build(it, q)
            return q
        if isinstance(e, Alt):
            end = self.new()
            for o in e.options:
                s = self.new()
                self.eps[start].append(s)
                self.eps[self.build(o, s)].append(end)
            return end
        if isinstance(e, Repeat):
            q = start
            for _ in range(e.min):
                q = self.build(e.expr, q)
            if e.max is None:
                loop = self.new()
                self.eps[q].append(loop)
                self.eps[self.build(e.expr, loop)].append(loop)
                return loop
            end = self.new()
            for _ in range(e.max - e.min):
                self.eps[q].append(end)
                q = self.build(e.expr, q)
            self.eps[q].append(end)
            return end
        raise TypeError(f"no automaton for {type(e).__name__} nodes")

    def closure(self, states) -> frozenset[int]:
        seen = set(states)
        todo = list(states)
        while todo:
            for t in self.eps[todo.pop()]:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return frozenset(seen)


def _sweep(edges: Sequence[tuple[int, int, object]]) -> list[tuple[int, int, frozenset]]:
    """Split overlapping (lo, hi, target) ranges into disjoint ranges with their target sets."""
    events: dict[int, list[tuple[int, object]]] = {}
    for lo, hi, t in edges:
        events.setdefault(lo, []).append((1, t))
        events.setdefault(hi + 1, []).append((-1, t))
    active: dict[object, int] = {}
    out: list[tuple[int, int, frozenset]] = []
    points = sorted(events)
    for i, p in enumerate(points):
        for d, t in events[p]:
            n = active.get(t, 0) + d
            if n:
                active[t] = n
            else:
                active.pop(t, None)
        if active and i + 1 < len(points):
            out.append((p, points[i + 1] - 1, frozenset(active)))
    return out


def _add_range(trans: Trans, lo: int, hi: int, t: int) -> None:
    if trans and trans[-1][2] == t and trans[-1][1] + 1 == lo:
        trans[-1] = (trans[-1][0], hi, t)
    else:
        trans.append((lo, hi, t))


def from_expr(expr: Expr, limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA of a code-point syntax tree (whole-string match), trimmed of dead states."""
    nfa = _Nfa(limit * 20)
    s0 = nfa.new()
    final = nfa.build(expr, s0)
    ids: dict[frozenset, int] = {}
    trans: list[Trans] = []
    accept: list[bool] = []
    todo: list[frozenset] = []

    def state(members: frozenset) -> int:
        if members not in ids:
            if len(ids) >= limit:
                raise AutomatonTooLarge(f"more than {limit} DFA states")
            ids[members] = len(trans)
            trans.append([])
            accept.append(final in members)
            todo.append(members)
        return ids[members]

    state(nfa.closure([s0]))
    while todo:
        members = todo.pop()
        q = ids[members]
        edges = [(lo, hi, t) for m in members for ranges, t in nfa.chars[m] for lo, hi in ranges]
        for lo, hi, targets in _sweep(edges):
            _add_range(trans[q], lo, hi, state(nfa.closure(targets)))
    return trim(Dfa(trans, accept))


def literal_set(words: Sequence[str], limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA (a trie) of a finite set of strings."""
    trans: list[dict[int, int]] = [{}]
    accept = [False]
    for w in words:
        q = 0
        for ch in w:
            nxt = trans[q].get(ord(ch))
            if nxt is None:
                if len(trans) >= limit:
                    raise AutomatonTooLarge(f"more than {limit} trie states")
                nxt = len(trans)
                trans[q][ord(ch)] = nxt
                trans.append({})
                accept.append(False)
            q = nxt
        accept[q] = True
    return Dfa([[(c, c, t) for c, t in sorted(d.items())] for d in trans], accept)


def length_range_dfa(lo: int, hi: int | None) -> Dfa:
    """Strings of ``lo`` to ``hi`` code points (``hi=None``: at least ``lo``)."""
    top = hi if hi is not None else lo
    trans: list[Trans] = []
    for i in range(top + 1):
        nxt = i + 1 if i < top else (i if hi is None else -1)
        trans.append([(0, MAX_CODE_POINT, nxt)] if nxt >= 0 else [])
    return Dfa(trans, [lo <= i for i in range(top + 1)])


# ---------------------------------------------------------------------------------------------
# products, trimming, minimizing

def product_states(dfas: Sequence[Dfa], limit: int = DEFAULT_LIMIT) -> tuple[list[Trans], list[tuple[int, ...]]]:
    """The lockstep run of ``dfas`` over all code points: transitions and component states.

    A component that has rejected is ``-1`` in the tuple; every product state has a transition
    for every code point, so any accepting condition (including negations) can be chosen later.
    """
    start = tuple(d.start for d in dfas)
    ids = {start: 0}
    parts = [start]
    trans: list[Trans] = [[]]
    i = 0
    while i < len(parts):
        tup = parts[i]
        edges: list[tuple[int, int, object]] = [(0, MAX_CODE_POINT, (-1, -1))]
        for k, (d, q) in enumerate(zip(dfas, tup)):
            if q >= 0:
                edges.extend((lo, hi, (k, t)) for lo, hi, t in d.trans[q])
        for lo, hi, targets in _sweep(edges):
            nxt = [-1] * len(dfas)
            for k, t in targets:
                if k >= 0:
                    nxt[k] = t
            key = tuple(nxt)
            if key not in ids:
                if len(parts) >= limit:
                    raise AutomatonTooLarge(f"more than {limit} product states")
                ids[key] = len(parts)
                parts.append(key)
                trans.append([])
            _add_range(trans[i], lo, hi, ids[key])
        i += 1
    return trans, parts


def product(dfas: Sequence[Dfa], accepting: Callable[[list[bool]], bool], limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA accepting when ``accepting([component i accepts, ...])`` is true; trimmed."""
    trans, parts = product_states(dfas, limit)
    flags = [accepting([q >= 0 and d.accept[q] for d, q in zip(dfas, tup)]) for tup in parts]
    return trim(Dfa(trans, flags))


def _reachable(d: Dfa) -> list[int]:
    seen = {d.start}
    todo = [d.start]
    while todo:
        for _, _, t in d.trans[todo.pop()]:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(seen)


def trim(d: Dfa) -> Dfa:
    """Only the states reachable from the start that can still reach acceptance (renumbered)."""
    reach = _reachable(d)
    back: dict[int, list[int]] = {}
    for q in reach:
        for _, _, t in d.trans[q]:
            back.setdefault(t, []).append(q)
    live = {q for q in reach if d.accept[q]}
    todo = list(live)
    while todo:
        for p in back.get(todo.pop(), ()):
            if p not in live:
                live.add(p)
                todo.append(p)
    if d.start not in live:
        return Dfa([[]], [False])
    order = [d.start] + [q for q in reach if q in live and q != d.start]
    new = {q: i for i, q in enumerate(order)}
    trans: list[Trans] = []
    for q in order:
        row: Trans = []
        for lo, hi, t in d.trans[q]:
            if t in new:
                _add_range(row, lo, hi, new[t])
        trans.append(row)
    return Dfa(trans, [d.accept[q] for q in order])


def minimize(d: Dfa) -> Dfa:
    """The minimal DFA of a trimmed DFA (Moore's partition refinement over range signatures)."""
    n = len(d)
    cls = [1 if a else 0 for a in d.accept]
    count = len(set(cls))
    while True:
        sigs: dict[tuple, int] = {}
        new = []
        for q in range(n):
            row: list[tuple[int, int, int]] = []
            for lo, hi, t in d.trans[q]:
                c = cls[t]
                if row and row[-1][2] == c and row[-1][1] + 1 == lo:
                    row[-1] = (row[-1][0], hi, c)
                else:
                    row.append((lo, hi, c))
            new.append(sigs.setdefault((cls[q], tuple(row)), len(sigs)))
        cls = new
        if len(sigs) == count:
            break
        count = len(sigs)
    order: dict[int, int] = {}
    for q in [d.start] + list(range(n)):
        order.setdefault(cls[q], len(order))
    trans: list[Trans] = [[] for _ in order]
    accept = [False] * len(order)
    done = set()
    for q in range(n):
        c = order[cls[q]]
        if c in done:
            continue
        done.add(c)
        accept[c] = d.accept[q]
        for lo, hi, t in d.trans[q]:
            _add_range(trans[c], lo, hi, order[cls[t]])
    return Dfa(trans, accept, 0)
