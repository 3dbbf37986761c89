"""Number texts as finite automata: ``multipleOf`` (integer or decimal divisors), "not a multiple",
"not an integer", each intersected exactly with the digit-range grammar of the bounds.

A decimal divisor ``d = p / 10**k`` (``p`` a positive integer) divides ``x`` exactly when ``x * 10**k``
is an integer divisible by ``p``. Reading a decimal text ``-?I(.F)?`` left to right, that is a
finite automaton: the state is the remainder mod ``p`` of the digits read so far and how many
fraction digits (at most ``k``) have been read; fraction digits past the ``k``-th must be zeros. A
text is accepted when the remainder, scaled by the fraction digits still missing, is 0 mod ``p``.
"Not a multiple" is the same automaton with the other verdict, and "not an integer" is a
three-state automaton (a non-zero fraction digit was read).

The bounds already have an exact grammar (``numbers.number_range``/``integer_range``: literals,
classes, repeats, no rule references), so the result is their product: the bound grammar becomes a
DFA (``char_automaton.from_expr``), the product runs on (its state, factor states) pairs over the
characters of number texts, is minimised and written as right-linear rules ``{hint}-n{i}``. Exponent notation is never accepted here (its value
against the digit count of the mantissa is not regular), as for bounded numbers and integers.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from halter.grammar.ast import CharClass, Expr, Literal, RuleRef, alt
from halter.schemas.char_automaton import AutomatonTooLarge, from_expr
from halter.schemas.json_text import cat
from halter.schemas.rules import Rules

ALPHABET = "-+.eE0123456789"
MAX_STATES = 5000
"""Product states explored before giving up (the caller then reports ``multipleOf``)."""
MAX_FACTOR_STATES = 1000
"""Largest ``p * (k + 1)`` of one divisor automaton."""
MAX_RULES = 64
"""Largest minimised automaton written as rules (each state is a rule of up to ~12 branches):
divisibility by 100 needs 3 states, by 60 about 60, by 256 (beyond the limit) 66; the engine's build
time grows with them."""


class Factor(Protocol):
    """A deterministic automaton over number texts; ``step`` returns None for the dead state."""
    start: Any

    def step(self, state: Any, ch: str) -> Any: ...

    def accepts(self, state: Any) -> bool: ...


def decimal_parts(d: Any) -> tuple[int, int] | None:
    """``(p, k)`` with ``d == p / 10**k`` for a positive finite number ``d`` (None otherwise)."""
    if isinstance(d, bool) or not isinstance(d, (int, float)):
        return None
    x = Decimal(d) if isinstance(d, int) else Decimal(repr(d))
    if not x.is_finite() or x <= 0:
        return None
    sign, digits, exp = x.normalize().as_tuple()
    p = int("".join(map(str, digits)))
    if exp >= 0:
        return p * 10 ** exp, 0
    return p, -exp


@dataclass(frozen=True)
class Multiple:
    """Texts whose value is (``negated``: is not) a multiple of ``p / 10**k``; states
    ``(r, j)``: remainder ``r`` mod ``p`` so far, ``j`` fraction digits read (-1: in the integer
    part); ``"out"``: a non-zero digit past the ``k``-th fraction digit (never a multiple)."""
    p: int
    k: int
    negated: bool = False
    start: Any = (0, -1)

    def step(self, state: Any, ch: str) -> Any:
        if state == "out":
            return "out" if ch.isdigit() else None
        r, j = state
        if ch == "-":
            return state
        if ch == ".":
            return (r, 0) if j < 0 else None
        if not ch.isdigit():
            return None                      # exponent notation
        if j < self.k:
            return ((10 * r + int(ch)) % self.p, j if j < 0 else j + 1)
        if ch == "0":
            return state
        return "out" if self.negated else None

    def accepts(self, state: Any) -> bool:
        if state == "out":
            return True
        r, j = state
        ok = r * 10 ** (self.k - max(j, 0)) % self.p == 0
        return ok != self.negated


@dataclass(frozen=True)
class Fraction:
    """Texts with a non-zero fraction digit (numbers that are not integers, decimal notation)."""
    start: Any = "int"

    def step(self, state: Any, ch: str) -> Any:
        if ch in "eE+":
            return None
        if state == "int":
            return "zeros" if ch == "." else state
        if ch == ".":
            return None
        return "nonzero" if state == "nonzero" or ch != "0" else state

    def accepts(self, state: Any) -> bool:
        return state == "nonzero"


def multiple_factor(d: Any, negated: bool = False) -> Multiple | None:
    """The automaton for ``multipleOf: d`` (or its negation); None when ``d`` is too fine."""
    parts = decimal_parts(d)
    if parts is None or parts[0] * (parts[1] + 1) > MAX_FACTOR_STATES:
        return None
    return Multiple(parts[0], parts[1], negated)


_emitted: "weakref.WeakKeyDictionary[Rules, dict]" = weakref.WeakKeyDictionary()
"""Automata already written into a rule set, so equal number schemas share their rules."""


class TooLarge(Exception):
    """The product automaton exceeds ``MAX_STATES`` (or ``MAX_RULES`` once minimised)."""


def intersect(base: Expr, factors: list[Factor], rules: Rules, hint: str) -> Expr | None:
    """A grammar for the texts of ``base`` that every factor accepts (None: no text).

    Raises ``TooLarge`` when the product automaton has more than ``MAX_STATES`` states, or more
    than ``MAX_RULES`` once minimised."""
    cache = _emitted.setdefault(rules, {})
    memo = (base, tuple(factors))
    if memo in cache:
        if cache[memo] is TooLarge:
            raise TooLarge()
        return cache[memo]
    try:
        bound = from_expr(base, limit=MAX_STATES)      # the bound grammar's own DFA
    except AutomatonTooLarge:
        cache[memo] = TooLarge
        raise TooLarge() from None
    step_of = {ch: bound.symbol_of(ord(ch)) for ch in ALPHABET}
    s0 = (bound.start, tuple(f.start for f in factors))
    index = {s0: 0}
    order = [s0]
    trans: list[dict[str, int]] = []
    accept: list[bool] = []
    i = 0
    while i < len(order):
        q, fstates = order[i]
        accept.append(bound.accept[q] and all(f.accepts(s) for f, s in zip(factors, fstates)))
        out: dict[str, int] = {}
        for ch in ALPHABET:
            nxt = bound.trans[q][step_of[ch]]
            if nxt < 0:
                continue
            fs = tuple(f.step(s, ch) for f, s in zip(factors, fstates))
            if any(s is None for s in fs):
                continue
            key = (nxt, fs)
            if key not in index:
                if len(order) >= MAX_STATES:
                    cache[memo] = TooLarge
                    raise TooLarge()
                index[key] = len(order)
                order.append(key)
            out[ch] = index[key]
        trans.append(out)
        i += 1
    m_trans, m_accept = _minimise(trans, accept)
    if len(m_trans) > MAX_RULES:
        cache[memo] = TooLarge
        raise TooLarge()
    cache[memo] = _emit(m_trans, m_accept, rules, hint)
    return cache[memo]


def _minimise(trans: list[dict[str, int]], accept: list[bool]) -> tuple[list[dict[str, int]], list[bool]]:
    """Drop states that cannot reach acceptance, then merge equivalent states (Moore)."""
    n = len(trans)
    back: list[set[int]] = [set() for _ in range(n)]
    for s, out in enumerate(trans):
        for t in out.values():
            back[t].add(s)
    live = {s for s in range(n) if accept[s]}
    todo = list(live)
    while todo:
        for s in back[todo.pop()]:
            if s not in live:
                live.add(s)
                todo.append(s)
    if 0 not in live:
        return [], []
    block = {s: int(accept[s]) for s in live}
    states = sorted(live)
    edges = {s: [(ch, t) for ch, t in sorted(trans[s].items()) if t in live] for s in states}   # (once, not per round)
    while True:
        sigs: dict[tuple, int] = {}
        new = {}
        for s in states:
            sig = (block[s], tuple([(ch, block[t]) for ch, t in edges[s]]))
            new[s] = sigs.setdefault(sig, len(sigs))
        if len(sigs) == len(set(block.values())):
            break
        block = new
    block = new
    # renumber so that the start state's block is 0
    ids: dict[int, int] = {}
    for s in [0, *sorted(live)]:
        ids.setdefault(block[s], len(ids))
    m_trans: list[dict[str, int]] = [{} for _ in ids]
    m_accept = [False] * len(ids)
    for s in live:
        b = ids[block[s]]
        m_accept[b] = accept[s]
        m_trans[b] = {ch: ids[block[t]] for ch, t in trans[s].items() if t in live}
    return m_trans, m_accept


def _emit(trans: list[dict[str, int]], accept: list[bool], rules: Rules, hint: str) -> Expr | None:
    if not trans:
        return None
    names = [rules.reserve(f"{hint}-n{i}") for i in range(len(trans))]
    for i, out in enumerate(trans):
        by_target: dict[int, list[str]] = {}
        for ch, t in out.items():
            by_target.setdefault(t, []).append(ch)
        opts: list[Expr] = [cat(_chars(chs), RuleRef(names[t])) for t, chs in sorted(by_target.items())]
        if accept[i]:
            opts.append(Literal(""))
        rules.define(names[i], alt(*opts))
    return RuleRef(names[0])


def _chars(chs: list[str]) -> Expr:
    if len(chs) == 1:
        return Literal(chs[0])
    return CharClass(tuple((ord(c), ord(c)) for c in sorted(chs, key=ord)))
