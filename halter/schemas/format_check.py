"""The ``format`` checker used when halter validates values with ``jsonschema``.

It is the declared draft's own ``FORMAT_CHECKER`` (its checkers come from the packages halter
depends on: ``rfc3339-validator``, ``rfc3986-validator``, ``fqdn``, ``idna``, ``isoduration``,
``jsonpointer``, ``uri-template``, ``webcolors``), with ``iri`` and ``iri-reference`` checked by
halter itself: RFC 3987 maps an IRI to a URI by percent-encoding its non-ASCII characters, and
the URI is then checked by ``rfc3986-validator``. (jsonschema's own IRI checker needs
``rfc3987-syntax``, which builds a parser at import and costs every process a second or more.)
"""
from __future__ import annotations

import functools
from typing import Any

import jsonschema

__all__ = ["format_checker", "is_iri"]

# RFC 3987 ucschar, and iprivate (allowed in the query only)
_UCS = ((0xA0, 0xD7FF), (0xF900, 0xFDCF), (0xFDF0, 0xFFEF),
        *((p * 0x10000, p * 0x10000 + 0xFFFD) for p in range(1, 14)), (0xE1000, 0xEFFFD))
_PRIVATE = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


def _in(cp: int, ranges: tuple) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _as_uri(value: str) -> str | None:
    """The URI an IRI maps to (RFC 3987 section 3.1), or None when a character is not allowed."""
    out, in_query = [], False
    for ch in value:
        cp = ord(ch)
        if ch == "?":
            in_query = True
        elif ch == "#":
            in_query = False
        if cp < 0x80:
            out.append(ch)
        elif _in(cp, _UCS) or (in_query and _in(cp, _PRIVATE)):
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass")))
        else:
            return None
    return "".join(out)


def is_iri(value: Any, reference: bool = False) -> bool:
    """True for an IRI (or, with ``reference``, an IRI reference); non-strings pass, as in jsonschema."""
    if not isinstance(value, str):
        return True
    from rfc3986_validator import validate_rfc3986
    uri = _as_uri(value)
    return uri is not None and bool(validate_rfc3986(uri, rule="URI_reference" if reference else "URI"))


@functools.lru_cache(maxsize=None)
def format_checker(validator_cls: type) -> jsonschema.FormatChecker:
    """The format checker for values under ``validator_cls``'s draft (see the module docstring)."""
    base = validator_cls.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    draft6_or_older = validator_cls in (jsonschema.Draft3Validator, jsonschema.Draft4Validator,
                                        jsonschema.Draft6Validator)
    if not draft6_or_older:
        checker.checkers.setdefault("iri", (is_iri, ()))
        checker.checkers.setdefault("iri-reference", (lambda v: is_iri(v, reference=True), ()))
    return checker
