"""The grammar syntax tree: what a parsed GBNF grammar is (printed back as GBNF by ``gbnf_format``).

Every grammar source (GBNF text, JSON Schema, regex) ends up as a dict of rule name -> ``Expr``.
Code points are plain ints; character classes are sorted, merged, inclusive ranges.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Union

MAX_CODE_POINT = 0x10FFFF


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal string (may be empty: matches nothing, i.e. epsilon)."""
    text: str

    def __reduce__(self):               # (pickled as a constructor call: a grammar cache file
        return Literal, (self.text,)    # holds thousands of these, and the default is slow)


@dataclass(frozen=True, slots=True)
class CharClass:
    """A set of code points: ``ranges`` are inclusive (lo, hi) pairs; ``negated`` means the complement."""
    ranges: tuple[tuple[int, int], ...]
    negated: bool = False

    def __reduce__(self):
        return CharClass, (self.ranges, self.negated)

    def code_point_ranges(self) -> list[tuple[int, int]]:
        """The matched code points as sorted, disjoint, inclusive ranges (negation applied)."""
        merged = merge_ranges(self.ranges)
        if not self.negated:
            return merged
        out, nxt = [], 0
        for lo, hi in merged:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT))
        return out


@dataclass(frozen=True, slots=True)
class AnyChar:
    """``.``: any single Unicode character."""

    def __reduce__(self):
        return AnyChar, ()


@dataclass(frozen=True, slots=True)
class RuleRef:
    """A reference to another rule; ``line``/``column`` locate it in the source for errors."""
    name: str
    line: int = 0
    column: int = 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RuleRef) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("RuleRef", self.name))

    def __reduce__(self):
        return RuleRef, (self.name, self.line, self.column)


@dataclass(frozen=True, slots=True)
class TokenRef:
    """A token match: ``<[123]>`` (``token_id``) or ``<text>`` (``text``); ``negated`` for ``!<...>``.

    Token references only mean something once the grammar is compiled for a vocabulary.
    """
    token_id: int | None = None
    text: str | None = None
    negated: bool = False

    def __reduce__(self):
        return TokenRef, (self.token_id, self.text, self.negated)


# Seq, Alt and Repeat keep their hash once computed: a rule body is a tree, and grammar builds
# use bodies and their parts as dict keys over and over (memos of shared parts, repeats split,
# shared helper rules), each hash otherwise walking the whole subtree again. The cached value is
# left out of equality, repr and pickles (string hashes differ between processes).

def _keep_hash(node: Any, key: tuple) -> int:
    """``hash(key)``, kept on the frozen ``node`` for the next call."""
    h = hash(key)
    object.__setattr__(node, "_hash", h)
    return h


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple["Expr", ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash if self._hash is not None else _keep_hash(self, (Seq, self.items))

    def __reduce__(self):
        return Seq, (self.items,)


@dataclass(frozen=True, slots=True)
class Alt:
    options: tuple["Expr", ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash if self._hash is not None else _keep_hash(self, (Alt, self.options))

    def __reduce__(self):
        return Alt, (self.options,)


@dataclass(frozen=True, slots=True)
class Repeat:
    """``expr{min,max}``; ``max=None`` means unbounded (``*`` is {0,}, ``+`` is {1,}, ``?`` is {0,1})."""
    expr: "Expr"
    min: int
    max: int | None
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        return self._hash if self._hash is not None else _keep_hash(self, (Repeat, self.expr, self.min, self.max))

    def __reduce__(self):
        return Repeat, (self.expr, self.min, self.max)


Expr = Union[Literal, CharClass, AnyChar, RuleRef, TokenRef, Seq, Alt, Repeat]


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort and merge overlapping or adjacent inclusive ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def seq(*items: Expr) -> Expr:
    """A sequence, flattened; a single item stands for itself."""
    flat: list[Expr] = []
    for it in items:
        if isinstance(it, Seq):
            flat.extend(it.items)
        elif isinstance(it, Literal) and it.text == "" and items:
            continue
        else:
            flat.append(it)
    if not flat:
        return Literal("")
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options: Expr) -> Expr:
    """An alternation, flattened; a single option stands for itself."""
    flat: list[Expr] = []
    for o in options:
        flat.extend(o.options if isinstance(o, Alt) else (o,))
    return flat[0] if len(flat) == 1 else Alt(tuple(flat))


def children(expr: Expr) -> tuple[Expr, ...]:
    """The sub-expressions directly inside ``expr`` (none for a literal, class, reference or token)."""
    if isinstance(expr, Seq):
        return expr.items
    if isinstance(expr, Alt):
        return expr.options
    if isinstance(expr, Repeat):
        return (expr.expr,)
    return ()


def rule_refs(expr: Expr, distinct: bool = False) -> Iterable[RuleRef]:
    """Every rule reference inside ``expr`` (iterative: any nesting depth), once per occurrence.

    ``distinct``: a subexpression that occurs several times as one object (a long enum's shared
    string tails) is looked into once, for callers that only need which rules are referenced."""
    stack = [expr]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if isinstance(e, RuleRef):
            yield e
            continue
        if distinct and isinstance(e, (Seq, Alt)):
            if id(e) in seen:
                continue
            seen.add(id(e))
        if isinstance(e, Seq):
            stack.extend(reversed(e.items))
        elif isinstance(e, Alt):
            stack.extend(reversed(e.options))
        elif isinstance(e, Repeat):
            stack.append(e.expr)


def contains(expr: Any, pred: Callable[[Any], bool]) -> bool:
    """Does ``expr`` or any sub-expression satisfy ``pred``? (Leaves other than these nodes too.)
    A subexpression occurring several times as one object is looked at once."""
    stack = [expr]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if pred(e):
            return True
        if isinstance(e, (Seq, Alt)):
            if id(e) in seen:
                continue
            seen.add(id(e))
        if isinstance(e, Seq):
            stack.extend(e.items)
        elif isinstance(e, Alt):
            stack.extend(e.options)
        elif isinstance(e, Repeat):
            stack.append(e.expr)
    return False


def has_token_refs(expr: Expr) -> bool:
    return contains(expr, lambda e: isinstance(e, TokenRef))


@dataclass
class RuleSet:
    """Rules in definition order, with where each was defined (for error messages)."""
    rules: dict[str, Expr] = field(default_factory=dict)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
