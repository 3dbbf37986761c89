"""Which value schema applies to which key: ``patternProperties``, ``additionalProperties`` and
``propertyNames`` partitioned exactly with automata.

A key that matches the patterns in a set T must have a value valid under every pattern schema in
T (and under its own property schema if it is a known name); a key matching no pattern and no
known name gets ``additionalProperties``; every key must fit ``propertyNames``. ``partition_keys``
runs the pattern DFAs, a trie of the known names and the ``propertyNames`` DFA in lockstep
(char_automaton.product_states) and reads off, for each set T that some key reaches, the keys
that are in exactly the patterns of T, are no known name and fit ``propertyNames``. Sets whose
merged value grammars are equal share one key grammar. It returns None (the caller then uses the
approximations below, with warnings) when a pattern cannot be written as a DFA, the product
exceeds its state limit, or more than ``MAX_KEY_CLASSES`` sets occur.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from halter.grammar.ast import Expr, Literal, Repeat
from halter.schemas import merge as merging
from halter.schemas.automaton_grammar import dfa_to_expr
from halter.schemas.char_automaton import (AutomatonTooLarge, Dfa, length_range_dfa, literal_set,
                                           product, product_states, trim)
from halter.schemas.json_text import cat
from halter.schemas.refs import pointer_escape

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_KEY_CLASSES = 16
"""Most distinct "matches exactly these patterns" key classes written out for one object."""
_NAME_KEYWORDS = {"type", "pattern", "minLength", "maxLength", "format", "enum", "const"}


def names_dfa(conv: "Converter", names_schema: Any, ptr: str) -> Dfa | None:
    """The DFA of the strings valid under a ``propertyNames`` schema made of pattern, length,
    format and string enum/const keywords; None for any other schema (or one too large)."""
    if not isinstance(names_schema, dict) or set(names_schema) - merging.ANNOTATIONS - _NAME_KEYWORDS:
        return None
    if names_schema.get("type", "string") not in ("string", ["string"]):
        return None
    dfas = []
    pat = names_schema.get("pattern")
    if isinstance(pat, str):
        d = conv.strings.pattern_dfa(pat, ptr)
        if d is None:
            return None
        dfas.append(d)
    fmt = names_schema.get("format")
    if fmt is not None:
        if fmt not in conv.formats:
            return None
        expr = conv.strings.pattern_expr(conv.formats[fmt], ptr, anchored=True)
        d = conv.strings.expr_dfa(expr) if expr is not None else None
        if d is None:
            return None
        dfas.append(d)
    for kw in ("enum", "const"):
        if kw in names_schema:
            values = names_schema[kw] if kw == "enum" else [names_schema[kw]]
            try:
                dfas.append(literal_set([v for v in values if isinstance(v, str)]))
            except AutomatonTooLarge:
                return None
    lo, hi = int(names_schema.get("minLength", 0)), names_schema.get("maxLength")
    if lo or hi is not None:
        dfas.append(length_range_dfa(lo, None if hi is None else int(hi)))
    if not dfas:
        return length_range_dfa(0, None)
    try:
        return dfas[0] if len(dfas) == 1 else product(dfas, all)
    except AutomatonTooLarge:
        return None


def partition_keys(conv: "Converter", pattern_props: dict, additional: Any, known: list[str],
                   names: Dfa | None, ptr: str, base: str,
                   sides: list | None = None) -> list[tuple[Expr, Expr]] | None:
    """(key grammar, value grammar) pairs covering every key that is not a known name.

    ``sides`` (``x-halter-sides``, merge.py): ``[names, patterns, additionalProperties]`` of
    ``allOf`` members; a key matching none of a member's patterns also takes its
    ``additionalProperties``."""
    pats = list(pattern_props)
    dfas = [conv.strings.pattern_dfa(p, f"{ptr}/patternProperties") for p in pats]
    if any(d is None for d in dfas):
        return None
    try:
        components = [*dfas, literal_set(known)] + ([names] if names is not None else [])
        joint, parts = product_states(components)
    except AutomatonTooLarge:
        return None
    k = len(pats)

    def label(tup: tuple[int, ...]) -> frozenset[int] | None:
        ok = [q >= 0 and d.accept[q] for d, q in zip(components, tup)]
        if ok[k] or (names is not None and not ok[k + 1]):
            return None         # a known name (own rule) or a name propertyNames forbids
        return frozenset(i for i in range(k) if ok[i])

    labels = [label(t) for t in parts]
    classes = sorted({lb for lb in labels if lb is not None}, key=lambda s: (len(s), sorted(s)))
    if len(classes) > MAX_KEY_CLASSES:
        return None
    values: dict[frozenset[int], Expr | None] = {}
    for cls in classes:
        if not cls:
            values[cls] = None if additional is False else conv.visit(additional, f"{ptr}/additionalProperties", base)
            continue
        sub: Any = True
        for i in sorted(cls):
            sub = pattern_props[pats[i]] if sub is True else merging._both(sub, pattern_props[pats[i]])
        for _, side_patterns, side_additional in sides or ():
            if not any(pats[i] in side_patterns for i in cls):
                sub = merging._both(sub, side_additional)
        first = pats[min(cls)]
        values[cls] = conv.visit(sub, f"{ptr}/patternProperties/{pointer_escape(first)}", base)
    groups: dict[Expr, set[frozenset[int]]] = {}
    for cls, value in values.items():
        if value is not None:
            groups.setdefault(value, set()).add(cls)
    out = []
    for value, members in groups.items():
        keys = trim(replace(joint, accept=[lb in members for lb in labels]))
        try:
            key = _plain_key(conv, keys, members, len(classes), names, pats, dfas, known, ptr)
            if key is None:
                body = dfa_to_expr(keys, conv.js, conv.hint(ptr) + "-key", Literal('"'))
                key = None if body is None else conv.rules.add(conv.hint(ptr) + "-key", cat(Literal('"'), body))
        except AutomatonTooLarge:
            return None
        if key is not None:
            out.append((key, value))
    return out


def _plain_key(conv: "Converter", keys: Dfa, members: set, n_classes: int, names: Dfa | None,
               pats: list[str], dfas: list[Dfa], known: list[str], ptr: str) -> Expr | None:
    """The key grammar without an automaton when it is simply "every key but the known names" or
    exactly one pattern's language: the regex tree keeps counted repeats (``[a-z]{1,255}``) that
    an automaton would unroll into a chain of states."""
    from halter.schemas.objects import key_complement
    if len(members) == n_classes and names is None:
        return key_complement(conv.js, known)
    if len(members) == 1:
        (cls,) = members
        if len(cls) == 1:
            (i,) = cls
            if keys.minus(dfas[i]).is_empty() and dfas[i].minus(keys).is_empty():
                expr = conv.strings.pattern_expr(pats[i], f"{ptr}/patternProperties")
                return cat(Literal('"'), conv.js.encode_expr(expr), Literal('"'))
    return None


# ---------------------------------------------------------------------------------------------
# approximations, when the automata would be too large

def key_pattern(conv: "Converter", pattern: str, known: list[str], ptr: str) -> Expr:
    """Keys matching ``pattern``; ``known`` are the names whose own rule is stricter."""
    from halter.schemas.strings import ANY_CHAR, to_python_regex
    expr = conv.strings.pattern_expr(pattern, ptr) or Repeat(ANY_CHAR, 0, None)
    rx = to_python_regex(expr)
    if any(re.fullmatch(rx, k, re.S) for k in known):
        conv.unsupported("patternProperties", ptr, "a known property name also matches the pattern")
    return cat(Literal('"'), conv.js.encode_expr(expr), Literal('"'))


def key_schema(conv: "Converter", names_schema: Any, known: list[str], ptr: str, base: str) -> Expr | None:
    """Extra keys valid under a ``propertyNames`` schema (known names not excluded)."""
    if names_schema is False:
        return None
    if any(conv.valid(names_schema, k) for k in known):   # names with a stricter rule
        conv.unsupported("propertyNames", ptr, "known property names also fit propertyNames")
    sub = dict(names_schema) if isinstance(names_schema, dict) else {}
    sub["type"] = "string"
    return conv.visit(sub, ptr, base)


def pattern_keys(conv: "Converter", pattern_props: dict, additional: Any, known: list[str], ptr: str,
                 base: str) -> list[tuple[Expr, Expr]]:
    """Each pattern's keys with its own value, extra keys with ``additional`` (with warnings)."""
    from halter.schemas.objects import key_complement
    out = []
    for pat, psub in pattern_props.items():
        value = conv.visit(psub, f"{ptr}/patternProperties/{pointer_escape(pat)}", base)
        if value is not None:
            out.append((key_pattern(conv, pat, known, f"{ptr}/patternProperties"), value))
    restrictive = any(psub not in (True, {}) for psub in pattern_props.values())
    if len(pattern_props) > 1 and restrictive:
        conv.unsupported("patternProperties", ptr, "a key matching several patterns must satisfy all of them")
    if additional is not False:
        if restrictive:
            conv.unsupported("patternProperties", ptr, "keys matching a pattern could be written as additional properties")
        value = conv.visit(additional, f"{ptr}/additionalProperties", base)
        if value is not None:
            out.append((key_complement(conv.js, known), value))
    return out
