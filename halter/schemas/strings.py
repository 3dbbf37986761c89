"""String schemas: ``minLength``/``maxLength``, ``pattern`` (matched anywhere unless anchored),
``format``.

A single pattern or format becomes its regex tree spelled as JSON text. Several of them at once, or
one with a length bound that does not simply fit its repeat, are intersected as automata
(char_automaton.py: pattern DFAs and a length counter run in lockstep) and written back as rules.
"""
from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

from halter.grammar.ast import MAX_CODE_POINT, Alt, CharClass, Expr, Literal, Repeat, Seq, alt
from halter.schemas.automaton_grammar import dfa_to_expr
from halter.schemas.char_automaton import (AutomatonTooLarge, Dfa, from_expr, length_range_dfa, literal_set,
                                           minimize, product)
from halter.schemas.formats import APPROXIMATE_FORMATS, UNCHECKED_FORMATS
from halter.schemas.json_text import JsonText, cat
from halter.schemas.objects import key_complement
from halter.schemas.pattern_rules import spelled_with_rules
from halter.schemas.regex import RegexError, UnsupportedRegexError, regex_to_expr

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

ANY_CHAR = CharClass(((0, MAX_CODE_POINT),))
MAX_LENGTH_BRANCHES = 16


def length_range(expr: Expr) -> tuple[int, int | None]:
    """Shortest and longest string (in code points) a code-point expression matches."""
    if isinstance(expr, Literal):
        return len(expr.text), len(expr.text)
    if isinstance(expr, CharClass):
        return 1, 1
    if isinstance(expr, Seq):
        lo, hi = 0, 0
        for i in expr.items:
            a, b = length_range(i)
            lo += a
            hi = None if hi is None or b is None else hi + b
        return lo, hi
    if isinstance(expr, Alt):
        rs = [length_range(o) for o in expr.options]
        return min(r[0] for r in rs), (None if any(r[1] is None for r in rs) else max(r[1] for r in rs))
    if isinstance(expr, Repeat):
        a, b = length_range(expr.expr)
        hi = None if expr.max is None or b is None else b * expr.max
        return a * expr.min, hi
    return 0, None


def to_python_regex(expr: Expr) -> str:
    """A Python regex for a code-point expression (used to test keys against patterns)."""
    if isinstance(expr, Literal):
        return re.escape(expr.text)
    if isinstance(expr, CharClass):
        ranges = expr.code_point_ranges()
        if not ranges:
            return "(?!)"
        return "[" + "".join(re.escape(chr(a)) + ("-" + re.escape(chr(b)) if b != a else "") for a, b in ranges) + "]"
    if isinstance(expr, Seq):
        return "".join(f"(?:{to_python_regex(i)})" for i in expr.items)
    if isinstance(expr, Alt):
        return "|".join(f"(?:{to_python_regex(o)})" for o in expr.options)
    if isinstance(expr, Repeat):
        return f"(?:{to_python_regex(expr.expr)}){{{expr.min},{'' if expr.max is None else expr.max}}}"
    raise TypeError(f"cannot translate {expr!r}")


class StringBuilder:
    def __init__(self, js: JsonText, conv: "Converter") -> None:
        self.js = js
        self.conv = conv
        self._compiled: dict[str, Expr] = {}
        self._dfas: dict[tuple, Dfa | None] = {}
        self._exact: dict[tuple, Expr | None] = {}

    def pattern_expr(self, pattern: str, ptr: str, anchored: bool = False) -> Expr | None:
        """The code-point expression of a schema pattern (unanchored: matches anywhere)."""
        key = ("A" if anchored else "U") + pattern
        if key not in self._compiled:
            try:
                self._compiled[key] = regex_to_expr(pattern, anchored=anchored, any_char=ANY_CHAR, pointer="#" + ptr)
            except UnsupportedRegexError as e:
                self.conv.unsupported("pattern", ptr, e.message)
                self._compiled[key] = None
            except RegexError as e:
                from halter.errors import SchemaError
                raise SchemaError(e.message, "#" + ptr, "pattern") from None
        return self._compiled[key]

    def expr_dfa(self, expr: Expr) -> Dfa | None:
        """The minimal DFA of a code-point expression; None when it would be too large."""
        if expr not in self._dfas:
            try:
                self._dfas[expr] = minimize(from_expr(expr))
            except AutomatonTooLarge:
                self._dfas[expr] = None
        return self._dfas[expr]

    def pattern_dfa(self, pattern: str, ptr: str) -> Dfa | None:
        """The DFA of the strings in which ``pattern`` finds a match; None if unsupported/too large."""
        expr = self.pattern_expr(pattern, ptr)
        return None if expr is None else self.expr_dfa(expr)

    def exact_string(self, exprs: list[Expr], lo: int, hi: int | None,
                     excluded: tuple[str, ...] = ()) -> Expr | None | bool:
        """A quoted string matching every one of ``exprs`` with lo..hi code points, other than
        ``excluded``. None when no string does; False when the automaton would be too large.
        """
        key = (tuple(exprs), lo, hi, excluded)
        if key not in self._exact:
            self._exact[key] = False
            dfas = [self.expr_dfa(e) for e in exprs]
            if any(d is None for d in dfas):
                return False
            if lo > 0 or hi is not None or not dfas:
                dfas.append(length_range_dfa(lo, hi))
            try:
                if excluded:
                    dfas.append(literal_set(excluded).complement())
                both = dfas[0] if len(dfas) == 1 else product(dfas, all)
                body = dfa_to_expr(both, self.js, "str", Literal('"'))
            except AutomatonTooLarge:
                return False
            self._exact[key] = None if body is None else cat(Literal('"'), body)
        return self._exact[key]

    def search(self, pattern: str, text: str, ptr: str) -> bool:
        expr = self.pattern_expr(pattern, ptr)
        return expr is None or self._matches(expr, text)

    def fits(self, s: dict, text: str, ptr: str) -> bool:
        """Whether the string ``text`` satisfies the patterns and ``format`` of ``s`` (as the
        grammar reads them; True for what it cannot check)."""
        patterns = [p for p in [s.get("pattern"), *s.get("x-halter-patterns", [])] if isinstance(p, str)]
        if not all(self.search(p, text, ptr) for p in patterns):
            return False
        fmt = s.get("format")
        regex = self.conv.formats.get(fmt, APPROXIMATE_FORMATS.get(fmt)) if isinstance(fmt, str) else None
        if regex is None:
            return True
        expr = self.pattern_expr(regex, ptr, anchored=True)
        return expr is None or self._matches(expr, text)

    def _matches(self, expr: Expr, text: str) -> bool:
        dfa = self.expr_dfa(expr)
        if dfa is not None:
            return dfa.matches(text)
        return re.fullmatch(to_python_regex(expr), text, re.S) is not None

    def _too_large(self, expr: Expr) -> bool:
        """Whether a pattern must be spelled with rules (pattern_rules.py): the converter was
        asked to (its grammar failed with ``RuleTooComplex``), or the pattern is unanchored and
        its own DFA is past the automaton limit (``.*a.{0,12}b``)."""
        if self.conv.split_patterns:
            return True
        filler = Repeat(ANY_CHAR, 0, None)
        options = expr.options if isinstance(expr, Alt) else (expr,)
        return any(isinstance(o, Seq) and o.items[0] == filler for o in options) and self.expr_dfa(expr) is None

    def build(self, s: dict, ptr: str) -> Expr | None:
        js = self.js
        lo = int(s.get("minLength", 0))
        hi = s.get("maxLength")
        hi = None if hi is None else int(hi)
        if hi is not None and lo > hi:
            return None
        excluded = tuple(s.get("x-halter-not-strings") or ())
        if excluded and lo == 0 and hi is None and not s.get("format") and not s.get("pattern"):
            return key_complement(js, list(excluded))
        constraints: list[tuple[str, Expr]] = []
        fmt = s.get("format")
        if isinstance(fmt, str):
            formats = self.conv.formats
            if fmt in formats:
                constraints.append(("format", self.pattern_expr(formats[fmt], ptr, anchored=True)))
            elif fmt in APPROXIMATE_FORMATS:
                self.conv.unsupported("format", ptr, f"format {fmt!r} is only checked as a superset")
                constraints.append(("format", self.pattern_expr(APPROXIMATE_FORMATS[fmt], ptr, anchored=True)))
            elif fmt in UNCHECKED_FORMATS:
                self.conv.unsupported("format", ptr, f"format {fmt!r} is not checked (any string would be accepted)")
        patterns = [p for p in [s.get("pattern"), *s.get("x-halter-patterns", [])] if isinstance(p, str)]
        for p in dict.fromkeys(patterns):
            e = self.pattern_expr(p, ptr)
            if e is not None:
                constraints.append(("pattern", e))
        for _, e in constraints:     # bounds no string of the format/pattern can meet: before any automaton
            a, b = length_range(e)
            if (b is not None and lo > b) or (hi is not None and hi < a):
                return None
        if excluded:     # "not these strings" next to a length, pattern or format
            exact = self.exact_string([e for _, e in constraints], lo, hi, excluded)
            if exact is not False:
                return exact
            self.conv.unsupported("not", ptr, "excluding strings next to length, pattern or format "
                                  "needs too large an automaton")
        if not constraints:
            return js.string(lo, hi)
        kw, expr = constraints[0]
        a, b = length_range(expr)
        fits = not (a < lo or (hi is not None and (b is None or b > hi)))
        fitted = None if fits or len(constraints) > 1 else _fit_length(expr, lo, hi)
        if len(constraints) > 1 or not (fits or fitted is not None):
            exact = self.exact_string([e for _, e in constraints], lo, hi)
            if exact is not False:
                return exact
        if len(constraints) > 1:
            self.conv.unsupported(constraints[1][0], ptr, "two string constraints (pattern/format) at once "
                                  "whose intersection automaton is too large")
        if not fits:
            if fitted is None:
                self.conv.unsupported("maxLength" if hi is not None else "minLength", ptr,
                                      f"a length bound together with {kw}: the automaton is too large")
            else:
                expr = fitted
        if kw == "pattern" and self._too_large(expr):
            return cat(Literal('"'), spelled_with_rules(js, expr, ANY_CHAR, self.conv.hint(ptr)), Literal('"'))
        body = js.encode_expr(expr)
        if kw == "format" and isinstance(fmt, str):
            # one shared rule per format, closing quote included: the rule can then only end right
            # after a '"', not after any character (every token would escape it, to be resolved
            # against the caller at run time)
            return cat(Literal('"'), js.rules.add(f"format-{fmt}", cat(body, Literal('"'))))
        return cat(Literal('"'), body, Literal('"'))


def _fit_length(expr: Expr, lo: int, hi: int | None) -> Expr | None:
    """``expr`` restricted to lengths lo..hi when that is simple: one repeat of single characters
    among parts of fixed length, or alternations of them (a branch per combination of lengths).

    Spelled this way a bound like ``maxLength: 32767`` stays a counted repeat, where an automaton
    would need a state per length.
    """
    items = list(expr.items) if isinstance(expr, Seq) else [expr]
    reps = [i for i, it in enumerate(items) if isinstance(it, Repeat) and length_range(it.expr) == (1, 1)]
    if len(reps) != 1:
        return None
    choices: list[list[tuple[int, Expr]]] = []
    for i, it in enumerate(items):
        a, b = length_range(it)
        if i == reps[0] or a == b:
            choices.append([(a if i != reps[0] else 0, it)])
        elif isinstance(it, Alt) and all(len(set(length_range(o))) == 1 for o in it.options):
            by_length: dict[int, list[Expr]] = {}
            for o in it.options:
                by_length.setdefault(length_range(o)[0], []).append(o)
            choices.append([(n, alt(*os)) for n, os in sorted(by_length.items())])
        else:
            return None
    combos = list(itertools.product(*choices))
    if len(combos) > MAX_LENGTH_BRANCHES:
        return None
    r: Repeat = items[reps[0]]
    branches = []
    for combo in combos:
        fixed = sum(n for n, _ in combo)
        new_min = max(r.min, lo - fixed)
        new_max = r.max if hi is None else (hi - fixed if r.max is None else min(r.max, hi - fixed))
        if new_max is not None and new_max < new_min:
            continue
        parts = [Repeat(r.expr, new_min, new_max) if k == reps[0] else e for k, (_, e) in enumerate(combo)]
        branches.append(Seq(tuple(parts)) if len(parts) > 1 else parts[0])
    return alt(*branches) if branches else None
