"""The ``regex`` format: ECMAScript (ECMA-262, ``u`` flag) regular-expression syntax as a regex.

The value of a ``format: regex`` string must itself be a valid regular expression. This module
writes that syntax as an (anchored, ECMAScript) regex over characters, compiled like every other
format by ``regex.py``; the converter then spells it as JSON string text.

What is checked: balanced groups (capturing, ``(?:``, lookarounds ``(?=`` ``(?!`` ``(?<=`` ``(?<!``,
named ``(?<name>``, ES2025 modifiers ``(?i:``), character classes with their escapes, quantifiers
(``* + ? {n} {n,} {n,m}``, lazy ``?``) only after an atom, and escapes: ``\\d \\D \\w \\W \\s \\S``,
``\\b \\B``, ``\\f \\n \\r \\t \\v \\0``, ``\\cX``, ``\\xHH``, ``\\uHHHH``, ``\\u{...}`` (at most
10FFFF), ``\\p{...}``/``\\P{...}``, backreferences ``\\1`` and ``\\k<name>``. So Python-only syntax
(``(?P<n>``, ``(?P=n)``, ``(?#...)``, inline flags ``(?i)``), ``\\a``, unbalanced parentheses or
brackets, a lone ``{``/``}``/``]`` and a quantifier with nothing to repeat are rejected.

Known supersets (a grammar, or a regular one, cannot check them): group nesting deeper than
``DEPTH`` levels is accepted loosely (any characters, classes and escapes inside the innermost
level); ``{n,m}`` with n > m, ranges out of order (``[z-a]``), a class escape as a range bound
(``[\\d-z]``), backreference numbers and ``\\k`` names without a matching group, duplicate group
names, unknown ``\\p`` property names, and ``\\0`` followed by a digit are accepted. One departure
towards leniency: an escaped ASCII punctuation or non-ASCII character (``\\-`` outside a class,
``\\_``, ``\\'``) is accepted as in ECMAScript without the ``u`` flag and in Python, since real
schemas use it (``^5\\-.*``); escaped letters and digits other than the ones above are rejected.
"""
from __future__ import annotations

DEPTH = 2
"""Group nesting checked exactly up to this depth. The patterns of JSONSchemaBench's real schemas
nest at most 3 deep; each level adds ~250-650 automaton states (the loose innermost level overlaps
the checked ones), so 3 levels cost ~1,200 states and ~0.35 s to build, 4 levels ~1,900."""

_HEX = "[0-9A-Fa-f]"
# \uHHHH or \u{H...} with a value of at most 10FFFF (leading zeros allowed)
_U_ESCAPE = rf"u(?:{_HEX}{{4}}|\{{0*(?:{_HEX}{{1,5}}|10{_HEX}{{4}})\}})"
# escapes that stand for one character, in and out of classes; the last class is the identity
# escape (u-mode allows only syntax characters and '/'; see the module docstring)
_CHAR_ESCAPE = rf"(?:[fnrtv0]|c[A-Za-z]|x{_HEX}{{2}}|{_U_ESCAPE}|[^A-Za-z0-9])"
_PROPERTY = r"[pP]\{[A-Za-z_][A-Za-z0-9_]*(?:=[A-Za-z0-9_]+)?\}"
_SET_ESCAPE = rf"(?:[dDsSwW]|{_PROPERTY})"
_ID_CHAR = r"A-Za-z$_\u0080-\uD7FF\uE000-\u{10FFFF}"
_GROUP_NAME = rf"(?:[{_ID_CHAR}]|\\{_U_ESCAPE})(?:[{_ID_CHAR}0-9]|\\{_U_ESCAPE})*"
_ATOM_ESCAPE = rf"\\(?:{_CHAR_ESCAPE}|{_SET_ESCAPE}|[1-9][0-9]*|k<{_GROUP_NAME}>)"
_CLASS = rf"\[\^?(?:[^\\\]]|\\(?:{_CHAR_ESCAPE}|{_SET_ESCAPE}|b))*\]"
_PATTERN_CHAR = r"[^$^\\.*+?()[\]{}|]"
_QUANTIFIER = r"(?:(?:[*+?]|\{[0-9]+(?:,[0-9]*)?\})\??)"
_MODIFIERS = "(?:[ims]{1,3}(?:-[ims]{1,3})?|-[ims]{1,3})"
_GROUP_OPEN = rf"\((?:\?(?::|<?[=!]|<{_GROUP_NAME}>|{_MODIFIERS}:))?"
_ASSERTION = r"(?:\^|\$|\\[bB])"
# what the innermost checked group may contain: anything, with classes and escapes well formed
_LOOSE = rf"(?:[^\\[]|\\[\s\S]|{_CLASS})*"


def _disjunction(depth: int) -> str:
    """Alternatives of terms, with groups nested at most ``depth`` more levels."""
    if depth == 0:
        return _LOOSE
    group = rf"{_GROUP_OPEN}{_disjunction(depth - 1)}\)"
    atom = rf"(?:{_PATTERN_CHAR}|\.|{_ATOM_ESCAPE}|{_CLASS}|{group})"
    return rf"(?:{_ASSERTION}|{atom}{_QUANTIFIER}?|\|)*"


REGEX = _disjunction(DEPTH)
"""Anchored ECMAScript regex of the ECMAScript regular-expression syntax (see the module doc)."""
