"""``allOf``: merging two schemas into one that accepts exactly the instances both accept.

The merge is exact for the keywords a grammar builds on (types, bounds, properties, items, enum);
per-property and per-item subschemas that both sides constrain become ``{"allOf": [a, b]}`` and
are merged again when visited. Two different patterns are kept in ``x-halter-patterns`` (the converter intersects
them); other keywords that cannot be combined are listed in ``x-halter-conflicts``.
"""
from __future__ import annotations

import json
import math
from typing import Any

NUMERIC_TYPES = {"integer", "number"}
ALL_TYPES = ("null", "boolean", "object", "array", "string", "number", "integer")
ANNOTATIONS = {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
               "writeOnly", "$schema", "$id", "id", "$anchor", "$dynamicAnchor", "$defs",
               "definitions", "contentMediaType", "contentEncoding", "contentSchema", "$vocabulary"}


SUBSCHEMA_KEYS = {"items", "additionalItems", "propertyNames", "unevaluatedItems",
                  "unevaluatedProperties"}


def types_of(schema: dict) -> set[str] | None:
    t = schema.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _intersect_types(a: set[str] | None, b: set[str] | None) -> set[str] | None:
    if a is None:
        return b
    if b is None:
        return a
    out = a & b
    if "integer" in a and "number" in b or "number" in a and "integer" in b:
        out.add("integer")
    return out


def _both(x: Any, y: Any) -> Any:
    if x is True or x == {}:
        return y
    if y is True or y == {}:
        return x
    if x is False or y is False:
        return False
    if x == y:
        return x
    # one flat conjunction without repeats: a recursion that meets the same conjuncts again at
    # every level ({"allOf": [{"properties": {"c": {"$ref": "#"}}}, ...]}) then writes the same
    # schema again, which the converter recognises, instead of one that grows at each level
    parts: dict[str, Any] = {}
    for s in (x, y):
        for p in (s["allOf"] if isinstance(s, dict) and set(s) == {"allOf"} and isinstance(s["allOf"], list) else [s]):
            parts.setdefault(json.dumps(p, sort_keys=True, default=repr), p)
    return next(iter(parts.values())) if len(parts) == 1 else {"allOf": list(parts.values())}


def _canon(v: Any) -> str:
    """A key equal for JSON-equal values (1 == 1.0, but True != 1)."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return "n:" + repr(float(v)) if float(v).is_integer() is False else "n:" + str(int(v))
    if isinstance(v, list):
        return "[" + ",".join(_canon(i) for i in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _canon(v[k]) for k in sorted(v)) + "}"
    return json.dumps(v)


def _prop_rule(schema: dict, key: str) -> Any:
    """The subschema ``schema`` applies to the value of property ``key``."""
    props = schema.get("properties") or {}
    if key in props:
        return props[key]
    if schema.get("patternProperties"):
        return None          # depends on regex matching: leave to the converter
    return schema.get("additionalProperties", True)


_CONTAINS_KEYS = ("contains", "minContains", "maxContains")


def _own_contains(schema: dict) -> dict:
    """``schema`` without ``minContains``/``maxContains`` when it has no ``contains`` of its own.

    The counts only apply to their sibling ``contains``; merged next to another schema's
    ``contains`` they would wrongly count its matches.
    """
    if "contains" in schema or not any(k in schema for k in _CONTAINS_KEYS[1:]):
        return schema
    return {k: v for k, v in schema.items() if k not in _CONTAINS_KEYS[1:]}


def merge(a: dict, b: dict) -> dict | bool:
    """A schema equivalent to ``allOf: [a, b]`` (both without ``$ref``/``allOf``/``anyOf``)."""
    out: dict = {}
    conflicts: list[str] = []
    a, b = _own_contains(a), _own_contains(b)
    if "contains" in a and "contains" in b and a["contains"] != b["contains"]:
        # two different `contains` (each with its own counts) do not merge into one: keep a's
        # (every valid instance satisfies it, so the grammar is a superset) and report b's
        b = {k: v for k, v in b.items() if k not in _CONTAINS_KEYS}
        conflicts.append("contains")
    keys = set(a) | set(b)
    for k in keys:
        if k in ANNOTATIONS:
            continue
        if k not in a or k not in b:
            continue
        x, y = a[k], b[k]
        if k == "type":
            continue
        if k in ("minimum", "minLength", "minItems", "minProperties", "minContains"):
            out[k] = max(x, y)
        elif k in ("maximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
            out[k] = min(x, y)
        elif k in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(x, bool) and not isinstance(y, bool):
            out[k] = max(x, y) if k == "exclusiveMinimum" else min(x, y)
        elif k == "required":
            out[k] = list(dict.fromkeys(list(x) + list(y)))
        elif k == "enum":
            ys = {_canon(v) for v in y}
            out[k] = [v for v in x if _canon(v) in ys]
        elif k == "const":
            if _canon(x) != _canon(y):
                return False
            out[k] = x
        elif k in ("properties", "patternProperties", "dependentRequired", SIDES) or k in _ITEM_KEYS:
            continue   # handled below
        elif k in ("x-halter-not-strings", "x-halter-not-multiples", "x-halter-multiples"):
            out[k] = list(dict.fromkeys([*out.get(k, []), *x, *y]))
        elif k in ("uniqueItems",):
            out[k] = x or y
        elif x == y:
            out[k] = x
        elif k in SUBSCHEMA_KEYS and isinstance(x, (dict, bool)) and isinstance(y, (dict, bool)):
            out[k] = _both(x, y)
        elif k == "multipleOf" and _is_int(x) and _is_int(y):
            out[k] = x * y // math.gcd(int(x), int(y))
        elif k == "multipleOf":          # decimal divisors: both apply (the converter intersects)
            out[k] = x
            out["x-halter-multiples"] = list(dict.fromkeys([*out.get("x-halter-multiples", []),
                                                            *a.get("x-halter-multiples", []),
                                                            *b.get("x-halter-multiples", []), y]))
        elif k == "pattern":
            out[k] = x
            out["x-halter-patterns"] = [*a.get("x-halter-patterns", []), *b.get("x-halter-patterns", []), y]
        else:
            out[k] = x
            conflicts.append(k)
    for k in keys:
        if k in ANNOTATIONS or k in out or k in ("type", SIDES) or k in _ITEM_KEYS:
            continue
        if k in a and k not in b:
            out[k] = a[k]
        elif k in b and k not in a:
            out[k] = b[k]
    # number bounds given in different spellings stay as a nested allOf
    t = _intersect_types(types_of(a), types_of(b))
    if t is not None:
        out["type"] = sorted(t)
    # object members: the rule for each key is the conjunction of both sides' rules
    if "properties" in a or "properties" in b or "additionalProperties" in a or "additionalProperties" in b:
        names = list(dict.fromkeys(list(a.get("properties") or {}) + list(b.get("properties") or {})))
        props = {}
        for name in names:
            ra, rb = _prop_rule(a, name), _prop_rule(b, name)
            if ra is None or rb is None:
                ra = (a.get("properties") or {}).get(name, True) if ra is None else ra
                rb = (b.get("properties") or {}).get(name, True) if rb is None else rb
            props[name] = _both(ra, rb)
        if names:
            out["properties"] = props
        add = _both(a.get("additionalProperties", True), b.get("additionalProperties", True))
        if add is not True:
            out["additionalProperties"] = add
        else:
            out.pop("additionalProperties", None)
    if any(k in a or k in b for k in _ITEM_KEYS):
        _merge_items(a, b, out)
    if "patternProperties" in a or "patternProperties" in b:
        pp = dict(a.get("patternProperties") or {})
        for pat, s in (b.get("patternProperties") or {}).items():
            pp[pat] = _both(pp[pat], s) if pat in pp else s
        out["patternProperties"] = pp
        sides = _sides(a) + _sides(b)
        if sides:
            out[SIDES] = sides
    if "dependentRequired" in a or "dependentRequired" in b:
        dr = {k: list(v) for k, v in (a.get("dependentRequired") or {}).items()}
        for k, v in (b.get("dependentRequired") or {}).items():
            dr[k] = list(dict.fromkeys(dr.get(k, []) + list(v)))
        out["dependentRequired"] = dr
    if conflicts:
        out["x-halter-conflicts"] = sorted(set(conflicts) | set(a.get("x-halter-conflicts", [])))
    return out


_ITEM_KEYS = ("items", "prefixItems", "additionalItems")

SIDES = "x-halter-sides"
"""Where ``allOf`` joins objects with ``patternProperties``, each side's ``additionalProperties``
still sees only that side's names and patterns: ``{"allOf": [{"additionalProperties": false}],
"patternProperties": {"a": {}}}`` refuses ``{"a": 1}``. Merged flat, the other side's patterns
would exempt such keys, so each side whose ``additionalProperties`` is not ``true`` is kept as
``[names, patterns, additionalProperties]``: a key that is none of a side's names and matches none
of its patterns must also satisfy that side's ``additionalProperties`` (objects.py, pattern_keys.py)."""


def _sides(s: dict) -> list:
    if SIDES in s:
        return s[SIDES]
    add = s.get("additionalProperties", True)
    if add is True or add == {}:
        return []
    return [[sorted(s.get("properties") or {}), sorted(s.get("patternProperties") or {}), add]]


def side_rule(side: list, key: str, search: Any) -> Any:
    """What one side's ``additionalProperties`` asks of ``key``'s value (True: nothing);
    ``search(pattern, key)`` says whether an unanchored pattern finds ``key``."""
    names, patterns, add = side
    if key in names or any(search(p, key) for p in patterns):
        return True
    return add


def for_validator(schema: Any) -> Any:
    """``schema`` with each ``x-halter-sides`` written as an ``allOf`` that a JSON Schema validator
    reads the same way (the schema itself when it has none)."""
    if not isinstance(schema, dict) or SIDES not in json.dumps(schema, default=repr):
        return schema
    return _translated(schema)


_VALUES = {"enum", "const", "default", "examples"}
_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}


def _translated(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_translated(v) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict = {}
    for k, v in schema.items():
        if k == SIDES:
            continue
        if k in _VALUES:
            out[k] = v
        elif k in _MAPS and isinstance(v, dict):
            out[k] = {name: _translated(sub) for name, sub in v.items()}
        else:
            out[k] = _translated(v)
    if SIDES in schema:
        out["allOf"] = [*out.get("allOf", []), *({"properties": {n: True for n in names},
                                                   "patternProperties": {p: True for p in patterns},
                                                   "additionalProperties": _translated(add)}
                                                  for names, patterns, add in schema[SIDES])]
    return out


def _positions(s: dict) -> tuple[bool, list, Any]:
    """(draft-7 tuple form?, the schemas of the first positions, the schema of every later one).

    ``items`` next to ``prefixItems`` (2020-12) and ``additionalItems`` next to an ``items`` list
    (draft 7) apply after that schema's *own* prefix only; alone, ``items`` applies to every item."""
    if isinstance(s.get("items"), list):
        return True, s["items"], s.get("additionalItems", True)
    return False, list(s.get("prefixItems") or []), s.get("items", True)


def _merge_items(a: dict, b: dict, out: dict) -> None:
    """The item keywords of ``allOf: [a, b]``, position by position."""
    old_a, pa, ra = _positions(a)
    old_b, pb, rb = _positions(b)
    n = max(len(pa), len(pb))
    prefix = [_both(pa[i] if i < len(pa) else ra, pb[i] if i < len(pb) else rb) for i in range(n)]
    rest = _both(ra, rb)
    if old_a or old_b:
        if prefix or (isinstance(a.get("items"), list) or isinstance(b.get("items"), list)):
            out["items"] = prefix
            if rest is not True:
                out["additionalItems"] = rest
        elif rest is not True:
            out["items"] = rest
        return
    if prefix:
        out["prefixItems"] = prefix
    if rest is not True:
        out["items"] = rest


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0
