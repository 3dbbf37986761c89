"""ECMAScript regular expressions (the JSON Schema ``pattern`` dialect): the parser.

``parse_regex`` produces the halter grammar syntax tree over code points (``Literal``,
``CharClass``, ``Seq``, ``Alt``, ``Repeat``) plus ``Anchor`` markers for ``^`` and ``$``; turning
that tree into a grammar expression or GBNF text (anchor handling included) is regex_convert.py.
Constructs a context-free grammar cannot express (backreferences, lookaround, word boundaries)
raise ``UnsupportedRegexError``; malformed patterns ``RegexError``. Unicode property escapes
(``\\p{L}``) are read with their ``u``-mode meaning (unicode_props.py).

Semantics follow ECMAScript without flags: ``.`` excludes line terminators (\\n \\r U+2028 U+2029),
``\\d``/``\\w`` are ASCII, ``\\s`` is ECMAScript white space, ``$`` matches only at the very end.
"""
from __future__ import annotations

from dataclasses import dataclass

from halter.errors import RegexError, SchemaError, UnsupportedRegexError
from halter.grammar.ast import MAX_CODE_POINT, Alt, CharClass, Expr, Literal, Repeat, Seq, merge_ranges
from halter.schemas.unicode_props import property_ranges


@dataclass(frozen=True)
class Anchor:
    """``^`` (``start=True``, holds at offset 0) or ``$`` (at the end of the text), anywhere in a
    pattern; ``regex_convert.split_anchors`` turns them into anchored variants."""
    start: bool


DIGIT = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
         (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF))
LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_SIMPLE_ESCAPES = {"t": 0x09, "n": 0x0A, "r": 0x0D, "v": 0x0B, "f": 0x0C, "0": 0x00}
_CLASS_ESCAPES = {"d": (DIGIT, False), "D": (DIGIT, True), "w": (WORD, False),
                  "W": (WORD, True), "s": (SPACE, False), "S": (SPACE, True)}
_SYNTAX = set("^$\\.*+?()[]{}|/-")


def complement(ranges: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The code points not in ``ranges``."""
    return tuple(CharClass(tuple(ranges), negated=True).code_point_ranges())


def any_char_except_newline() -> CharClass:
    return CharClass(complement(LINE_TERMINATORS))


MAX_GROUP_DEPTH = 100
"""Groups nested deeper than this are refused (the parser recurses once per group)."""
_HEX = frozenset("0123456789abcdefABCDEF")


def _is_number(text: str) -> bool:
    """ASCII decimal digits only (``str.isdigit`` also takes "²" and Arabic-Indic digits)."""
    return bool(text) and text.isascii() and text.isdigit()


class _Parser:
    def __init__(self, pattern: str, pointer: str) -> None:
        self.p = pattern
        self.i = 0
        self.pointer = pointer
        self.depth = 0      # groups open around the current position

    def error(self, message: str, unsupported: bool = False, at: int | None = None) -> RegexError:
        cls = UnsupportedRegexError if unsupported else RegexError
        return cls(message, self.p, self.i if at is None else at, self.pointer)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def parse(self) -> Expr:
        expr = self.alternation()
        if self.i < len(self.p):
            raise self.error("unbalanced ')'")
        return expr

    def alternation(self) -> Expr:
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def sequence(self) -> Expr:
        items: list = []
        while self.i < len(self.p) and self.peek() not in "|)":
            at = self.i
            atom = self.atom()
            items.append(self.quantified(atom, from_group=self.p[at] == "("))
        # merge adjacent single characters into literals
        out: list = []
        for it in items:
            if isinstance(it, Literal) and out and isinstance(out[-1], Literal):
                out[-1] = Literal(out[-1].text + it.text)
            else:
                out.append(it)
        if not out:
            return Literal("")
        return out[0] if len(out) == 1 else Seq(tuple(out))

    def quantified(self, atom, from_group: bool = False):
        c = self.peek()
        start = self.i
        if c == "*":
            lo, hi = 0, None
            self.i += 1
        elif c == "+":
            lo, hi = 1, None
            self.i += 1
        elif c == "?":
            lo, hi = 0, 1
            self.i += 1
        elif c == "{":
            bounds = self.braces()
            if bounds is None:
                return atom
            lo, hi = bounds
        else:
            return atom
        if isinstance(atom, Anchor) and not from_group:     # (?:^)? is valid ECMAScript, ^? is not
            raise self.error("nothing to repeat", at=start)
        if self.peek() == "?":      # lazy: same language
            self.i += 1
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self.braces_lookahead()):
            raise self.error("nothing to repeat")
        return Repeat(atom, lo, hi)

    def braces(self) -> tuple[int, int | None] | None:
        """Parse ``{m}``, ``{m,}``, ``{m,n}``; None (a literal ``{``) when it is not a quantifier."""
        j = self.i + 1
        k = self.p.find("}", j)
        if k < 0:
            return None
        body = self.p[j:k]
        parts = body.split(",")
        if len(parts) > 2 or not _is_number(parts[0]) or (len(parts) == 2 and parts[1] and not _is_number(parts[1])):
            return None
        lo = int(parts[0])
        hi: int | None = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        if hi is not None and hi < lo:
            raise self.error("numbers out of order in {} quantifier")
        self.i = k + 1
        return lo, hi

    def atom(self):
        c = self.peek()
        start = self.i
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class()
        if c == ".":
            self.i += 1
            return any_char_except_newline()
        if c == "^":
            self.i += 1
            return Anchor(True)
        if c == "$":
            self.i += 1
            return Anchor(False)
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            raise self.error("nothing to repeat")
        if c == "{" and self.braces_lookahead():
            raise self.error("nothing to repeat")
        self.i += 1
        assert start < len(self.p)
        return Literal(c)

    def braces_lookahead(self) -> bool:
        save = self.i
        try:
            return self.braces() is not None
        finally:
            self.i = save

    def group(self):
        start = self.i
        self.i += 1
        if self.depth >= MAX_GROUP_DEPTH:
            raise self.error(f"groups nested more than {MAX_GROUP_DEPTH} deep", unsupported=True, at=start)
        if self.peek() == "?":
            nxt = self.peek(1)
            if nxt == ":":
                self.i += 2
            elif nxt in "=!" or (nxt == "<" and self.peek(2) in "=!"):
                raise self.error("lookaround assertions cannot be expressed by a grammar",
                                 unsupported=True)
            elif nxt == "<" or (nxt == "P" and self.peek(2) == "<"):
                end = self.p.find(">", self.i)
                if end < 0:
                    raise self.error("unterminated group name")
                self.i = end + 1
            else:
                raise self.error("unsupported group syntax (inline flags?)", unsupported=True)
        self.depth += 1
        try:
            inner = self.alternation()
        finally:
            self.depth -= 1
        if self.peek() != ")":
            raise self.error("missing ')'", at=start)
        self.i += 1
        return inner

    def escape(self, in_class: bool):
        start = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.error("pattern ends with a backslash", at=start)
        self.i += 1
        if c in _CLASS_ESCAPES:
            ranges, neg = _CLASS_ESCAPES[c]
            return CharClass(complement(ranges) if neg else ranges)
        if c in _SIMPLE_ESCAPES:
            if c == "0" and _is_number(self.peek()):
                raise self.error("octal escapes are not supported", unsupported=True, at=start)
            return Literal(chr(_SIMPLE_ESCAPES[c]))
        if _is_number(c):
            if in_class:
                raise self.error("octal escapes are not supported", unsupported=True, at=start)
            raise self.error("backreferences cannot be expressed by a grammar", unsupported=True,
                             at=start)
        if c in "bB":
            if in_class and c == "b":
                return Literal("\x08")
            raise self.error("word boundaries cannot be expressed by a grammar", unsupported=True,
                             at=start)
        if c == "x":
            return Literal(chr(self.hex_digits(2, start)))
        if c == "u":
            if self.peek() == "{":
                end = self.p.find("}", self.i)
                if end < 0:
                    raise self.error("unterminated \\u{...}", at=start)
                digits = self.p[self.i + 1:end]
                if not digits or any(d not in _HEX for d in digits):
                    raise self.error("bad \\u{...} escape", at=start)
                cp = int(digits, 16)
                if cp > MAX_CODE_POINT:
                    raise self.error("code point out of range", at=start)
                if 0xD800 <= cp <= 0xDFFF and not in_class:      # (range ends in a class are fine)
                    raise self.error("lone surrogate escapes are not supported", unsupported=True,
                                     at=start)
                self.i = end + 1
                return Literal(chr(cp))
            cp = self.hex_digits(4, start)
            if 0xD800 <= cp <= 0xDBFF and self.p[self.i:self.i + 2] == "\\u" and self.peek(2) != "{":
                save = self.i
                self.i += 2
                low = self.hex_digits(4, save)
                if 0xDC00 <= low <= 0xDFFF:
                    return Literal(chr(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)))
                self.i = save
            if 0xD800 <= cp <= 0xDFFF:
                raise self.error("lone surrogate escapes are not supported", unsupported=True,
                                 at=start)
            return Literal(chr(cp))
        if c == "c":
            letter = self.peek()
            if letter.isascii() and letter.isalpha():
                self.i += 1
                return Literal(chr(ord(letter) % 32))
            raise self.error("bad \\c escape", at=start)
        if c in "pP":
            return self.property_escape(c == "P", start)
        if c == "k":
            raise self.error("named backreferences cannot be expressed by a grammar",
                             unsupported=True, at=start)
        if c.isalnum():
            raise self.error(f"unknown escape '\\{c}'", at=start)
        return Literal(c)   # identity escape of punctuation

    def property_escape(self, negated: bool, start: int) -> CharClass:
        """``\\p{...}``/``\\P{...}`` (the ``u``-mode meaning, which JSON Schema patterns use)."""
        end = self.p.find("}", self.i)
        if self.peek() != "{" or end < 0:
            raise self.error("\\p must be followed by {property}", at=start)
        body = self.p[self.i + 1:end]
        try:
            ranges = property_ranges(body)
        except KeyError:
            raise self.error(f"unknown Unicode property {body!r}", at=start) from None
        if ranges is None:
            raise self.error(f"Unicode property {body!r} is not supported (only general categories "
                             "and Any/ASCII/Assigned/ASCII_Hex_Digit/White_Space)", unsupported=True,
                             at=start)
        self.i = end + 1
        return CharClass(complement(ranges) if negated else ranges)

    def hex_digits(self, n: int, start: int) -> int:
        digits = self.p[self.i:self.i + n]
        if len(digits) != n or any(d not in _HEX for d in digits):
            raise self.error(f"expected {n} hex digits", at=start)
        self.i += n
        return int(digits, 16)

    def char_class(self) -> CharClass:
        start = self.i
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if not c:
                raise self.error("unterminated character class", at=start)
            if c == "]":
                self.i += 1
                break
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if isinstance(lo, CharClass) or isinstance(hi, CharClass):
                    raise self.error("a class escape cannot bound a range", at=start)
                if hi < lo:
                    raise self.error("range out of order in character class", at=start)
                ranges.append((lo, hi))
            elif isinstance(lo, CharClass):
                ranges.extend(lo.code_point_ranges())
            else:
                ranges.append((lo, lo))
        merged = tuple(merge_ranges(ranges))
        return CharClass(complement(merged) if negated else merged)

    def class_atom(self):
        c = self.peek()
        if c == "\\":
            got = self.escape(in_class=True)
            if isinstance(got, CharClass):
                return got
            return ord(got.text)
        self.i += 1
        return ord(c)


def parse_regex(pattern: str, pointer: str = "") -> Expr:
    """Parse an ECMAScript regex into a syntax tree over code points (with ``Anchor`` markers)."""
    if not isinstance(pattern, str):
        raise SchemaError(f"a regex must be a string, not {type(pattern).__name__}", pointer,
                          "pattern")
    return _Parser(pattern, pointer).parse()


# The conversion half lives in regex_convert.py (which imports the parser above); re-exported here,
# after everything it needs is defined, so ``from halter.schemas.regex import regex_to_gbnf`` keeps
# working.
from halter.schemas.regex_convert import regex_to_expr, regex_to_gbnf, split_anchors  # noqa: E402, F401
