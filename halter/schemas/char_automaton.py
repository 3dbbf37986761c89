"""Deterministic automata over Unicode code points, for the set operations grammars lack.

A grammar can take unions but not complements or intersections. JSON Schema needs both:
``patternProperties`` splits keys into "matches these patterns and not those", and a ``pattern``
next to ``minLength``/``maxLength`` is an intersection. This module builds a ``Dfa`` from the
regex syntax tree of regex.py (``Literal``, ``CharClass``, ``Seq``, ``Alt``, ``Repeat``): a
Thompson NFA, then subset construction.

The alphabet is compressed: a DFA's *symbols* partition all code points into classes that no
transition tells apart (``\\p{L}`` is one symbol of a few hundred ranges, not 100,000 letters), and
transitions are per symbol. ``product`` runs several DFAs in lockstep over the common refinement
of their partitions; with a choice of accepting states it gives intersection, union, difference
and complement. ``minimize`` (Hopcroft's refinement, then merging symbols no state tells apart) and
``trim`` keep results small. Every construction stops with ``AutomatonTooLarge`` at ``limit``
states, so the callers can fall back to an approximation.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Callable, Sequence

from halter.grammar.ast import MAX_CODE_POINT, Alt, AnyChar, CharClass, Expr, Literal, Repeat, Seq, merge_ranges

DEFAULT_LIMIT = 2000
"""Most DFA (or product) states built before giving up."""

Ranges = tuple[tuple[int, int], ...]
EVERYTHING: Ranges = ((0, MAX_CODE_POINT),)


class AutomatonTooLarge(Exception):
    """A construction would exceed its state limit."""


@dataclass
class Dfa:
    """``symbols`` partition the code points; ``trans[q][symbol]`` is a state or -1 (reject)."""
    symbols: list[Ranges]
    trans: list[list[int]]
    accept: list[bool]
    start: int = 0

    def __len__(self) -> int:
        return len(self.trans)

    def symbol_of(self, cp: int) -> int:
        table = self.__dict__.get("_table")
        if table is None:
            pairs = sorted((lo, sym) for sym, rs in enumerate(self.symbols) for lo, _ in rs)
            table = self.__dict__["_table"] = ([lo for lo, _ in pairs], [sym for _, sym in pairs])
        return table[1][bisect.bisect_right(table[0], cp) - 1]

    def matches(self, text: str) -> bool:
        """Whether the whole of ``text`` is in the language."""
        q = self.start
        for ch in text:
            q = self.trans[q][self.symbol_of(ord(ch))]
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


def _sweep(edges: Sequence[tuple[int, int, object]]) -> list[tuple[int, int, frozenset]]:
    """Split overlapping (lo, hi, label) ranges into disjoint ranges with their label sets."""
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


def partition(labelled: Sequence[tuple[Ranges, object]]) -> list[tuple[Ranges, frozenset]]:
    """The coarsest partition of all code points that refines every labelled range set:
    each block with the labels of the sets containing it."""
    blocks: dict[frozenset, list[tuple[int, int]]] = {}
    edges = [(0, MAX_CODE_POINT, None)] + [(lo, hi, lab) for rs, lab in labelled for lo, hi in rs]
    for lo, hi, labels in _sweep(edges):
        rs = blocks.setdefault(labels, [])
        if rs and rs[-1][1] + 1 == lo:
            rs[-1] = (rs[-1][0], hi)
        else:
            rs.append((lo, hi))
    return [(tuple(rs), labels - {None}) for labels, rs in blocks.items()]


# ---------------------------------------------------------------------------------------------
# regex syntax tree -> NFA -> DFA

class _Nfa:
    def __init__(self, limit: int) -> None:
        self.chars: list[list[tuple[Ranges, int]]] = []
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
            ranges = tuple(e.code_point_ranges()) if isinstance(e, CharClass) else EVERYTHING
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


def from_expr(expr: Expr, limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA of a code-point syntax tree (whole-string match), trimmed of dead states."""
    nfa = _Nfa(limit * 20)
    s0 = nfa.new()
    final = nfa.build(expr, s0)
    classes = list(dict.fromkeys(rs for edges in nfa.chars for rs, _ in edges))
    blocks = partition([(rs, i) for i, rs in enumerate(classes)])
    symbols = [rs for rs, _ in blocks]
    of_class: dict[Ranges, list[int]] = {rs: [] for rs in classes}
    for sym, (_, labels) in enumerate(blocks):
        for i in labels:
            of_class[classes[i]].append(sym)
    moves: list[dict[int, list[int]]] = []       # NFA state -> symbol -> targets
    for edges in nfa.chars:
        m: dict[int, list[int]] = {}
        for rs, t in edges:
            for sym in of_class[rs]:
                m.setdefault(sym, []).append(t)
        moves.append(m)
    ids: dict[frozenset, int] = {}
    trans: list[list[int]] = []
    accept: list[bool] = []
    todo: list[frozenset] = []

    def state(members: frozenset) -> int:
        if members not in ids:
            if len(ids) >= limit:
                raise AutomatonTooLarge(f"more than {limit} DFA states")
            ids[members] = len(trans)
            trans.append([-1] * len(symbols))
            accept.append(final in members)
            todo.append(members)
        return ids[members]

    state(nfa.closure([s0]))
    while todo:
        members = todo.pop()
        row = trans[ids[members]]
        targets: dict[int, set[int]] = {}
        for m in members:
            for sym, ts in moves[m].items():
                targets.setdefault(sym, set()).update(ts)
        for sym, ts in targets.items():
            row[sym] = state(nfa.closure(ts))
    return trim(Dfa(symbols, trans, accept))


def literal_set(words: Sequence[str], limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA (a trie) of a finite set of strings."""
    chars = sorted({ord(c) for w in words for c in w})
    blocks = partition([(((c, c),), c) for c in chars])
    sym_of = {next(iter(labels)): i for i, (_, labels) in enumerate(blocks) if labels}
    symbols = [rs for rs, _ in blocks]
    trans: list[list[int]] = [[-1] * len(symbols)]
    accept = [False]
    for w in words:
        q = 0
        for ch in w:
            sym = sym_of[ord(ch)]
            if trans[q][sym] < 0:
                if len(trans) >= limit:
                    raise AutomatonTooLarge(f"more than {limit} trie states")
                trans[q][sym] = len(trans)
                trans.append([-1] * len(symbols))
                accept.append(False)
            q = trans[q][sym]
        accept[q] = True
    return Dfa(symbols, trans, accept)


def length_range_dfa(lo: int, hi: int | None) -> Dfa:
    """Strings of ``lo`` to ``hi`` code points (``hi=None``: at least ``lo``)."""
    top = hi if hi is not None else lo
    trans = [[i + 1 if i < top else (i if hi is None else -1)] for i in range(top + 1)]
    return Dfa([EVERYTHING], trans, [lo <= i for i in range(top + 1)])


# ---------------------------------------------------------------------------------------------
# products, trimming, minimizing

def product_states(dfas: Sequence[Dfa], limit: int = DEFAULT_LIMIT) -> tuple[Dfa, list[tuple[int, ...]]]:
    """The lockstep run of ``dfas`` (no state accepting yet) and each state's component states.

    A component that has rejected is ``-1`` in the tuple; every product state has a transition
    for every symbol, so any accepting condition (including negations) can be chosen later.
    """
    blocks = partition([(rs, (k, sym)) for k, d in enumerate(dfas) for sym, rs in enumerate(d.symbols)])
    symbols = [rs for rs, _ in blocks]
    parts_of = []
    for _, labels in blocks:
        comp = [0] * len(dfas)
        for k, sym in labels:
            comp[k] = sym
        parts_of.append(comp)
    start = tuple(d.start for d in dfas)
    ids = {start: 0}
    parts = [start]
    trans: list[list[int]] = []
    i = 0
    while i < len(parts):
        tup = parts[i]
        row = []
        for comp in parts_of:
            key = tuple(-1 if q < 0 else d.trans[q][s] for d, q, s in zip(dfas, tup, comp))
            if key not in ids:
                if len(parts) >= limit:
                    raise AutomatonTooLarge(f"more than {limit} product states")
                ids[key] = len(parts)
                parts.append(key)
            row.append(ids[key])
        trans.append(row)
        i += 1
    return Dfa(symbols, trans, [False] * len(parts)), parts


def product(dfas: Sequence[Dfa], accepting: Callable[[list[bool]], bool], limit: int = DEFAULT_LIMIT) -> Dfa:
    """The DFA accepting when ``accepting([component i accepts, ...])`` is true; trimmed."""
    d, parts = product_states(dfas, limit)
    flags = [accepting([q >= 0 and c.accept[q] for c, q in zip(dfas, tup)]) for tup in parts]
    return trim(replace(d, accept=flags))


def _reachable(d: Dfa) -> list[int]:
    seen = {d.start}
    todo = [d.start]
    while todo:
        for t in d.trans[todo.pop()]:
            if t >= 0 and t not in seen:
                seen.add(t)
                todo.append(t)
    return sorted(seen)


def trim(d: Dfa) -> Dfa:
    """Only the states reachable from the start that can still reach acceptance (renumbered)."""
    reach = _reachable(d)
    back: dict[int, set[int]] = {}
    for q in reach:
        for t in d.trans[q]:
            if t >= 0:
                back.setdefault(t, set()).add(q)
    live = {q for q in reach if d.accept[q]}
    todo = list(live)
    while todo:
        for p in back.get(todo.pop(), ()):
            if p not in live:
                live.add(p)
                todo.append(p)
    if d.start not in live:
        return Dfa([EVERYTHING], [[-1]], [False])
    order = [d.start] + [q for q in reach if q in live and q != d.start]
    new = {q: i for i, q in enumerate(order)}
    trans = [[new.get(t, -1) for t in d.trans[q]] for q in order]
    return Dfa(d.symbols, trans, [d.accept[q] for q in order])


def minimize(d: Dfa) -> Dfa:
    """The minimal DFA of a trimmed DFA (Hopcroft's partition refinement), with the symbols that
    no state tells apart merged."""
    n, nsym = len(d), len(d.symbols)
    dead = n                                  # the implicit rejecting state, made explicit
    rows = [[t if t >= 0 else dead for t in row] for row in d.trans] + [[dead] * nsym]
    inverse: list[dict[int, list[int]]] = [{} for _ in range(nsym)]
    for q, row in enumerate(rows):
        for sym, t in enumerate(row):
            inverse[sym].setdefault(t, []).append(q)
    acc = {q for q in range(n) if d.accept[q]}
    blocks: list[set[int]] = [b for b in (acc, set(range(n + 1)) - acc) if b]
    block_of = [0] * (n + 1)
    for b, members in enumerate(blocks):
        for q in members:
            block_of[q] = b
    work = {min(range(len(blocks)), key=lambda b: len(blocks[b]))} if len(blocks) == 2 else set()
    while work:
        a = work.pop()
        splitter = list(blocks[a])
        for sym in range(nsym):
            inv = inverse[sym]
            hit: dict[int, set[int]] = {}
            for t in splitter:
                for q in inv.get(t, ()):
                    hit.setdefault(block_of[q], set()).add(q)
            for b, part in hit.items():
                if len(part) == len(blocks[b]):
                    continue
                blocks[b] -= part
                blocks.append(part)
                nb = len(blocks) - 1
                for q in part:
                    block_of[q] = nb
                if b in work or len(part) <= len(blocks[b]):
                    work.add(nb)
                else:
                    work.add(b)
    order: dict[int, int] = {}
    for q in [d.start] + list(range(n)):
        order.setdefault(block_of[q], len(order))
    dead_block = block_of[dead]
    trans: list[list[int]] = [[] for _ in order]
    accept = [False] * len(order)
    for q in range(n):
        c = order[block_of[q]]
        if not trans[c]:
            accept[c] = d.accept[q]
            trans[c] = [-1 if block_of[t] == dead_block else order[block_of[t]] for t in rows[q]]
    return _merge_symbols(Dfa(d.symbols, trans, accept, 0))


def _merge_symbols(d: Dfa) -> Dfa:
    columns: dict[tuple, list[int]] = {}
    for sym in range(len(d.symbols)):
        columns.setdefault(tuple(row[sym] for row in d.trans), []).append(sym)
    if len(columns) == len(d.symbols):
        return d
    groups = list(columns.values())
    symbols = [tuple(merge_ranges(r for s in g for r in d.symbols[s])) for g in groups]
    trans = [[row[g[0]] for g in groups] for row in d.trans]
    return Dfa(symbols, trans, d.accept, d.start)
