"""Which subschemas constrain a place in a JSON instance: an and/or formula over the schema.

Checks that run beside the grammar (``uniqueItems``, see ``unique_check``) walk an instance as it
is written; each value gets the formula of the subschemas that apply to it, built from its
container's formula and its key or index. The formula never claims more than the schema does:
keywords whose effect depends on other parts of the instance (``if``/``then``/``else``, ``not``,
``dependentSchemas``, ``unevaluated*``, ``contains``, dynamic references) are left out of
conjunctions, and every ``anyOf``/``oneOf`` branch is kept as an alternative, so a requirement the
formula implies holds for every valid instance: a check built on it never rejects one.

A formula is ``TRUE`` (nothing known), ``NEVER`` (no value can be valid here), ``("s", schema,
base)`` (a subschema, not yet expanded), ``("d", schema, base)`` (a subschema's own keywords, its
applicators expanded), ``("and", parts)`` or ``("or", parts)``.
"""
from __future__ import annotations

import re
from typing import Any

from halter.errors import SchemaError
from halter.schemas.refs import DEFAULT_BASE, RefIndex

TRUE: tuple = ("t",)
NEVER: tuple = ("f",)
_OLD_DRAFTS = ("draft4", "draft6", "draft7")
_OLD_ITEMS = ("draft4", "draft6", "draft7", "draft2019")


def conj(parts: list) -> tuple:
    out: list = []
    for p in parts:
        if p is NEVER:
            return NEVER
        if p is TRUE:
            continue
        out.extend(p[1] if p[0] == "and" else (p,))
    if not out:
        return TRUE
    return out[0] if len(out) == 1 else ("and", tuple(out))


def disj(parts: list) -> tuple:
    out: list = []
    for p in parts:
        if p is TRUE:
            return TRUE
        if p is NEVER:
            continue
        out.extend(p[1] if p[0] == "or" else (p,))
    if not out:
        return NEVER
    return out[0] if len(out) == 1 else ("or", tuple(out))


def schema_types(schema: Any) -> set[str] | None:
    """The JSON types ``schema`` names with ``type`` (``integer`` counted as ``number``), None: any."""
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    t = schema["type"]
    names = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
    return {"number" if n == "integer" else n for n in names}


class InstanceSchemas:
    """Formulas for one schema document; ``root`` is the formula of the whole instance."""

    def __init__(self, schema: Any, draft: str) -> None:
        self.draft = draft
        self.index = RefIndex(schema, draft)
        self.root = self.leaf(schema, DEFAULT_BASE)
        self._expanded: dict[tuple, tuple] = {}
        self._expanding: set[tuple] = set()
        self._patterns: dict[str, re.Pattern | None] = {}

    @staticmethod
    def leaf(schema: Any, base: str) -> tuple:
        if schema is False:
            return NEVER
        if not isinstance(schema, dict) or not schema:
            return TRUE
        return ("s", schema, base)

    # -- expansion ------------------------------------------------------------------------------
    def expand(self, f: tuple, kind: str) -> tuple:
        """``f`` with every subschema leaf opened up, for a value of JSON type ``kind``."""
        tag = f[0]
        if tag == "s":
            return self._expand_schema(f[1], f[2], kind)
        if tag == "and":
            return conj([self.expand(p, kind) for p in f[1]])
        if tag == "or":
            return disj([self.expand(p, kind) for p in f[1]])
        return f

    def _expand_schema(self, s: dict, base: str, kind: str) -> tuple:
        key = (id(s), str(base), kind)
        got = self._expanded.get(key)
        if got is not None:
            return got
        if key in self._expanding:        # a $ref cycle through applicators: drop the repeat
            return TRUE
        self._expanding.add(key)
        try:
            got = self._expand_uncached(s, base, kind)
        finally:
            self._expanding.discard(key)
        self._expanded[key] = got
        return got

    def _expand_uncached(self, s: dict, base: str, kind: str) -> tuple:
        types = schema_types(s)
        if types is not None and kind not in types:
            return NEVER
        if isinstance(s.get("$id"), str) and not (self.draft in _OLD_DRAFTS and "$ref" in s):
            base = self.index.enter_id(base, s["$id"], s)
        ref = s.get("$ref")
        target = None
        if isinstance(ref, str):
            try:
                t, tbase, _ = self.index.resolve(ref, base, "#")
                target = self.expand(self.leaf(t, tbase), kind)
            except SchemaError:
                target = TRUE
            if self.draft in _OLD_DRAFTS:         # draft 7 and older: $ref hides its siblings
                return target
        parts = [("d", s, base)]
        if target is not None:
            parts.append(target)
        for sub in s.get("allOf", ()) if isinstance(s.get("allOf"), list) else ():
            parts.append(self.expand(self.leaf(sub, base), kind))
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list):
                parts.append(disj([self.expand(self.leaf(b, base), kind) for b in s[kw]]))
        return conj(parts)

    # -- questions ------------------------------------------------------------------------------
    def requires(self, f: tuple, keyword: str) -> bool:
        """Does every valid value under the expanded formula ``f`` have ``keyword: true``?"""
        tag = f[0]
        if tag == "d":
            return f[1].get(keyword) is True
        if tag == "and":
            return any(self.requires(p, keyword) for p in f[1])
        if tag == "or":
            return all(self.requires(p, keyword) for p in f[1])
        return f is NEVER

    def child(self, f: tuple, step: str | int) -> tuple:
        """The formula of the value at key ``step`` (an object's) or index ``step`` (an array's)."""
        tag = f[0]
        if tag == "d":
            return self._direct_child(f[1], f[2], step)
        if tag == "and":
            return conj([self.child(p, step) for p in f[1]])
        if tag == "or":
            return disj([self.child(p, step) for p in f[1]])
        return f

    def _direct_child(self, s: dict, base: str, step: str | int) -> tuple:
        if isinstance(step, int):
            if self.draft in _OLD_ITEMS and isinstance(s.get("items"), list):
                prefix, rest = s["items"], s.get("additionalItems", True)
            else:
                prefix, rest = s.get("prefixItems") or [], s.get("items", True)
            return self.leaf(prefix[step] if step < len(prefix) else rest, base)
        parts = []
        props = s.get("properties")
        matched = isinstance(props, dict) and step in props
        if matched:
            parts.append(self.leaf(props[step], base))
        unknown = False
        pattern_props = s.get("patternProperties")
        if isinstance(pattern_props, dict):
            for pattern, sub in pattern_props.items():
                rx = self._pattern(pattern)
                if rx is None:
                    unknown = True               # cannot tell: drop it (and additionalProperties)
                elif rx.search(step):
                    matched = True
                    parts.append(self.leaf(sub, base))
        if not matched and not unknown and "additionalProperties" in s:
            parts.append(self.leaf(s["additionalProperties"], base))
        return conj(parts)

    def _pattern(self, pattern: str) -> re.Pattern | None:
        if pattern not in self._patterns:
            self._patterns[pattern] = python_regex(pattern)
        return self._patterns[pattern]


def python_regex(pattern: str) -> re.Pattern | None:
    """``pattern`` (ECMAScript) as a Python regex searching the same way, or None when unsure.

    ECMAScript's ``$`` is the end of the input (Python's ``\\Z``) and its ``\\d``/``\\w``/``\\b`` are
    ASCII; escapes that differ (``\\s``, ``\\p``, ``\\c``, ``\\u{...}``, ``\\k``) give None.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt in ("s", "S", "p", "P", "c", "k", "") or pattern[i + 1:i + 3] == "u{":
                return None
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c == "$" and not in_class:
            c = r"\Z"
        elif c == "(" and pattern[i + 1:i + 2] == "?" and pattern[i + 2:i + 3] not in (":", "=", "!"):
            return None                            # named groups, lookbehind, flags: not the same
        out.append(c)
        i += 1
    try:
        return re.compile("".join(out), re.ASCII)
    except re.error:
        return None


def has_true_keyword(schema: Any, keyword: str) -> bool:
    """Does ``keyword: true`` occur anywhere in the schema document (a quick screen)?"""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get(keyword) is True:
                return True
            stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        elif isinstance(node, list):
            stack.extend(node)
    return False
