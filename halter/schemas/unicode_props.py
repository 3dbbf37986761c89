"""Unicode property escapes of ECMAScript regexes (``\\p{L}``, ``\\P{Lu}``) as code-point ranges.

Supported: General_Category values by short name, long name and the ECMAScript aliases (``L``,
``Letter``, ``Lu``, ``Uppercase_Letter``, ``Nd``, ``digit``, ``punct``, ``cntrl``,
``Combining_Mark``, ...), optionally written ``General_Category=`` / ``gc=``; and the binary
properties ``Any``, ``ASCII``, ``Assigned``, ``ASCII_Hex_Digit``/``AHex``, ``White_Space``/``space``.
The tables come from Python's ``unicodedata`` (computed once, kept in memory). Scripts and other
binary properties need Unicode data Python does not ship; ``property_ranges`` returns None for
them (the caller reports an unsupported construct).
"""
from __future__ import annotations

import sys
import unicodedata
from functools import lru_cache

Ranges = tuple[tuple[int, int], ...]

_CATEGORIES = {
    "Cc": ("Control", "cntrl"), "Cf": ("Format",), "Cn": ("Unassigned",), "Co": ("Private_Use",),
    "Cs": ("Surrogate",), "Ll": ("Lowercase_Letter",), "Lm": ("Modifier_Letter",),
    "Lo": ("Other_Letter",), "Lt": ("Titlecase_Letter",), "Lu": ("Uppercase_Letter",),
    "Mc": ("Spacing_Mark",), "Me": ("Enclosing_Mark",), "Mn": ("Nonspacing_Mark",),
    "Nd": ("Decimal_Number", "digit"), "Nl": ("Letter_Number",), "No": ("Other_Number",),
    "Pc": ("Connector_Punctuation",), "Pd": ("Dash_Punctuation",), "Pe": ("Close_Punctuation",),
    "Pf": ("Final_Punctuation",), "Pi": ("Initial_Punctuation",), "Po": ("Other_Punctuation",),
    "Ps": ("Open_Punctuation",), "Sc": ("Currency_Symbol",), "Sk": ("Modifier_Symbol",),
    "Sm": ("Math_Symbol",), "So": ("Other_Symbol",), "Zl": ("Line_Separator",),
    "Zp": ("Paragraph_Separator",), "Zs": ("Space_Separator",),
}
_GROUPS = {"C": ("Other",), "L": ("Letter",), "M": ("Mark", "Combining_Mark"), "N": ("Number",),
           "P": ("Punctuation", "punct"), "S": ("Symbol",), "Z": ("Separator",),
           "LC": ("Cased_Letter",)}
_WHITE_SPACE = ((0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
                (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                (0x3000, 0x3000))


def _aliases() -> dict[str, frozenset[str]]:
    """Every accepted General_Category value name -> the two-letter categories it covers."""
    out: dict[str, frozenset[str]] = {}
    for short, longs in _CATEGORIES.items():
        for name in (short, *longs):
            out[name] = frozenset({short})
    for short, longs in _GROUPS.items():
        members = frozenset({"Lu", "Ll", "Lt"} if short == "LC" else {c for c in _CATEGORIES if c[0] == short})
        for name in (short, *longs):
            out[name] = members
    return out


_GC_NAMES = _aliases()


@lru_cache(maxsize=1)
def _category_table() -> dict[str, Ranges]:
    """Two-letter category -> its code-point ranges (one pass over all code points)."""
    ranges: dict[str, list[list[int]]] = {}
    category = unicodedata.category
    for cp in range(sys.maxunicode + 1):
        cat = category(chr(cp))
        lst = ranges.setdefault(cat, [])
        if lst and lst[-1][1] == cp - 1:
            lst[-1][1] = cp
        else:
            lst.append([cp, cp])
    return {k: tuple((a, b) for a, b in v) for k, v in ranges.items()}


def _union(categories: frozenset[str]) -> Ranges:
    table = _category_table()
    pieces = sorted(r for c in categories for r in table.get(c, ()))
    out: list[list[int]] = []
    for lo, hi in pieces:
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


@lru_cache(maxsize=None)
def property_ranges(body: str) -> Ranges | None:
    """Code points of ``\\p{body}`` (sorted, merged); None for a property not supported here.

    Raises ``KeyError`` for a name ECMAScript does not know either.
    """
    name, _, value = body.partition("=")
    if value:
        if name in ("General_Category", "gc"):
            if value not in _GC_NAMES:
                raise KeyError(body)
            return _union(_GC_NAMES[value])
        if name in ("Script", "sc", "Script_Extensions", "scx"):
            return None
        raise KeyError(body)
    if name in _GC_NAMES:
        return _union(_GC_NAMES[name])
    if name == "Any":
        return ((0, sys.maxunicode),)
    if name == "ASCII":
        return ((0, 0x7F),)
    if name in ("ASCII_Hex_Digit", "AHex"):
        return ((0x30, 0x39), (0x41, 0x46), (0x61, 0x66))
    if name in ("White_Space", "space"):
        return _WHITE_SPACE
    if name == "Assigned":
        unassigned = _union(frozenset({"Cn"}))
        out, nxt = [], 0
        for lo, hi in unassigned:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= sys.maxunicode:
            out.append((nxt, sys.maxunicode))
        return tuple(out)
    if name[:1].isupper():
        return None     # presumably another binary property (Alphabetic, Emoji, ...)
    raise KeyError(body)
