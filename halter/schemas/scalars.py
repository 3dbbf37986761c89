"""Scalar schemas: ``enum``/``const`` literals and the numeric keywords (bounds, ``multipleOf``).

Each function takes the ``Converter`` (for its rules, JSON text helpers and the strict/lenient
``unsupported`` hook) and one flat, merged schema.
"""
from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction as Ratio
from typing import TYPE_CHECKING, Any

from halter.errors import SchemaError
from halter.limits import bounded_recursion, check as check_limit
from halter.grammar.ast import CharClass, Expr, Literal, Repeat, alt
from halter.schemas import merge as merging
from halter.schemas.json_text import cat
from halter.schemas.decimal_dfa import Fraction, Multiple, TooLarge, intersect, multiple_factor
from halter.schemas.json_text import DIGIT, NEVER, NONZERO
from halter.schemas.numbers import ZERO_FRACTION, decimal_bounds, integer_bounds, integer_range, number_range
from halter.schemas.refs import DEFAULT_BASE
from halter.schemas.string_set import string_set

if TYPE_CHECKING:
    from halter.schemas.converter import Converter


def values_grammar(conv: "Converter", s: dict, ptr: str) -> Expr | None:
    """``enum``/``const``: the listed values that the sibling keywords also accept."""
    values = [s["const"]] if "const" in s else list(s["enum"])
    rest = {k: v for k, v in s.items() if k not in ("const", "enum")}
    if "const" in s and "enum" in s:
        values = [v for v in values if any(merging._canon(v) == merging._canon(e) for e in s["enum"])]
    excluded = set(s.get("x-halter-not-strings", ()))
    values = [v for v in values if not (isinstance(v, str) and v in excluded)]
    if s.get("x-halter-fraction"):
        values = [v for v in values if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                            and float(v).is_integer())]
    for d in s.get("x-halter-multiples", ()):        # (multipleOf says nothing of non-numbers)
        values = [v for v in values if not _is_number(v) or _is_multiple(v, d)]
    for d in s.get("x-halter-not-multiples", ()):
        values = [v for v in values if not _is_multiple(v, d)]
    # strings: patterns (ECMAScript, all of them) and formats as the string builder reads them
    values = [v for v in values if not isinstance(v, str) or conv.strings.fits(rest, v, ptr)]
    rest = {k: v for k, v in rest.items() if k not in ("pattern", "format")}
    check = conv.validator.evolve(schema=merging.for_validator(rest))
    kept = []
    for v in values:
        try:
            with bounded_recursion():
                ok = check.is_valid(v)
        except Exception:  # noqa: BLE001 - a sibling the validator cannot run: keep the value
            ok = True
        if ok:
            kept.append(v)
    if len(kept) <= ENUM_CHUNK:
        opts = [literal(conv, v, ptr) for v in kept]
        return conv.rules.add(conv.hint(ptr), alt(*opts)) if opts else None
    # a long enum: a rule per chunk of values, so that each rule's automaton stays small and the
    # work grows linearly with the enum
    check_limit("enum_values", len(kept), where="#" + ptr, what="enum size")
    # strings: sorted, in rules of up to STRING_CHUNK_COST characters, each a shared-suffix tree
    # (string_set.py) that the engine builds in time linear in its characters
    strings = sorted(set(v for v in kept if isinstance(v, str)))
    others = [v for v in kept if not isinstance(v, str)]
    parts = []
    start, cost = 0, 0
    for i, v in enumerate(strings):
        cost += _string_cost(v)
        if cost >= STRING_CHUNK_COST or i == len(strings) - 1:
            parts.append(conv.rules.add(conv.hint(ptr) + "-strings", string_set(conv.js, strings[start:i + 1])))
            start, cost = i + 1, 0
    for i in range(0, len(others), ENUM_CHUNK):
        chunk = [literal(conv, v, ptr) for v in others[i:i + ENUM_CHUNK]]
        parts.append(conv.rules.add(conv.hint(ptr) + "-part", alt(*chunk)))
    return conv.rules.add(conv.hint(ptr), alt(*parts))


def _string_cost(v: str) -> int:
    """Roughly the automaton states ``v`` adds: a character, and ~8 for one spelled with escapes."""
    return len(v) + 2 + 8 * sum(1 for ch in v if not (" " <= ch < "\x7f") or ch in '"\\/')


ENUM_CHUNK = 128
"""Values (other than strings) per rule of a long ``enum``."""
STRING_CHUNK_COST = 20_000
"""Characters (``_string_cost``) of the strings per rule of a long ``enum``: each rule's automaton
stays well below the engine's per-rule state limit."""


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_multiple(v: Any, d: Any) -> bool:
    """Whether the JSON value ``v`` is a number and an exact multiple of ``d`` (decimal arithmetic)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    if isinstance(v, float) and not math.isfinite(v):
        return False
    return (Ratio(repr(v)) / Ratio(repr(d))).denominator == 1


def literal(conv: "Converter", v: Any, ptr: str = "") -> Expr:
    """The JSON texts of the value ``v`` (numbers in any equal spelling: 1, 1.0, -0)."""
    js, ws = conv.js, conv.js.ws()
    fractions = getattr(conv, "literal_fractions", js.integer_fractions)
    if v is None or isinstance(v, bool):
        return Literal(json.dumps(v))
    if isinstance(v, int):
        return integer_range(v, v, fractions)
    if isinstance(v, float):
        if v.is_integer():
            return integer_range(int(v), int(v), fractions)
        d = Decimal(repr(v))
        return number_range(d, False, d, False)
    if isinstance(v, str):
        return js.quoted(v)
    if isinstance(v, list):
        if not v:
            return cat(js.tok("["), Literal("]"))
        items = [cat(literal(conv, x, f"{ptr}/{i}"), ws) for i, x in enumerate(v)]
        body = [items[0]]
        for it in items[1:]:
            body += [js.tok(","), it]
        return cat(js.tok("["), *body, Literal("]"))
    if isinstance(v, dict):
        if not v:
            return cat(js.tok("{"), Literal("}"))
        if len(v) <= SMALL_OBJECT:
            return _object_literal(conv, v, ptr)
        # members in any order, each exactly once: the object builder tracks which were written
        as_schema = {"type": "object", "properties": {k: {"enum": [x]} for k, x in v.items()},
                     "required": list(v), "additionalProperties": False}
        got = conv.visit(as_schema, ptr + "/const", DEFAULT_BASE)    # no $ref inside
        return got if got is not None else NEVER
    raise SchemaError(f"not a JSON value: {v!r}", "", "enum")


SMALL_OBJECT = 3
"""Objects with at most this many members are spelled directly (``_object_literal``); larger ones
go through the object builder (objects.py)."""


def _object_literal(conv: "Converter", v: dict, ptr: str) -> Expr:
    """The object ``v``, members in any order, each once: the object builder's language for
    ``{"properties": {k: {"const": x}}, "required": [...], "additionalProperties": false}``
    (``{ ws``, members ``"k" ws : ws x ws`` separated by ``, ws``, then ``}``), written without its
    rules: one expression per set of members still to write, shared by every order reaching it."""
    js, ws = conv.js, conv.js.ws()
    members = {k: cat(js.quoted(k), ws, Literal(":"), ws, literal(conv, x, f"{ptr}/{k}"), ws) for k, x in v.items()}
    after: dict[frozenset, Expr] = {}

    def rest(left: frozenset) -> Expr:
        got = after.get(left)
        if got is None:
            got = after[left] = alt(*(cat(js.tok(","), members[k], rest(left - {k})) for k in v if k in left)) \
                if left else Literal("}")
        return got
    keys = frozenset(v)
    return cat(js.tok("{"), alt(*(cat(members[k], rest(keys - {k})) for k in v)))


def integer_grammar(conv: "Converter", s: dict, ptr: str) -> Expr | None:
    if s.get("x-halter-fraction"):
        return None                  # "not an integer" and an integer
    lo, hi = integer_bounds(s)
    bounded = lo is not None or hi is not None
    fractions = conv.js.integer_fractions
    base = integer_range(lo, hi, fractions) if bounded else None
    if bounded and base is None:
        return None
    # every integer is a multiple of 1, 0.5, 0.25, ... (p divides 10^k)
    factors = [f for f in _factors(conv, s, ptr)
               if not (isinstance(f, Multiple) and not f.negated and 10 ** f.k % f.p == 0)]
    if not factors:
        return base if bounded else conv.js.integer()
    return _product(conv, s, ptr, base if bounded else INTEGER_TEXT if fractions else WHOLE_TEXT, factors)


def number_grammar(conv: "Converter", s: dict, ptr: str) -> Expr | None:
    factors = _factors(conv, s, ptr)
    exact = conv.js.finite_numbers and not factors     # bounds on the double, as Pydantic checks them
    lo, ls, hi, hs = decimal_bounds(s, exact=exact)
    if s.get("x-halter-fraction"):
        if not factors and lo is None and hi is None:
            return _fraction_number(conv)
        factors.append(Fraction())
    bounded = lo is not None or hi is not None
    # the divisibility automata read decimal texts only: no exponent spellings beside them
    base = number_range(lo, ls, hi, hs, finite=exact, exponents=not factors) if bounded else None
    if bounded and base is None:
        return None
    if not factors:
        return base if bounded else conv.js.number()
    unbounded = DECIMAL_TEXT          # (a digit cap against overflow would make the automaton too large)
    return _product(conv, s, ptr, base if bounded else unbounded, factors)


_DIGITS = alt(Literal("0"), cat(NONZERO, Repeat(DIGIT, 0, None)))
INTEGER_TEXT = cat(Repeat(Literal("-"), 0, 1), _DIGITS, ZERO_FRACTION)
WHOLE_TEXT = cat(Repeat(Literal("-"), 0, 1), _DIGITS)          # integers without a zero fraction
DECIMAL_TEXT = cat(Repeat(Literal("-"), 0, 1), _DIGITS, Repeat(cat(Literal("."), Repeat(DIGIT, 1, None)), 0, 1))


_TOO_LARGE = "the divisibility automaton would be too large (divisor p/10^k with p*(k+1) > 1000)"


def _factors(conv: "Converter", s: dict, ptr: str) -> list:
    """The automata for ``multipleOf`` and the negated divisors (``x-halter-not-multiples``)."""
    out: list = []
    if s.get("multipleOf") is not None:
        f = multiple_factor(s["multipleOf"])
        if f is None:
            conv.unsupported("multipleOf", ptr, _TOO_LARGE)
        else:
            out.append(f)
    for d in s.get("x-halter-multiples", ()):
        f = multiple_factor(d)
        if f is None:
            conv.unsupported("multipleOf", ptr, _TOO_LARGE)
        else:
            out.append(f)
    for d in s.get("x-halter-not-multiples", ()):
        f = multiple_factor(d, negated=True)
        if f is None:
            conv.unsupported("not", ptr, f"'not multipleOf {d}': the divisibility automaton would be too large")
        else:
            out.append(f)
    return out


def _product(conv: "Converter", s: dict, ptr: str, base: Expr, factors: list) -> Expr | None:
    try:
        return intersect(base, factors, conv.rules, conv.hint(ptr) + "-num")
    except TooLarge:
        conv.unsupported("multipleOf", ptr, "the divisibility automaton combined with the bounds is too large")
        return base



def _fraction_number(conv: "Converter") -> Expr:
    """A JSON number that is not an integer: a non-zero fraction digit, then maybe an exponent
    that cannot make it whole (negative or zero), or an integer mantissa ending in a non-zero digit
    with a negative exponent (``15e-1``). Other exponent spellings (``1.55e1``) are left out: whether
    they are whole depends on the exponent against the digit count, which no grammar compares, and
    they must not pass as non-integers (``1e2`` is 100)."""
    js = conv.js
    digits = Repeat(DIGIT, 0, None)
    e = CharClass(((0x45, 0x45), (0x65, 0x65)))
    if getattr(conv, "draft", None) == "draft4":
        # draft-04 reads 1.0 and 1e0 as numbers that are not integers: any fraction or exponent
        exp = cat(e, Repeat(CharClass(((0x2B, 0x2B), (0x2D, 0x2D))), 0, 1), Repeat(DIGIT, 1, None))
        spelled = cat(Repeat(Literal("-"), 0, 1), js.uint(),
                      alt(cat(Literal("."), Repeat(DIGIT, 1, None), Repeat(exp, 0, 1)), exp))
        return conv.rules.fixed("json-fraction-number-draft4", spelled)
    shrinking = cat(e, alt(cat(Literal("-"), Repeat(DIGIT, 1, None)),
                           cat(Repeat(Literal("+"), 0, 1), Repeat(Literal("0"), 1, None))))
    frac = cat(js.uint(), Literal("."), digits, NONZERO, digits, Repeat(shrinking, 0, 1))
    odd = cat(alt(NONZERO, cat(NONZERO, digits, NONZERO)), ZERO_FRACTION,
              e, Literal("-"), Repeat(Literal("0"), 0, None), NONZERO, digits)
    return conv.rules.fixed("json-fraction-number", cat(Repeat(Literal("-"), 0, 1), alt(frac, odd)))
