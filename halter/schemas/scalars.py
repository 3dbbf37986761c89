"""Scalar schemas: ``enum``/``const`` literals and the numeric keywords (bounds, ``multipleOf``).

Each function takes the ``Converter`` (for its rules, JSON text helpers and the strict/lenient
``unsupported`` hook) and one flat, merged schema.
"""
from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from halter.errors import SchemaError
from halter.grammar.ast import CharClass, Expr, Literal, Repeat, alt
from halter.schemas import merge as merging
from halter.schemas.json_text import cat
from halter.schemas.numbers import (DivisibleBy, decimal_bounds, integer_bounds, integer_range,
                                     multiple_of_integer, number_range)

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
    check = conv.validator.evolve(schema=rest)
    kept = []
    for v in values:
        try:
            ok = check.is_valid(v)
        except Exception:  # noqa: BLE001 - a sibling the validator cannot run: keep the value
            ok = True
        if ok:
            kept.append(v)
    opts = [literal(conv, v) for v in kept]
    return conv.rules.add(conv.hint(ptr), alt(*opts)) if opts else None


def literal(conv: "Converter", v: Any) -> Expr:
    """The JSON texts of the value ``v`` (numbers in any equal spelling: 1, 1.0, -0)."""
    js, ws = conv.js, conv.js.ws()
    if v is None or isinstance(v, bool):
        return Literal(json.dumps(v))
    if isinstance(v, int):
        return integer_range(v, v)
    if isinstance(v, float):
        if v.is_integer():
            return integer_range(int(v), int(v))
        d = Decimal(repr(v))
        return number_range(d, False, d, False)
    if isinstance(v, str):
        return js.quoted(v)
    if isinstance(v, list):
        if not v:
            return cat(js.tok("["), Literal("]"))
        items = [cat(literal(conv, x), ws) for x in v]
        body = [items[0]]
        for it in items[1:]:
            body += [js.tok(","), it]
        return cat(js.tok("["), *body, Literal("]"))
    if isinstance(v, dict):
        if not v:
            return cat(js.tok("{"), Literal("}"))
        members = [cat(js.quoted(k), ws, js.tok(":"), literal(conv, x), ws) for k, x in v.items()]
        body = [members[0]]
        for m in members[1:]:
            body += [js.tok(","), m]
        return cat(js.tok("{"), *body, Literal("}"))
    raise SchemaError(f"not a JSON value: {v!r}", "", "enum")


def integer_grammar(conv: "Converter", s: dict, ptr: str) -> Expr | None:
    if s.get("x-halter-fraction"):
        return None                  # "not an integer" and an integer
    lo, hi = integer_bounds(s)
    mult = s.get("multipleOf")
    if mult is not None:
        got = multiple_of_integer(mult, lo, hi)
        if isinstance(got, DivisibleBy):
            for name, body in got.rules.items():
                conv.rules.fixed(name, body)
            return got.expr
        if got is not False:
            return got
        conv.unsupported("multipleOf", ptr, "only integer divisors of unbounded integers, or small ranges")
    if lo is None and hi is None:
        return conv.js.integer()
    return integer_range(lo, hi)


def number_grammar(conv: "Converter", s: dict, ptr: str) -> Expr | None:
    if s.get("x-halter-fraction"):
        if not set(s) & _NUMERIC:
            return _fraction_number(conv)
        conv.unsupported("not", ptr, "'not an integer' next to numeric bounds or multipleOf")
    if s.get("multipleOf") is not None:
        got = integer_grammar(conv, s, ptr) if merging._is_int(s["multipleOf"]) else None
        if got is not None:
            return got
        conv.unsupported("multipleOf", ptr, "non-integer divisors are not supported")
    lo, ls, hi, hs = decimal_bounds(s)
    if lo is None and hi is None:
        return conv.js.number()
    return number_range(lo, ls, hi, hs)


_NUMERIC = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}


def _fraction_number(conv: "Converter") -> Expr:
    """A JSON number that is not an integer: a non-zero fraction digit, or exponent notation
    (which halter's integer grammar never accepts, so the two stay complementary)."""
    js = conv.js
    digits = Repeat(CharClass(((0x30, 0x39),)), 0, None)
    frac = cat(Literal("."), digits, CharClass(((0x31, 0x39),)), digits, Repeat(js.exponent(), 0, 1))
    expo = cat(Repeat(js.fraction(), 0, 1), js.exponent())
    return conv.rules.fixed("json-fraction-number", cat(Repeat(Literal("-"), 0, 1), js.uint(), alt(frac, expo)))
