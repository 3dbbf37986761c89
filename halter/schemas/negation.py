"""Negation as a positive schema, a little beyond ``logic.negate``, for the unevaluated* rewrite.

Adds what that rewrite produces and needs to negate (a failing ``oneOf`` branch or ``if`` evaluates
nothing, so "not that branch" is part of a case): ``prefixItems`` (some leading item fails its
schema), closed objects (``additionalProperties: false`` with at most ``MAX_NEGATED_NAMES`` named
properties: more keys are present than named ones, written as a union over the subsets of the
names) and keywords that can never fail (``properties: {x: true}``, ``items: true``...), which are
dropped first. Everything else is ``logic.negate``'s.
"""
from __future__ import annotations

import itertools
from typing import Any

from halter.schemas import logic
from halter.schemas import merge as merging

MAX_NEGATED_NAMES = 3
_MAX_DEPTH = 16
_NEVER_FAIL = {"items", "additionalItems", "additionalProperties", "unevaluatedItems", "unevaluatedProperties",
               "propertyNames", "then", "else"}


def negate(s: Any, resolve: logic.Resolver, draft: str, depth: int = 0) -> Any:
    """A schema accepting exactly what ``s`` rejects, or None if none can be written."""
    if s is True or s is False:
        return not s
    if not isinstance(s, dict) or depth > _MAX_DEPTH:
        return None
    rest = _validity(s)
    pieces: list = []
    if rest.get("additionalProperties") is False and not rest.get("patternProperties"):
        # some key outside the named ones: more keys than the named ones present
        del rest["additionalProperties"]
        names = sorted(rest.get("properties") or {})
        if len(names) > MAX_NEGATED_NAMES:
            return None
        for r in range(len(names) + 1):
            for present in itertools.combinations(names, r):
                pieces.append({"type": "object", "required": list(present), "minProperties": r + 1,
                               "properties": {n: False for n in names if n not in present}})
    if isinstance(rest.get("prefixItems"), list) and "items" not in rest:
        # some leading item fails its prefixItems schema
        for i, p in enumerate(rest.pop("prefixItems")):
            n = negate(p, resolve, draft, depth + 1)
            if n is None:
                return None
            if n is not False:
                pieces.append({"type": "array", "minItems": i + 1, "prefixItems": [{}] * i + [n]})
    if isinstance(rest.get("anyOf"), list):
        negs = [negate(x, resolve, draft, depth + 1) for x in rest.pop("anyOf")]
        if any(n is None for n in negs):
            return None
        pieces.append({"allOf": negs})
    if isinstance(rest.get("allOf"), list):
        negs = [negate(x, resolve, draft, depth + 1) for x in rest.pop("allOf")]
        if any(n is None for n in negs):
            return None
        pieces.extend(negs)
    if set(rest) - merging.ANNOTATIONS:
        n = logic.negate(rest, resolve, draft)
        if n is None:
            return None
        pieces.append(n)
    pieces = [p for p in pieces if p is not False]
    if any(p is True for p in pieces):
        return True
    return False if not pieces else pieces[0] if len(pieces) == 1 else {"anyOf": pieces}


def _validity(s: dict) -> dict:
    """``s`` without the keywords that can never fail (``properties: {x: true}``, ``items: true``...)."""
    out = {k: v for k, v in s.items() if not (k in _NEVER_FAIL and v in (True, {}))}
    for k in ("properties", "patternProperties"):
        if isinstance(out.get(k), dict) and "additionalProperties" not in out:   # names matter then
            kept = {n: v for n, v in out[k].items() if v not in (True, {})}
            if kept:
                out[k] = kept
            else:
                del out[k]
    return out
