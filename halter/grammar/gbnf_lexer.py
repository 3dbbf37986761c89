"""GBNF's lexical level, read as llama.cpp's parser reads it: line and column of an offset, spaces
and comments, names, integers, and the characters of literals and classes with their escapes.

``Scanner`` holds the text and raises ``GrammarError`` with line and column; the grammar reader
(``gbnf_parser._Reader``) builds rules on top of it.
"""
from __future__ import annotations

import bisect
import re

from halter.errors import GrammarError
from halter.grammar.ast import MAX_CODE_POINT

ESCAPES = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
HEX_LEN = {"x": 2, "u": 4, "U": 8}
WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
LINE_BREAK = re.compile(r"\r\n|\r|\n")


class Scanner:
    """The text of a GBNF grammar and the lexical pieces llama.cpp's parser reads from it
    (``parse_space``, ``parse_name``, ``parse_int``, ``parse_char``)."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)
        self.starts = line_starts(text)

    # -- positions and messages -----------------------------------------------------------
    def where(self, offset: int) -> tuple[int, int]:
        return position_of(self.starts, offset)

    def err(self, message: str, offset: int) -> GrammarError:
        return GrammarError(message, *self.where(min(offset, self.n)), self.s)

    def ch(self, i: int) -> str:
        return self.s[i] if i < self.n else ""

    # -- lexical pieces (llama.cpp's parse_space, parse_name, parse_int, parse_char) ----------
    def space(self, i: int, newline_ok: bool) -> int:
        s, n = self.s, self.n
        while i < n:
            c = s[i]
            if c == " " or c == "\t":
                i += 1
            elif c == "#":
                while i < n and s[i] not in "\r\n":
                    i += 1
            elif newline_ok and (c == "\r" or c == "\n"):
                i += 1
            else:
                break
        return i

    def name_end(self, i: int) -> int:
        j = i
        while j < self.n and self.s[j] in WORD:
            j += 1
        return j

    def integer(self, i: int, what: str) -> tuple[int, int]:
        j = i
        while j < self.n and self.s[j].isdigit() and self.s[j] in "0123456789":
            j += 1
        if j == i:
            raise self.err(f"expected a number in {what}", i)
        value = int(self.s[i:j])
        if value >= 1 << 64:
            raise self.err(f"number {self.s[i:j]} in {what} is too large", i)
        return value, j

    def char(self, i: int, where: str) -> tuple[int, int]:
        """One character of a literal or class: (code point, next offset)."""
        s = self.s
        if i >= self.n:
            raise self.err(f"unterminated {where}", i)
        if s[i] != "\\":
            return ord(s[i]), i + 1
        e = self.ch(i + 1)
        if e in HEX_LEN:
            size = HEX_LEN[e]
            digits = s[i + 2:i + 2 + size]
            k = 0
            while k < len(digits) and digits[k] in "0123456789abcdefABCDEF":
                k += 1
            if k != size:
                raise self.err(f"bad escape '\\{e}': expected {size} hex digits", i)
            return int(digits, 16), i + 2 + size
        if e in ESCAPES:
            return ESCAPES[e], i + 2
        shown = e if e and e.isprintable() else repr(e)
        raise self.err(f"bad escape '\\{shown}' (GBNF, as llama.cpp reads it, knows "
                       "\\x.. \\u.... \\U........ \\t \\n \\r \\\\ \\\" \\[ \\] \\- only)", i)



def show_code_point(cp: int) -> str:
    return repr(chr(cp)) if cp <= MAX_CODE_POINT and chr(cp).isprintable() else f"U+{cp:04X}"


def line_starts(text: str) -> list[int]:
    """Offsets where lines start; a line ends at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (as GBNF reads it)."""
    return [0] + [m.end() for m in LINE_BREAK.finditer(text)]


def position_of(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset``, given ``line_starts``."""
    k = bisect.bisect_right(starts, offset) - 1
    return k + 1, offset - starts[k] + 1
