"""Boolean keywords as unions and intersections: ``not``, ``if``/``then``/``else``, ``dependentSchemas``.

A grammar has no complement, so ``not`` is rewritten into a positive schema by pushing the negation
down to single keywords (``not (A and B)`` = ``not A or not B``) whose negation is again a plain
schema: ``type``, bounds, lengths, counts, ``required``, ``properties``, ``items``/``contains``,
``additionalProperties: false`` next to at most 3 known keys (a branch per subset of them
present, with one key more in all), ``enum``/``const`` of scalars (strings via the internal
``x-halter-not-strings`` keyword, which the string builder turns into a trie complement),
``anyOf``/``allOf``/``not`` and local ``$ref``s.
``type: integer`` is negated into "a number with a non-zero fraction" (internal
``x-halter-fraction``) and ``multipleOf: d`` into "a number that is not a multiple of d"
(``x-halter-not-multiples``); the number builder turns both into digit automata
(``decimal_dfa``), exact next to bounds. ``negate`` returns None when some keyword has no such
negation (``pattern``, ``format``, ``uniqueItems``, non-scalar values, ...); the converter then
reports ``not`` as unsupported. ``if``/``then``/``else`` becomes
``anyOf[allOf[if, then], allOf[not if, else]]`` and each ``dependentSchemas`` entry ``anyOf[{properties: {k: false}}, allOf[{required: [k]}, S]]``.
"""
from __future__ import annotations

from typing import Any, Callable

from halter.schemas import drafts
from halter.schemas.merge import ANNOTATIONS

JSON_TYPES = ("null", "boolean", "object", "array", "string", "number")
_MAX_REF_DEPTH = 8
_MAX_CLOSED_KEYS = 3
"""``not {additionalProperties: false}`` is written as one branch per subset of the known keys."""

Resolver = Callable[[str], Any]
"""Maps a ``$ref`` to its target schema, or None when it cannot be inlined here."""


def _or(options: list) -> Any:
    options = [o for o in options if o is not False]
    if not options:
        return False
    if any(o is True for o in options):
        return True
    return options[0] if len(options) == 1 else {"anyOf": options}


def negate(schema: Any, resolve: Resolver, draft: str, depth: int = 0) -> Any:
    """A schema accepting exactly what ``schema`` rejects, or None if none can be written."""
    if schema is True:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict) or depth > _MAX_REF_DEPTH:
        return None
    s = {k: v for k, v in drafts.own_keywords(schema, draft).items() if k not in ANNOTATIONS}
    if "$ref" in s:
        if len(s) > 1 and draft not in ("draft4", "draft6", "draft7"):
            return None
        target = resolve(s["$ref"])
        return None if target is None else negate(target, resolve, draft, depth + 1)
    pieces = []
    for k, v in s.items():
        n = _negate_keyword(k, v, s, resolve, draft, depth)
        if n is None:
            return None
        pieces.append(n)
    return _or(pieces)


def _negate_keyword(k: str, v: Any, s: dict, resolve: Resolver, draft: str, depth: int) -> Any:
    """The instances that fail keyword ``k`` of ``s`` (None: cannot be written as a schema).

    A keyword about one type (``minLength``, ``required``...) passes every other type, so its
    negation is of that type only."""
    old_bounds = draft == "draft4"
    if k == "type":
        types = {v} if isinstance(v, str) else set(v)
        keep = [t for t in JSON_TYPES if t not in types and not (t == "number" and "integer" in types)]
        if "integer" in types and "number" not in types:
            # a number with a fraction (internal keyword; exponent spellings count as non-integers)
            return _or([{"type": keep}, {"type": "number", "x-halter-fraction": True}])
        return {"type": keep} if keep else False
    if k == "not":
        return v
    if k in ("anyOf", "allOf") and isinstance(v, list):
        negs = [negate(x, resolve, draft, depth + 1) for x in v]
        if any(n is None for n in negs):
            return None
        return {"allOf": negs} if k == "anyOf" else _or(negs)
    if k in ("enum", "const"):
        return not_values([v] if k == "const" else list(v), old_bounds)
    if k == "required" and isinstance(v, list):
        return _or([{"type": "object", "properties": {r: False}} for r in v])
    if k in _COUNTS:
        kind, key, other, step = _COUNTS[k]
        if k.startswith("min") and v <= 0:
            return False
        return {"type": kind, other: v + step}
    if k == "multipleOf" and isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"type": "number", "x-halter-not-multiples": [v]}
    if k in _BOUNDS and not old_bounds and not isinstance(v, bool):
        return {"type": "number", _BOUNDS[k]: v}
    if k == "properties" and isinstance(v, dict):
        out = []
        for name, sub in v.items():
            n = negate(sub, resolve, draft, depth + 1)
            if n is None:
                return None
            if n is not False:
                out.append({"type": "object", "required": [name], "properties": {name: n}})
        return _or(out)
    if k == "items" and isinstance(v, (dict, bool)) and "prefixItems" not in s:
        n = negate(v, resolve, draft, depth + 1)
        return None if n is None else (False if n is False else
                                       {"type": "array", "contains": n, drafts.REWRITTEN: True})
    if k == "contains" and "minContains" not in s and "maxContains" not in s:
        n = negate(v, resolve, draft, depth + 1)
        return None if n is None else {"type": "array", "items": n}
    if k == "additionalProperties" and v is False and not s.get("patternProperties") \
            and len(s.get("properties") or {}) <= _MAX_CLOSED_KEYS:
        # a key outside ``properties``: for each set S of the known keys present, |S| + 1 keys
        known = list(s.get("properties") or {})
        return _or([{"type": "object", "required": [n for i, n in enumerate(known) if mask >> i & 1],
                     "properties": {n: False for i, n in enumerate(known) if not mask >> i & 1},
                     "minProperties": bin(mask).count("1") + 1} for mask in range(1 << len(known))])
    if k == "dependentRequired" and isinstance(v, dict):
        return _or([{"type": "object", "required": [a], "properties": {b: False}}
                    for a, needs in v.items() for b in needs])
    if k not in ASSERTIONS and not k.startswith("x-halter"):
        return False                 # an unknown keyword (or then/else without if) asserts nothing
    return None


ASSERTIONS = {"type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
              "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "items", "prefixItems",
              "additionalItems", "unevaluatedItems", "contains", "minContains", "maxContains", "maxItems",
              "minItems", "uniqueItems", "maxProperties", "minProperties", "required", "properties",
              "patternProperties", "additionalProperties", "unevaluatedProperties", "dependentRequired",
              "dependentSchemas", "dependencies", "propertyNames", "allOf", "anyOf", "oneOf", "not", "if",
              "$dynamicRef", "$recursiveRef"}


_COUNTS = {
    "minLength": ("string", "minLength", "maxLength", -1), "maxLength": ("string", "maxLength", "minLength", 1),
    "minItems": ("array", "minItems", "maxItems", -1), "maxItems": ("array", "maxItems", "minItems", 1),
    "minProperties": ("object", "minProperties", "maxProperties", -1),
    "maxProperties": ("object", "maxProperties", "minProperties", 1),
}
_BOUNDS = {"minimum": "exclusiveMaximum", "maximum": "exclusiveMinimum",
           "exclusiveMinimum": "maximum", "exclusiveMaximum": "minimum"}


def not_values(values: list, old_bounds: bool) -> Any:
    """Every instance except ``values`` (scalars only; None if an object or array is listed)."""
    if any(isinstance(x, (dict, list)) for x in values):
        return None
    out: list = [{"type": ["object", "array"]}]
    if not any(x is None for x in values):
        out.append({"type": "null"})
    bools = [b for b in (True, False) if not any(x is b for x in values)]
    if bools:
        out.append({"enum": bools})
    strings = [x for x in values if isinstance(x, str)]
    out.append({"type": "string", "x-halter-not-strings": strings} if strings else {"type": "string"})
    numbers = sorted({float(x) if isinstance(x, float) and not x.is_integer() else int(x)
                      for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)})
    if not numbers:
        out.append({"type": "number"})
    elif old_bounds:
        return None
    else:
        out.append({"type": "number", "exclusiveMaximum": numbers[0]})
        for a, b in zip(numbers, numbers[1:]):
            out.append({"type": "number", "exclusiveMinimum": a, "exclusiveMaximum": b})
        out.append({"type": "number", "exclusiveMinimum": numbers[-1]})
    return {"anyOf": out}


def rewrite(own: dict, resolve: Resolver, draft: str) -> tuple[dict, list[Any]]:
    """(``own`` without the keywords rewritten, the schemas to intersect with it instead).

    Keywords that cannot be rewritten stay in the returned dict for the converter to report.
    """
    rest = dict(own)
    extra: list[Any] = []
    if "not" in rest:
        n = negate(rest["not"], resolve, draft)
        if n is not None:
            extra.append(n)
            del rest["not"]
    if "if" in rest:
        then, other = rest.get("then", True), rest.get("else", True)
        if then is True and other is True:
            n: Any = True
        else:
            n = negate(rest["if"], resolve, draft)
            if n is not None:
                n = _or([{"allOf": [rest["if"], then]}, {"allOf": [n, other]}])
        if n is not None:
            extra.append(n)
            for k in ("if", "then", "else"):
                rest.pop(k, None)
    deps = dict(rest.get("dependentSchemas") or {})
    if isinstance(rest.get("dependencies"), dict):
        deps.update({k: v for k, v in rest["dependencies"].items() if not isinstance(v, list)})
        arrays = {k: v for k, v in rest["dependencies"].items() if isinstance(v, list)}
        if arrays:
            rest["dependencies"] = arrays
        else:
            del rest["dependencies"]
    rest.pop("dependentSchemas", None)
    for key, sub in deps.items():
        if sub is not True and sub != {}:
            extra.append({"anyOf": [{"properties": {key: False}}, {"allOf": [{"required": [key]}, sub]}]})
    return rest, extra
