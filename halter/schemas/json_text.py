"""JSON text as grammar pieces (RFC 8259): whitespace, strings and their escapes, any JSON value.

Strings are the subtle part. A JSON string's *value* is what a schema constrains, but the text may
spell each character several ways (``é``, ``\\u00e9``, ``\\u00E9``). For constrained strings
(pattern, format, enum, const, property names) every character is accepted in these spellings:

* printable ASCII other than ``"`` and ``\\``: raw only (``/`` also as ``\\/``);
* ``"``, ``\\`` and control characters: their short escape (``\\n``...) and ``\\uXXXX``;
* everything else: raw and ``\\uXXXX`` (a surrogate pair beyond the BMP), hex digits in any case.

That covers ``json.dumps`` output with and without ``ensure_ascii``. Unconstrained strings accept
every spelling RFC 8259 allows, lone surrogate escapes (``\\ud800``) included unless the
``JsonText`` is made with ``lone_surrogates=False`` (RFC 7493's I-JSON: the strings every decoder
into Unicode text, Pydantic's among them, takes); constrained strings never accept them.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from halter.grammar.ast import (MAX_CODE_POINT, Alt, AnyChar, CharClass, Expr, Literal, Repeat, RuleRef,
                                Seq, alt, merge_ranges)
from halter.schemas.digits import DIGIT, HEX, NONZERO, cat, fixed_width_range  # noqa: F401 - re-exported
from halter.grammar.rule_memo import canonical
from halter.schemas.rules import Rules


_SHORT = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
# code points that may appear raw inside a JSON string
_RAW = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, MAX_CODE_POINT))
# code points whose \\u spelling constrained strings accept (everything but printable ASCII)
_UESC = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0xD7FF), (0xE000, 0xFFFF))

FINITE_DIGITS = 200
"""Digits before the point of a number that must not overflow a double (see ``JsonText.number``)."""


OVERFLOW_DIGITS = str(2 ** 1024 - 2 ** 970)[1:17]
"""The fraction digits of ``1.f e308`` where parsing a double overflows, to 16 places: from
2**1024 - 2**970 (the largest double plus half its last step, which rounds to infinity) on."""


def _below_overflow(i: int) -> Expr:
    """Fraction digits ``f`` (from place ``i``) with ``1.f e308`` below the overflow, written with
    at most 17 significant digits past a common prefix, as every ``repr`` is: a smaller digit
    than ``OVERFLOW_DIGITS`` at some place (anything after it), or a prefix of them."""
    limit = int(OVERFLOW_DIGITS[i])
    parts = [cat(CharClass(((0x30, 0x30 + limit - 1),)), Repeat(DIGIT, 0, None))] if limit else []
    rest = Literal("") if i + 1 == len(OVERFLOW_DIGITS) else alt(Literal(""), _below_overflow(i + 1))
    return alt(*parts, cat(Literal(OVERFLOW_DIGITS[i]), rest))


def finite_magnitude(nonzero: bool = False) -> Expr:
    """Unsigned JSON numbers a double holds without overflowing, every ``repr`` of a finite float
    among them: at most ``FINITE_DIGITS`` digits before the point with a negative exponent or one
    of up to two digits (< 10^299), or one digit before the point with an exponent up to 307, or
    ``1.f`` with 308 below where a double overflows (``_below_overflow``).

    ``nonzero``: only those that do not round to zero either (anything under 2^-1075, ~2.5e-324,
    does), as a strict zero bound needs (Pydantic reads ``1e-400`` as 0.0, not above 0): a
    non-zero digit, negative exponents up to 307 and at most 15 zeros after ``0.`` (so the value
    is at least 1e-323; ``repr`` writes 1e-05 and smaller in exponent notation).
    """
    e = CharClass(((0x45, 0x45), (0x65, 0x65)))
    plus = Repeat(Literal("+"), 0, 1)
    frac = Repeat(cat(Literal("."), Repeat(DIGIT, 1, None)), 0, 1)
    positive = cat(e, plus, Repeat(DIGIT, 1, 2))
    if nonzero:
        negative = cat(e, Literal("-"), Repeat(Literal("0"), 0, None),
                       alt(Repeat(DIGIT, 1, 2), cat(CharClass(((0x31, 0x32),)), DIGIT, DIGIT),
                           cat(Literal("30"), CharClass(((0x30, 0x37),)))))
        exponent = Repeat(alt(negative, positive), 0, 1)
        small = alt(cat(Literal("0."), Repeat(Literal("0"), 0, 15), NONZERO, Repeat(DIGIT, 0, None), exponent),
                    cat(NONZERO, Repeat(DIGIT, 0, FINITE_DIGITS - 1), frac, exponent))
    else:
        small = cat(finite_uint(), frac, Repeat(alt(cat(e, Literal("-"), Repeat(DIGIT, 1, None)), positive), 0, 1))
    big = cat(NONZERO, frac, e, plus, alt(cat(CharClass(((0x30, 0x32),)), DIGIT, DIGIT),
                                          cat(Literal("30"), CharClass(((0x30, 0x37),)))))
    top = cat(Literal("1"), Repeat(cat(Literal("."), _below_overflow(0)), 0, 1), e, plus, Literal("308"))
    return alt(small, big, top)


def finite_uint() -> Expr:
    """``0`` or up to ``FINITE_DIGITS`` digits without a leading zero."""
    return alt(Literal("0"), cat(NONZERO, Repeat(DIGIT, 0, FINITE_DIGITS - 1)))


NEVER = CharClass(())
"""Matches nothing (an empty character class)."""

WHITESPACE_MODES = ("flexible", "bounded", "compact")
MAX_INDENT = 64


def _intersect(a, b) -> list[tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@functools.lru_cache(maxsize=4096)
def _class_spellings(key: tuple[tuple[int, int], ...]) -> tuple[tuple[tuple[int, int], ...], Expr | None]:
    """The raw characters of the code point set ``key`` (merged ranges) and the alternation of
    its escaped spellings (None: none). A pure function of the set, kept across conversions: the
    key complements of an object's trie of names ask for many sets that share their escapes."""
    raw = tuple(_intersect(key, _RAW))
    escapes: list[Expr] = []
    shorts = [c for c in _SHORT if any(lo <= c <= hi for lo, hi in key)]
    if shorts:
        escapes.append(cat(Literal("\\"), CharClass(tuple(sorted((ord(_SHORT[c]), ord(_SHORT[c])) for c in shorts)))))
    uesc = _intersect(key, _UESC)
    if uesc:
        escapes.append(cat(Literal("\\u"), _hex4(uesc)))
    for lo, hi in _intersect(key, ((0x10000, MAX_CODE_POINT),)):
        escapes.append(_surrogate_pairs(lo, hi))
    return raw, (alt(*escapes) if escapes else None)


def _hex4(ranges) -> Expr:
    return alt(*(fixed_width_range(lo, hi, 4, 16) for lo, hi in ranges))


@functools.lru_cache(maxsize=1024)
def _surrogate_pairs(lo: int, hi: int) -> Expr:
    """``\\uD8xx\\uDCxx`` spellings of the supplementary code points lo..hi."""
    def split(cp):
        v = cp - 0x10000
        return 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF)
    (hl, ll), (hh, lh) = split(lo), split(hi)
    parts = []
    if hl == hh:
        parts.append((hl, hl, ll, lh))
    else:
        parts.append((hl, hl, ll, 0xDFFF))
        if hl + 1 <= hh - 1:
            parts.append((hl + 1, hh - 1, 0xDC00, 0xDFFF))
        parts.append((hh, hh, 0xDC00, lh))
    return alt(*(cat(Literal("\\u"), fixed_width_range(a, b, 4, 16), Literal("\\u"),
                     fixed_width_range(c, d, 4, 16)) for a, b, c, d in parts))


# ---------------------------------------------------------------------------------------------

class JsonText:
    """Builds the shared JSON helper rules (whitespace, strings, numbers, values) into ``rules``."""

    def __init__(self, rules: Rules, whitespace: str = "flexible", *, lone_surrogates: bool = True,
                 integer_fractions: bool = True, finite_numbers: bool = False) -> None:
        if whitespace not in WHITESPACE_MODES:
            raise ValueError(f"whitespace must be one of {WHITESPACE_MODES}, not {whitespace!r}")
        self.rules = rules
        self.compact = whitespace == "compact"
        self.lone_surrogates = lone_surrogates
        self.integer_fractions = integer_fractions      # integers may be written 3.0 (the spec: yes)
        self.finite_numbers = finite_numbers            # numbers stay below a double's overflow
        self._class_rules: dict[tuple, RuleRef] = {}
        self._ws: Expr | None = None

    # whitespace -------------------------------------------------------------------------------
    def ws(self) -> Expr:
        """Optional whitespace between tokens: none, 1-4 spaces/tabs, or a newline + indentation."""
        if self._ws is not None:                 # (called between every two tokens: made once)
            return self._ws
        if self.compact:
            self._ws = Literal("")
            return self._ws
        blank = CharClass(((0x09, 0x09), (0x20, 0x20)))
        newline = self.rules.fixed("ws-nl", cat(Repeat(Literal("\r"), 0, 1), Literal("\n"),
                                                Repeat(blank, 0, MAX_INDENT)))
        more = self.rules.fixed("ws-blank", Repeat(blank, 0, 3))
        self._ws = self.rules.fixed("ws", Repeat(alt(cat(blank, more), newline), 0, 1))
        return self._ws

    def tok(self, text: str) -> Expr:
        """A structural token followed by optional whitespace."""
        return cat(Literal(text), self.ws())

    # strings ----------------------------------------------------------------------------------
    def string_char(self) -> Expr:
        """Any JSON string character in any spelling (lone surrogate escapes too, if allowed)."""
        if not self.lone_surrogates:
            return self.counted_char()
        body = alt(CharClass(tuple(_RAW)),
                   cat(Literal("\\"), alt(CharClass(tuple((c, c) for c in sorted(map(ord, '"\\/bfnrt')))),
                                          cat(Literal("u"), Repeat(HEX, 4, 4)))))
        return self.rules.fixed("json-char", body)

    def counted_char(self) -> Expr:
        """One string character, counted as ``len()`` counts it: a surrogate pair is one."""
        not_surrogate = alt(cat(CharClass(((0x30, 0x39), (0x41, 0x43), (0x45, 0x46), (0x61, 0x63),
                                           (0x65, 0x66))), Repeat(HEX, 3, 3)),
                            cat(CharClass(((0x44, 0x44), (0x64, 0x64))), CharClass(((0x30, 0x37),)),
                                Repeat(HEX, 2, 2)))
        pair = cat(CharClass(((0x44, 0x44), (0x64, 0x64))), CharClass(((0x38, 0x39), (0x41, 0x42), (0x61, 0x62))),
                   Repeat(HEX, 2, 2), Literal("\\u"), CharClass(((0x44, 0x44), (0x64, 0x64))),
                   CharClass(((0x43, 0x46), (0x63, 0x66))), Repeat(HEX, 2, 2))
        body = alt(CharClass(tuple(_RAW)),
                   cat(Literal("\\"), alt(CharClass(tuple((c, c) for c in sorted(map(ord, '"\\/bfnrt')))),
                                          cat(Literal("u"), alt(not_surrogate, pair)))))
        return self.rules.fixed("json-char-counted", body)

    def string(self, min_length: int = 0, max_length: int | None = None) -> Expr:
        if min_length == 0 and max_length is None:
            return self.rules.fixed("json-string", cat(Literal('"'), Repeat(self.string_char(), 0, None), Literal('"')))
        return cat(Literal('"'), Repeat(self.counted_char(), min_length, max_length), Literal('"'))

    def encode_class(self, ranges) -> Expr:
        """Every accepted spelling of one character from the code point set ``ranges``."""
        key = tuple(merge_ranges(ranges))
        if key in self._class_rules:
            return self._class_rules[key]
        raw, escaped = _class_spellings(key)
        options: list[Expr] = [CharClass(raw)] if raw else []
        if escaped is not None:
            options.append(self.rules.add("jesc", escaped, shared=True))
        result = alt(*options) if options else NEVER
        self._class_rules[key] = result
        return result

    def encode_text(self, text: str) -> Expr:
        """Every accepted spelling of the string value ``text`` (without the quotes)."""
        parts: list[Expr] = []
        run = []
        for ch in text:
            cp = ord(ch)
            if 0x20 <= cp < 0x7F and ch not in '"\\/':
                run.append(ch)
                continue
            if run:
                parts.append(Literal("".join(run)))
                run = []
            parts.append(self.encode_class(((cp, cp),)))
        if run:
            parts.append(Literal("".join(run)))
        return cat(*parts)

    def quoted(self, text: str) -> Expr:
        return cat(Literal('"'), self.encode_text(text), Literal('"'))

    def encode_expr(self, expr: Expr, rule: Callable[[RuleRef], Expr] | None = None) -> Expr:
        """Map a code-point grammar expression (from a regex) to JSON-string spellings.

        Rule references stay as they are, or become ``rule(ref)`` (an encoded copy of the rule).
        """
        if isinstance(expr, Literal):
            return self.encode_text(expr.text)
        if isinstance(expr, CharClass):
            return self.encode_class(expr.code_point_ranges())
        if isinstance(expr, AnyChar):
            return self.encode_class(((0, MAX_CODE_POINT),))
        if isinstance(expr, Seq):
            return cat(*(self.encode_expr(i, rule) for i in expr.items))
        if isinstance(expr, Alt):
            return alt(*(self.encode_expr(o, rule) for o in expr.options))
        if isinstance(expr, Repeat):
            return Repeat(self.encode_expr(expr.expr, rule), expr.min, expr.max)
        if isinstance(expr, RuleRef):
            return expr if rule is None else rule(expr)
        raise TypeError(f"cannot encode {expr!r}")

    # numbers and values -----------------------------------------------------------------------
    def uint(self) -> Expr:
        return self.rules.fixed("json-uint", alt(Literal("0"), cat(NONZERO, Repeat(DIGIT, 0, None))))

    def fraction(self) -> Expr:
        return cat(Literal("."), Repeat(DIGIT, 1, None))

    def exponent(self) -> Expr:
        return cat(CharClass(((0x45, 0x45), (0x65, 0x65))), Repeat(CharClass(((0x2B, 0x2B), (0x2D, 0x2D))), 0, 1),
                   Repeat(DIGIT, 1, None))

    def number(self) -> Expr:
        """Any JSON number; with ``finite_numbers`` only those a double holds without overflowing
        (``finite_magnitude``)."""
        sign = Repeat(Literal("-"), 0, 1)
        if not self.finite_numbers:
            return self.rules.fixed("json-number", cat(sign, self.uint(), Repeat(self.fraction(), 0, 1),
                                                       Repeat(self.exponent(), 0, 1)))
        return self.rules.fixed("json-number", cat(sign, finite_magnitude()))

    def integer(self) -> Expr:
        """A JSON number whose value is an integer: ``-?int`` with optional ``.0``s (no exponent;
        no ``.0`` either without ``integer_fractions``)."""
        zeros = Repeat(cat(Literal("."), Repeat(Literal("0"), 1, None)), 0, 1) if self.integer_fractions else Literal("")
        return self.rules.fixed("json-integer", cat(Repeat(Literal("-"), 0, 1), self.uint(), zeros))

    def value(self) -> Expr:
        """Any JSON value (recursive rules ``json-value``, ``json-object``, ``json-array``)."""
        if "json-value" in self.rules.rules:
            return RuleRef("json-value")
        self.rules.reserve("json-value")
        val = RuleRef("json-value")
        ws = self.ws()
        member = cat(self.string(), ws, self.tok(":"), val, ws)
        obj = self.rules.fixed("json-object", cat(self.tok("{"), Repeat(cat(member, Repeat(cat(self.tok(","), member), 0, None)), 0, 1), Literal("}")))
        item = cat(val, ws)
        arr = self.rules.fixed("json-array", cat(self.tok("["), Repeat(cat(item, Repeat(cat(self.tok(","), item), 0, None)), 0, 1), Literal("]")))
        self.rules.define("json-value", canonical(alt(obj, arr, self.string(), self.number(),
                                                      Literal("true"), Literal("false"), Literal("null"))))
        return val
