"""``oneOf``: proving branches disjoint, or rewriting them into mutually exclusive alternatives.

Exactly-one is "at least one" (``anyOf``) when the branches cannot overlap, which is proved pair by
pair from their types, constant values (checked against the other branch) and, for objects, a key
one branch requires that the other forbids (``additionalProperties: false``) or constrains to
disjoint values (tagged unions: ``{"kind": {"const": "a"}}``). Closed objects
(``additionalProperties: false``) with no key in common can only share ``{}``; the union is then
exact once ``{}`` is excluded when two branches accept it (``exclusive``). Otherwise it is the union over i of "branch i and the negation of
every other branch", which is exact whenever each branch has a positive negation
(``logic.negate``). When neither works the converter treats ``oneOf`` as ``anyOf`` (a superset; a
warning, or an error in strict mode).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.errors import UnsupportedSchemaError
from halter.schemas import drafts, logic
from halter.schemas import merge as merging
from halter.schemas.refs import DEFAULT_BASE

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_EXCLUSIVE = 6
"""oneOf branches rewritten into exclusive alternatives (the rewrite is quadratic)."""
MAX_EXCLUSIVE_ALTERNATIVES = 12
"""Alternatives the rewrite may produce: each is a whole grammar (an object with its own key
complement), and two 8-property objects whose negations give 21 of them (JSONSchemaBench
Github_hard/o69719) doubled the engine's build time."""


class TooMany(Exception):
    """Raised by the converter instead of giving up while ``exclusive`` only probes."""


def exclusive(conv: "Converter", options: list, ptr: str, base: str) -> list[tuple] | None:
    """Exactly one branch: the union over i of (branch i and not any other branch).

    None when a branch has no positive negation (see ``logic.negate``), there are more than
    ``MAX_EXCLUSIVE`` branches, or the intersections make more than ``MAX_EXCLUSIVE_ALTERNATIVES``."""
    shared_empty = _apart_but_empty(conv, options, ptr, base)
    if shared_empty is not None:
        # {} is the only instance two branches can share: it is valid only if one branch accepts it
        extra = {"minProperties": 1} if shared_empty else {}
        return [a for i, o in enumerate(options)
                for a in conv.alternatives({"allOf": [o, extra]} if extra else o, f"{ptr}/oneOf/{i}", base, inline=False)]
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
            if len(out) > min(conv.max_alternatives, MAX_EXCLUSIVE_ALTERNATIVES):
                return None
    except (TooMany, UnsupportedSchemaError):
        return None
    finally:
        conv.probing -= 1
    return out


def disjoint(conv: "Converter", options: list, ptr: str, context: dict | None = None,
             base: str = DEFAULT_BASE) -> bool:
    """Whether the oneOf branches provably cannot overlap: pairwise, by types, constant values,
    or (objects) a key one branch requires that the other forbids or constrains to disjoint values.
    ``context`` is the schema holding the ``oneOf``; its ``type`` applies to every branch."""
    outer = merging.types_of(context) if isinstance(context, dict) else None
    for i in range(len(options)):
        for j in range(i + 1, len(options)):
            if not _apart(conv, options[i], options[j], outer, base, ptr, 0):
                return False
    return True


_MAX_DEPTH = 6
_OBJECT_ONLY = frozenset({"object"})


def _resolve(conv: "Converter", s: Any, base: str, ptr: str) -> Any:
    for _ in range(_MAX_DEPTH):
        s = drafts.own_keywords(s, conv.draft)
        if not (isinstance(s, dict) and "$ref" in s and not set(s) - merging.ANNOTATIONS - {"$ref"}):
            return s
        target = conv.local_target(s["$ref"], base, ptr)
        if target is None:
            return None
        s = target
    return None


def _types(s: dict) -> frozenset | None:
    """The JSON types ``s`` allows (integer counted as number), None: unknown."""
    if "const" in s or "enum" in s:
        vals = [s["const"]] if "const" in s else s["enum"]
        if isinstance(vals, list):
            return frozenset(_json_type(v) for v in vals)
    t = merging.types_of(s)
    return None if t is None else frozenset("number" if x == "integer" else x for x in t)


def _apart(conv: "Converter", a: Any, b: Any, outer: set | None, base: str, ptr: str, depth: int) -> bool:
    """True when no instance of type ``outer`` (None: any type) is valid under both ``a`` and ``b``."""
    if a is False or b is False:
        return True
    a, b = _resolve(conv, a, base, ptr), _resolve(conv, b, base, ptr)
    if not isinstance(a, dict) or not isinstance(b, dict) or depth > _MAX_DEPTH:
        return False
    for x, y in ((a, b), (b, a)):
        for sub in x.get("allOf") or []:
            if _apart(conv, sub, y, outer, base, ptr, depth + 1):
                return True
        if isinstance(x.get("anyOf"), list) and x["anyOf"] and \
                all(_apart(conv, sub, y, outer, base, ptr, depth + 1) for sub in x["anyOf"]):
            return True
    ta, tb = _types(a), _types(b)
    common = set(ta if ta is not None else JSON_KINDS) & set(tb if tb is not None else JSON_KINDS)
    if outer is not None:
        common &= {"number" if x == "integer" else x for x in outer}
    if not common:
        return True
    for x, y in ((a, b), (b, a)):
        vals = [x["const"]] if "const" in x else x.get("enum")
        if isinstance(vals, list) and not any(conv.valid(y, v) and conv.valid(x, v) for v in vals):
            return True
    if common == {"object"}:
        return _objects_apart(conv, a, b, base, ptr, depth) or _objects_apart(conv, b, a, base, ptr, depth)
    return False


def _apart_but_empty(conv: "Converter", options: list, ptr: str, base: str) -> bool | None:
    """When every two branches are disjoint or closed objects with no common key (so ``{}`` is all
    they can share): whether at least two branches accept ``{}``. Otherwise None."""
    for i in range(len(options)):
        for j in range(i + 1, len(options)):
            if not _share_at_most_empty(conv, options[i], options[j], base, ptr, 0):
                return None
    return sum(1 for o in options if conv.valid(_resolve(conv, o, base, ptr), {})) >= 2


def _share_at_most_empty(conv: "Converter", a: Any, b: Any, base: str, ptr: str, depth: int) -> bool:
    """No instance but ``{}`` is valid under both: disjoint, or closed objects with no common key
    (a branch that is itself only an ``anyOf``/``oneOf`` is checked member by member)."""
    if _apart(conv, a, b, None, base, ptr, depth):
        return True
    a, b = _resolve(conv, a, base, ptr), _resolve(conv, b, base, ptr)
    if not isinstance(a, dict) or not isinstance(b, dict) or depth > _MAX_DEPTH:
        return False
    for x, y in ((a, b), (b, a)):
        for key in ("anyOf", "oneOf"):
            if isinstance(x.get(key), list) and not set(x) - merging.ANNOTATIONS - {key}:
                return all(_share_at_most_empty(conv, m, y, base, ptr, depth + 1) for m in x[key])
    return _closed(a) and _closed(b) and not set(a.get("properties") or {}) & set(b.get("properties") or {})


def _closed(s: dict) -> bool:
    """An object schema naming all its keys in ``properties`` (no other keys allowed)."""
    return s.get("additionalProperties") is False and not s.get("patternProperties") and \
        merging.types_of(s) is not None and merging.types_of(s) <= {"object"} and \
        not set(s) & {"allOf", "anyOf", "oneOf", "$ref", "not", "if", "unevaluatedProperties"}


JSON_KINDS = ("null", "boolean", "object", "array", "string", "number")


def _objects_apart(conv: "Converter", a: dict, b: dict, base: str, ptr: str, depth: int) -> bool:
    """Objects: a key ``a`` requires is forbidden by ``b``, or both require it with disjoint values."""
    props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
    for k in a.get("required") or []:
        if not isinstance(k, str):
            continue
        if k in props_b:             # the instance has k, so b's schema for k applies to its value
            if _apart(conv, props_a.get(k, True), props_b[k], None, base, ptr, depth + 1):
                return True
        elif b.get("additionalProperties") is False and not b.get("patternProperties"):
            return True
    return False


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]
