"""``oneOf``: proving branches disjoint, or rewriting them into mutually exclusive alternatives.

Exactly-one is "at least one" (``anyOf``) when the branches cannot overlap, which is proved from
their types and constant values. Otherwise it is the union over i of "branch i and the negation of
every other branch", which is exact whenever each branch has a positive negation
(``logic.negate``). When neither works the converter treats ``oneOf`` as ``anyOf`` (a superset; a
warning, or an error in strict mode).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from halter.errors import UnsupportedSchemaError
from halter.schemas import logic
from halter.schemas import merge as merging
from halter.schemas.refs import DEFAULT_BASE

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_EXCLUSIVE = 6
"""oneOf branches rewritten into exclusive alternatives (the rewrite is quadratic)."""


class TooMany(Exception):
    """Raised by the converter instead of giving up while ``exclusive`` only probes."""


def exclusive(conv: "Converter", options: list, ptr: str, base: str) -> list[tuple] | None:
    """Exactly one branch: the union over i of (branch i and not any other branch).

    None when a branch has no positive negation (see ``logic.negate``), there are more than
    ``MAX_EXCLUSIVE`` branches, or the intersections make too many alternatives."""
    if len(options) > MAX_EXCLUSIVE:
        return None
    negs = [logic.negate(o, lambda r: conv.local_target(r, base, ptr), conv.draft) for o in options]
    if any(n is None for n in negs):
        return None
    out: list[tuple] = []
    conv.probing += 1
    try:
        for i, o in enumerate(options):
            others = [n for j, n in enumerate(negs) if j != i]
            out.extend(conv.alternatives({"allOf": [o, *others]}, f"{ptr}/oneOf/{i}", base, inline=True))
            if len(out) > conv.max_alternatives:
                return None
    except (TooMany, UnsupportedSchemaError):
        return None
    finally:
        conv.probing -= 1
    return out


def disjoint(conv: "Converter", options: list, ptr: str) -> bool:
    """Whether the oneOf branches provably cannot overlap (types or constant values)."""
    kinds = []
    for o in options:
        if not isinstance(o, dict):
            return False
        if "$ref" in o:
            o = conv.index.resolve(o["$ref"], DEFAULT_BASE, "#" + ptr)[0]
            if not isinstance(o, dict):
                return False
        t = merging.types_of(o)
        if "const" in o or "enum" in o:
            kinds.append(("values", tuple(json.dumps(v, sort_keys=True) for v in ([o["const"]] if "const" in o else o["enum"]))))
        elif t is not None:
            kinds.append(("types", frozenset("number" if x == "integer" else x for x in t)))
        else:
            return False
    seen_types: set = set()
    seen_values: set = set()
    value_types: set = set()
    for kind, val in kinds:
        if kind == "types":
            if seen_types & val or value_types & val:
                return False
            seen_types |= val
        else:
            vtypes = {_json_type(json.loads(v)) for v in val}
            if seen_values & set(val) or seen_types & vtypes:
                return False
            seen_values |= set(val)
            value_types |= vtypes
    return True


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]
