"""``uniqueItems`` where it is regular: items drawn from a small finite set of values.

When every item position can only hold values from a finite set (``boolean``, ``null``,
``enum``/``const``, small integer ranges, unions of those), uniqueness is a finite automaton
whose state is the set of values written so far, so the array grammar is exact: a rule per
(position, values seen), at most ``MAX_VALUES`` distinct values in all. When only the prefix items
are finite (``prefixItems: [{type: boolean}, ...]`` followed by any items) the prefix is kept
duplicate-free and the later items are unconstrained (a superset; the caller still warns).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.grammar.ast import Expr, Literal, Repeat, RuleRef, alt
from halter.schemas import merge as merging
from halter.schemas.json_text import NEVER, cat
from halter.schemas.numbers import integer_bounds

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_VALUES = 8
_MAX_DEPTH = 8


def candidates(conv: "Converter", schema: Any, base: str, ptr: str, depth: int = 0) -> list | None:
    """A finite list of values containing every instance of ``schema`` (None: not finite)."""
    if schema is False:
        return []
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        target = conv.local_target(schema["$ref"], base, ptr)
        if target is None:
            return None
        got = candidates(conv, target, base, ptr, depth + 1)
        if got is not None or len(set(schema) - merging.ANNOTATIONS) == 1:
            return got
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema and isinstance(schema["enum"], list):
        return list(schema["enum"])
    types = merging.types_of(schema)
    if types is not None and types <= {"boolean", "null", "integer"}:
        out: list = []
        if "boolean" in types:
            out += [True, False]
        if "null" in types:
            out.append(None)
        if "integer" in types:
            lo, hi = integer_bounds(schema)
            if lo is None or hi is None or hi - lo >= MAX_VALUES:
                return None
            out += list(range(lo, hi + 1))
        return out
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            union: list = []
            for sub in schema[key]:
                got = candidates(conv, sub, base, ptr, depth + 1)
                if got is None:
                    return None
                union += got
            return union
    for sub in schema.get("allOf") or []:
        got = candidates(conv, sub, base, ptr, depth + 1)
        if got is not None:
            return got
    return None


def _values(conv: "Converter", schema: Any, base: str, ptr: str) -> list | None:
    """The distinct values ``schema`` accepts, when they are few and can be listed."""
    got = candidates(conv, schema, base, ptr)
    if got is None:
        return None
    seen: dict[str, Any] = {}
    for v in got:
        if merging._canon(v) not in seen and (schema is True or conv.valid(schema, v)):
            seen[merging._canon(v)] = v
    return list(seen.values()) if len(seen) <= MAX_VALUES else None


def unique_array(conv: "Converter", prefix_schemas: list, rest_schema: Any, lo: int, hi: int | None,
                 ptr: str, base: str) -> tuple[Expr | None, bool] | None:
    """``(grammar, exact)`` for a ``uniqueItems`` array whose prefix items have finite domains;
    None when even the first position is not finite (the caller builds the ordinary array)."""
    from halter.schemas.scalars import literal
    domains = [_values(conv, p, base, f"{ptr}/{i}") for i, p in enumerate(prefix_schemas)]
    rest = _values(conv, rest_schema, base, ptr)
    k = next((i for i, d in enumerate(domains) if d is None), len(domains))
    exact = k == len(domains) and rest is not None
    if k == 0 and not exact:
        return None
    all_values: dict[str, Any] = {}
    for d in [*domains[:k], rest or []]:
        for v in d:
            all_values.setdefault(merging._canon(v), v)
    if len(all_values) > MAX_VALUES:
        return None
    keys = list(all_values)
    js, ws = conv.js, conv.js.ws()
    hint = conv.hint(ptr)
    items = [conv.rules.add(f"{hint}-value", cat(literal(conv, all_values[c], ptr), ws)) for c in keys]
    allowed = [{keys.index(merging._canon(v)) for v in d} for d in domains[:k]]
    rest_allowed = None if rest is None else {keys.index(merging._canon(v)) for v in rest}
    tail = None
    if not exact:   # the items after the finite prefix: any value the schemas allow
        later = [conv.visit(p, f"{ptr}/prefixItems/{i}", base) for i, p in enumerate(prefix_schemas[k:], start=k)]
        tail = _plain_tail(conv, later, conv.visit(rest_schema, f"{ptr}/items", base), lo - k,
                           None if hi is None else hi - k)
    states: dict[tuple, RuleRef] = {}

    def state(i: int, seen: int) -> Expr:
        """After ``i`` items with the values ``seen`` (a bit set)."""
        if (i, seen) in states:
            return states[(i, seen)]
        ref = RuleRef(conv.rules.reserve(f"{hint}-u{i}"))
        states[(i, seen)] = ref
        opts: list[Expr] = []
        if i == k and not exact:
            if tail is not None:
                opts.append(tail)
        else:
            can = allowed[i] if i < k else rest_allowed
            if hi is None or i < hi:
                for j in sorted(can - {b for b in range(len(keys)) if seen >> b & 1}):
                    opts.append(cat(js.tok(",") if i else Literal(""), items[j], state(i + 1, seen | 1 << j)))
            if i >= lo:
                opts.append(Literal("]"))
        conv.rules.define(ref.name, alt(*opts) if opts else NEVER)
        return ref

    return cat(js.tok("["), state(0, 0)), exact


def _plain_tail(conv: "Converter", later: list, rest: Expr | None, need: int, room: int | None) -> Expr | None:
    """``(, item)*`` then ``]``: the remaining prefix positions, then rest items, within the counts."""
    js, ws = conv.js, conv.js.ws()
    need = max(need, 0)

    def after(n: int) -> Expr | None:
        if room is not None and n >= room:
            return Literal("]") if n >= need else None
        opts: list[Expr] = []
        if n >= need:
            opts.append(Literal("]"))
        if n < len(later):
            if later[n] is not None:
                nxt = after(n + 1)
                if nxt is not None:
                    opts.append(cat(js.tok(","), later[n], ws, nxt))
        elif rest is not None:
            more_need = max(need - n, 0)
            more_room = None if room is None else room - n
            if more_room is None or more_room > 0:
                rep = Repeat(cat(js.tok(","), rest, ws), max(more_need, 1), more_room)
                opts.append(cat(rep, Literal("]")))
        return alt(*opts) if opts else None
    return after(0)
