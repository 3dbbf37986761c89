"""Array schemas: ``prefixItems``/``items`` (and draft-7 ``items`` lists with ``additionalItems``),
``minItems``/``maxItems``, ``contains`` with ``minContains``, ``unevaluatedItems`` as a fallback.

``contains`` is regular: ``[ (item ,)* match (, item)* ]`` where ``match`` is an item that also
matches the ``contains`` schema (``minContains`` = m repeats the ``match`` part m times). It is
exact without prefix items, without ``maxContains`` and when ``minItems`` <= m and there is no
``maxItems``; other combinations are reported as unsupported. ``uniqueItems`` is exact when the
items have a few possible values (``unique_items``), otherwise reported.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.grammar.ast import Expr, Literal, Repeat, RuleRef, alt
from halter.schemas import logic
from halter.schemas.json_text import cat
from halter.schemas.unique_items import unique_array

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

_OLD_ITEMS = ("draft4", "draft6", "draft7", "draft2019")
_UNIQUE_WHY = {
    False: "uniqueness of items is not context-free (a grammar enforces it only among items with a "
           "few possible values; Grammar.from_json_schema checks it beside the grammar)",
    True: "uniqueness of items is not context-free, and the check beside the grammar cannot always "
          "tell which arrays need it here (anyOf/oneOf branches of overlapping types, or a keyword "
          "such as if/then/else, not or dependentSchemas on the way); it checks the others",
}


def array_grammar(conv: "Converter", s: dict, ptr: str, base: str) -> Expr | None:
    js, ws = conv.js, conv.js.ws()
    if conv.draft in _OLD_ITEMS and isinstance(s.get("items"), list):
        prefix_schemas, rest_schema, rest_key = s["items"], s.get("additionalItems", True), "additionalItems"
        prefix_key = "items"
    else:
        prefix_schemas, rest_schema, rest_key = s.get("prefixItems") or [], s.get("items", True), "items"
        prefix_key = "prefixItems"
    if "unevaluatedItems" in s and rest_schema is True:
        rest_schema = s["unevaluatedItems"]
    lo = int(s.get("minItems", 0))
    hi = s.get("maxItems")
    hi = None if hi is None else int(hi)
    if s.get("uniqueItems") is True and not (hi is not None and hi <= 1):
        got = None if "contains" in s else unique_array(conv, prefix_schemas, rest_schema, lo, hi, ptr, base)
        if got is None or not got[1]:
            if conv.unique_checked:
                conv.needs_unique_check = True
            if conv.unique_checked != "exact":
                conv.unsupported("uniqueItems", ptr, _UNIQUE_WHY[conv.unique_checked is not None])
        if got is not None:
            return got[0]
    prefix = [conv.visit(p, f"{ptr}/{prefix_key}/{i}", base) for i, p in enumerate(prefix_schemas)]
    rest = conv.visit(rest_schema, f"{ptr}/{rest_key}", base)
    # the longest possible array: a position no value can take ends it
    k = len(prefix)
    for i, p in enumerate(prefix):
        if p is None:
            k = i
            break
    if rest is None or k < len(prefix):
        hi = k if hi is None else min(hi, k)
    contains = _contains(conv, s, ptr)
    if contains is not None:
        min_c, max_c = contains
        if max_c is not None and min_c > max_c:
            return None
        if s["contains"] is True or s["contains"] == {}:
            lo = max(lo, min_c)
            hi = max_c if hi is None else (hi if max_c is None else min(hi, max_c))
        elif s["contains"] is False:
            if min_c > 0:       # nothing matches: only minContains 0 (then any count is 0) passes
                return None
        elif k == 0 and max_c is None and hi is None and lo <= min_c and rest is not None:
            both = s["contains"] if rest_schema is True else {"allOf": [rest_schema, s["contains"]]}
            match = conv.visit(both, f"{ptr}/contains", base)
            if match is None:
                return None
            return _containing(conv, cat(rest, ws), cat(match, ws), min_c)
        elif k == 0 and hi is None and lo <= min_c and rest is not None and \
                (other := logic.negate(s["contains"], lambda r: conv.local_target(r, base, ptr), conv.draft)) is not None:
            match = conv.visit(s["contains"] if rest_schema is True else {"allOf": [rest_schema, s["contains"]]},
                               f"{ptr}/contains", base)
            non = conv.visit(other if rest_schema is True else {"allOf": [rest_schema, other]}, f"{ptr}/contains", base)
            return _counted(conv, None if non is None else cat(non, ws), None if match is None else cat(match, ws),
                            min_c, max_c)
        else:
            conv.unsupported("contains", ptr, "exact only without prefixItems and maxItems, and maxContains "
                                              "only when the contains schema can be negated")
    if hi is not None and lo > hi:
        return None
    hint = conv.hint(ptr)
    items = [conv.rules.add(f"{hint}-item-{i}", cat(p, ws)) if not isinstance(p, RuleRef) else cat(p, ws)
             for p, i in zip(prefix[:k], range(k))]
    rest_item = cat(rest, ws) if rest is not None else None

    def sep(i: int) -> Expr:
        return js.tok(",") if i > 0 else Literal("")

    def from_(i: int) -> Expr:
        """Elements i.. (element i is the next one)."""
        if i < k and (hi is None or i < hi):
            nxt = cat(sep(i), items[i], from_(i + 1))
            return alt(nxt, Literal("")) if i >= lo else nxt
        if rest_item is None or (hi is not None and i >= hi):
            return Literal("")
        need = max(lo - i, 0)
        room = None if hi is None else hi - i
        if i == 0:
            more = cat(rest_item, Repeat(cat(js.tok(","), rest_item), max(need - 1, 0), None if room is None else room - 1))
            return more if need > 0 else Repeat(more, 0, 1)
        return Repeat(cat(js.tok(","), rest_item), need, room)

    return cat(js.tok("["), from_(0), Literal("]"))


def _contains(conv: "Converter", s: dict, ptr: str) -> tuple[int, int | None] | None:
    """(minContains, maxContains) when ``contains`` applies, else None (absent or minContains 0)."""
    if "contains" not in s:          # (draft 4 has no contains, 6 and 7 no counts: drafts.py)
        return None
    min_c: Any = s.get("minContains", 1)
    max_c: Any = s.get("maxContains")
    min_c = int(min_c)
    max_c = None if max_c is None else int(max_c)
    if min_c == 0 and max_c is None:
        return None
    return min_c, max_c


def _containing(conv: "Converter", item: Expr, match: Expr, m: int) -> Expr:
    """``[`` items with at least ``m`` of them ``match`` ``]`` (``item`` accepts any element)."""
    js = conv.js
    before = Repeat(cat(item, js.tok(",")), 0, None)
    first = cat(before, match)
    more = Repeat(cat(js.tok(","), before, match), m - 1, m - 1) if m > 1 else Literal("")
    after = Repeat(cat(js.tok(","), item), 0, None)
    if m == 0:
        return cat(js.tok("["), Repeat(cat(item, after), 0, 1), Literal("]"))
    return cat(js.tok("["), first, more, after, Literal("]"))


def _counted(conv: "Converter", non: Expr | None, match: Expr | None, m: int, most: int | None) -> Expr | None:
    """``[`` elements of which between ``m`` and ``most`` are ``match`` and the rest ``non`` ``]``.

    ``match`` and ``non`` must be disjoint (an item and the negation of the contains schema)."""
    js = conv.js
    empty_ok = m == 0
    if match is None or most == 0:
        if m > 0:
            return None
        body = None if non is None else cat(non, Repeat(cat(js.tok(","), non), 0, None))
        return cat(js.tok("["), Repeat(body, 0, 1) if body is not None else Literal(""), Literal("]"))
    nons = Repeat(cat(js.tok(","), non), 0, None) if non is not None else Literal("")
    first = alt(cat(non, nons, js.tok(","), match), match) if non is not None else match
    more = Repeat(cat(js.tok(","), match, nons), max(m - 1, 0), None if most is None else most - 1)
    body = cat(first, nons, more)
    if empty_ok:
        body = alt(body, cat(non, nons)) if non is not None else body
        return cat(js.tok("["), Repeat(body, 0, 1), Literal("]"))
    return cat(js.tok("["), body, Literal("]"))