"""The grammar syntax tree: what a parsed GBNF grammar is, and how it prints back as GBNF.

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

@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple["Expr", ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((Seq, self.items))
            object.__setattr__(self, "_hash", h)
        return h

    def __reduce__(self):
        return Seq, (self.items,)


@dataclass(frozen=True, slots=True)
class Alt:
    options: tuple["Expr", ...]
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash((Alt, self.options))
            object.__setattr__(self, "_hash", h)
        return h

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
        h = self._hash
        if h is None:
            h = hash((Repeat, self.expr, self.min, self.max))
            object.__setattr__(self, "_hash", h)
        return h

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


# ---------------------------------------------------------------------------------------------
# Printing as normalized GBNF

_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\\"): "\\\\"}


def _escape_char(cp: int, specials: str) -> str:
    if cp in _ESCAPES:
        return _ESCAPES[cp]
    ch = chr(cp)
    if ch in specials:
        return "\\" + ch
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02X}"
    if 0xD800 <= cp <= 0xDFFF or not ch.isprintable() and cp > 0x7F:
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return ch


_GBNF_MAX_REPEAT = 2000       # llama.cpp's MAX_REPETITION_THRESHOLD (see gbnf_parser.py)


def format_expr(expr: Expr, parent_prec: int = 0) -> str:
    """GBNF text for ``expr``; precedence 0 = alternation, 1 = sequence, 2 = atom.

    (Repetitions are printed as written; ``format_grammar`` also keeps them within llama.cpp's
    limits.)"""
    return _Printer({}, "").expr(expr, parent_prec)


class _Printer:
    """Prints rules as GBNF that llama.cpp (and halter) read back as the same grammar.

    Nested repetitions get parentheses (``("a"?)?``, never ``"a"??``); the repeated item of an
    empty literal too (``("")*``). A repetition llama.cpp would refuse or read differently (a
    count above 2000, or more than 2000 rule copies for the item) is written with auxiliary
    rules named ``<rule>-x<k>`` instead: the same language in GBNF llama.cpp takes.
    """

    def __init__(self, rules: dict[str, Expr] | set[str], rule: str) -> None:
        self.names = rules if isinstance(rules, set) else set(rules)
        self.rule = rule
        self.extra: list[tuple[str, str]] = []
        self._k = 0

    def aux(self, body: str) -> str:
        while True:
            self._k += 1
            name = f"{self.rule}-x{self._k}"
            if name not in self.names:
                break
        self.names.add(name)
        self.extra.append((name, body))
        return name

    def expr(self, expr: Expr, parent_prec: int = 0) -> str:
        if isinstance(expr, Literal):
            return '"' + "".join(_escape_char(ord(c), '"') for c in expr.text) + '"'
        if isinstance(expr, CharClass):
            if not expr.ranges:         # GBNF's "[]" and "[^]" are the empty string: spell them out
                return "[\\x00-\\U0010FFFF]" if expr.negated else "[^\\x00-\\U0010FFFF]"
            body = []
            for lo, hi in expr.ranges:
                body.append(_escape_class_char(lo, first=not body and not expr.negated))
                if hi != lo:
                    body.append("-" + _escape_class_char(hi, first=False))
            return "[" + ("^" if expr.negated else "") + "".join(body) + "]"
        if isinstance(expr, AnyChar):
            return "."
        if isinstance(expr, RuleRef):
            return expr.name
        if isinstance(expr, TokenRef):
            inner = f"<[{expr.token_id}]>" if expr.token_id is not None else expr.text
            return ("!" if expr.negated else "") + inner
        if isinstance(expr, Seq):
            text = " ".join(self.expr(i, 1) for i in expr.items)
            return f"({text})" if parent_prec > 1 else text
        if isinstance(expr, Alt):
            text = " | ".join(self.expr(o, 1) for o in expr.options)
            return f"({text})" if parent_prec > 0 else text
        if isinstance(expr, Repeat):
            return self.repeat(expr)
        raise TypeError(f"not a grammar expression: {expr!r}")

    def repeat(self, rep: Repeat) -> str:
        inner, lo, hi = rep.expr, rep.min, rep.max
        wrap = isinstance(inner, Repeat) or (isinstance(inner, Literal) and not inner.text)
        grouped = wrap or isinstance(inner, (Seq, Alt))     # printed in ( ): a rule of llama.cpp's
        n_prev = 1 + _symbols(inner) if grouped else 1
        total = hi if hi is not None and hi > 0 else (lo if lo > 0 else 1)
        if n_prev * total > _GBNF_MAX_REPEAT and n_prev > 1:
            item = self.aux(self.expr(inner, 0))
        elif wrap:
            item = "(" + self.expr(inner, 0) + ")"
        else:
            item = self.expr(inner, 2)
        return self.counted(item, lo, hi)

    def counted(self, item: str, lo: int, hi: int | None) -> str:
        """``item{lo,hi}`` for an item llama.cpp counts as one rule, any counts."""
        m = _GBNF_MAX_REPEAT
        if lo <= m and (hi is None or hi <= m):
            return item + _suffix(lo, hi)
        parts = []
        if lo > 0:
            parts.append(self.exactly(item, lo))
        if hi is None:
            parts.append(item + "*")
        elif hi > lo:
            parts.append(self.at_most(item, hi - lo))
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"

    def exactly(self, item: str, n: int) -> str:
        m = _GBNF_MAX_REPEAT
        if n <= m:
            return item + _suffix(n, n)
        q, r = divmod(n, m)
        block = self.aux(item + _suffix(m, m))
        text = self.exactly(block, q)
        return text if r == 0 else text + " " + item + _suffix(r, r)

    def at_most(self, item: str, n: int) -> str:
        m = _GBNF_MAX_REPEAT
        if n <= m:
            return item + _suffix(0, n)
        q, r = divmod(n, m)
        block = self.aux(item + _suffix(0, m))
        text = self.at_most(block, q)
        return text if r == 0 else text + " " + item + _suffix(0, r)


def _suffix(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


def _escape_class_char(cp: int, first: bool) -> str:
    """A class character; GBNF has no escape for ``^``, so a leading one is written ``\\x5E``."""
    if cp == 0x5E:
        return "\\x5E" if first else "^"
    return _escape_char(cp, "]-[")


def _symbols(expr: Expr) -> int:
    """An upper bound of the symbols llama.cpp makes while reading ``expr`` as printed inside a
    group: groups, repetition rules, and rule names (counted as if first mentioned there)."""
    count, stack = 0, [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, RuleRef):
            count += 1
        elif isinstance(e, (Seq, Alt)):
            items = e.items if isinstance(e, Seq) else e.options
            count += 1
            stack.extend(items)
        elif isinstance(e, Repeat):
            count += 2 + (1 if e.max is None else e.max - e.min)
            stack.append(e.expr)
    return count


def format_grammar(rules: dict[str, Expr]) -> str:
    """Normalized GBNF text for a whole grammar, one rule per line, in definition order.

    llama.cpp reads the text as the same grammar, and so does ``Grammar.from_gbnf`` (printing
    it again gives the same text)."""
    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))       # printing recurses along nesting (<= limits)
    try:
        out = []
        taken = set(rules)
        for name, expr in rules.items():
            p = _Printer(taken, name)
            out.append(f"{name} ::= {p.expr(expr)}\n")
            out.extend(f"{n} ::= {body}\n" for n, body in p.extra)
        return "".join(out)
    finally:
        sys.setrecursionlimit(limit)


@dataclass
class RuleSet:
    """Rules in definition order, with where each was defined (for error messages)."""
    rules: dict[str, Expr] = field(default_factory=dict)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
