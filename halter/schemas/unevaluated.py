"""``unevaluatedProperties``/``unevaluatedItems`` rewritten into keywords the converter enforces.

A property (item) is *evaluated* when a subschema that succeeds at the same instance location
evaluated it through ``properties``/``patternProperties``/``additionalProperties``
(``prefixItems``/``items``/``contains``) or its own ``unevaluated*``, across ``allOf``,
``anyOf``, ``oneOf``, ``if``/``then``/``else``, ``dependentSchemas`` and ``$ref``. The schema is
split into *cases*: a list of conjuncts (``parts``) and what they evaluate (``Ev``), whose union is
the schema. Evaluation is monotone, so ``anyOf`` becomes the union over the non-empty subsets of
its branches (exact without negation: a smaller subset only asks more of the instance); ``oneOf``
is "branch i and not the others"; ``if`` is ``(if and then) or (not if and else)``. Each case then
gets the ordinary keywords that say "the keys (items) it did not evaluate satisfy U":
``properties``/``patternProperties`` naming the evaluated ones and ``additionalProperties: U``
(``prefixItems`` of the evaluated count and ``items: anyOf[contains..., U]``). Subschemas whose
cases all evaluate the same stay whole (no blow-up), and cases that evaluate the same are united.
Beyond ``MAX_SUBSET_BRANCHES`` differently-evaluating ``anyOf`` branches or ``MAX_CASES`` cases
the keyword is dropped (a superset; a warning, or an error in strict mode).

A ``not`` over a subschema using unevaluated* is replaced by the positive negation of that
subschema's rewrite when ``negation.negate`` can write one (else the converter reports ``not``).

``prepare`` is the converter's hook: it also turns ``$dynamicRef``/``$recursiveRef`` into a
``$ref`` to their static resolution in the current dynamic scope (see ``refs.RefIndex``).
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from halter.errors import SchemaError
from halter.schemas import merge as merging
from halter.schemas import negation, one_of

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_SUBSET_BRANCHES = 4
"""anyOf branches that evaluate differently: the rewrite takes every non-empty subset of them."""
MAX_CASES = 64
MAX_NESTING = 16

_NEW_DRAFTS = ("draft2019", "draft2020")
_IN_PLACE = {"allOf", "anyOf", "oneOf", "if", "then", "else", "dependentSchemas", "$ref", "$dynamicRef",
             "$recursiveRef", "unevaluatedProperties", "unevaluatedItems"}
_DROP = {"$id", "$defs", "definitions", "$schema", "$anchor", "$dynamicAnchor", "$recursiveAnchor",
         "$comment", "$vocabulary"}


class _Fallback(Exception):
    """The rewrite would be too big (or recurse): the caller drops the keyword instead."""


@dataclass(frozen=True)
class Ev:
    """What a successful case evaluates: property names/patterns or all; leading items, contains."""
    names: frozenset = frozenset()
    patterns: frozenset = frozenset()
    all_props: bool = False
    prefix: int = 0
    all_items: bool = False
    contains: frozenset = frozenset()    # JSON texts of contains schemas (already relocated)

    def __or__(self, o: "Ev") -> "Ev":
        return Ev(self.names | o.names, self.patterns | o.patterns, self.all_props or o.all_props,
                  max(self.prefix, o.prefix), self.all_items or o.all_items, self.contains | o.contains).norm()

    def norm(self) -> "Ev":
        e = self
        if e.all_props and (e.names or e.patterns):
            e = replace(e, names=frozenset(), patterns=frozenset())
        if e.all_items and (e.prefix or e.contains):
            e = replace(e, prefix=0, contains=frozenset())
        return e


NOTHING = Ev()
Case = tuple[list, Ev]


def prepare(conv: "Converter", schema: dict, ptr: str, base: str) -> Any:
    """``schema`` with dynamic references made static and its ``unevaluated*`` rewritten."""
    if conv.draft not in _NEW_DRAFTS:        # (which have no dynamic references: drafts.py)
        return schema
    dyn = [k for k in ("$dynamicRef", "$recursiveRef") if isinstance(schema.get(k), str)]
    negated = isinstance(schema.get("not"), dict) and _has_unevaluated(schema["not"])
    if not dyn and not negated and "unevaluatedProperties" not in schema and "unevaluatedItems" not in schema:
        return schema
    cache = conv.__dict__.setdefault("_unevaluated_cache", {})
    key = (id(schema), str(base), conv.index.scope_key(base))
    if key in cache:
        return cache[key][1]
    out = conv.index.static_refs(schema, base, "#" + ptr)
    if negated:
        # "not" over unevaluated*: the rewrite of its subschema, negated positively when it can be
        try:
            rewriter = _Rewriter(conv, ptr + "/not", base)
            n = rewriter._negate(rewriter.top(out["not"]))
        except _Fallback:
            n = None
        if n is not None:
            out = {k: v for k, v in out.items() if k != "not"}
            out["allOf"] = [*(out.get("allOf") or []), n]
    if "unevaluatedProperties" in out or "unevaluatedItems" in out:
        try:
            out = _Rewriter(conv, ptr, base).top(out)
        except _Fallback as e:
            for kw in ("unevaluatedProperties", "unevaluatedItems"):
                if kw in out:
                    conv.unsupported(kw, ptr, str(e))
            out = {k: v for k, v in out.items() if k not in ("unevaluatedProperties", "unevaluatedItems")}
    cache[key] = (schema, out)
    return out


class _Rewriter:
    def __init__(self, conv: "Converter", ptr: str, base: str) -> None:
        self.conv = conv
        self.index = conv.index
        self.ptr = ptr
        self.base0 = base
        self.new_items = conv.draft == "draft2020"

    # -- entry -------------------------------------------------------------------------------
    def top(self, schema: dict) -> Any:
        cases = self.cases(schema, self.base0, 0, top=True)
        if not cases:
            return False
        options = [_all(parts) for parts, _ in cases]
        return options[0] if len(options) == 1 else {"anyOf": options}

    # -- cases -------------------------------------------------------------------------------
    def cases(self, s: Any, base: str, depth: int, top: bool = False) -> list[Case]:
        if s is False:
            return []
        if s is True or not isinstance(s, dict) or not set(s) - merging.ANNOTATIONS:
            return [([], NOTHING)]
        if depth > MAX_NESTING:
            raise _Fallback("in-place applicators nest or recurse too deeply")
        if not top:
            if isinstance(s.get("$id"), str):
                base = self.index.enter_id(base, s["$id"], s)
            s = self.index.static_refs(s, base, "#" + self.ptr)
        own = {k: v for k, v in s.items() if k not in _IN_PLACE and k not in _DROP}
        result: list[Case] = [([self.part(own, base)] if own else [], self.own_ev(own, base))]
        for factor in self.factors(s, base, depth):
            result = _product(result, factor)
        uprops, uitems = s.get("unevaluatedProperties", True), s.get("unevaluatedItems", True)
        if "unevaluatedProperties" in s or "unevaluatedItems" in s:
            closed = []
            for parts, ev in result:
                extra = [c for c in (self.closure_props(parts, ev, uprops, base),
                                     self.closure_items(ev, uitems, base)) if c is not None]
                ev = replace(ev, all_props=ev.all_props or "unevaluatedProperties" in s,
                             all_items=ev.all_items or "unevaluatedItems" in s).norm()
                closed.append((parts + extra, ev))
            result = closed
        return _group(result)

    def factors(self, s: dict, base: str, depth: int) -> list[list[Case]]:
        out = []
        if isinstance(s.get("$ref"), str):
            target, tbase, tptr = self.index.resolve(s["$ref"], base, "#" + self.ptr)
            ref = {"$ref": self.index.absolute(str(tbase), tptr)}
            out.append(self.sub(target, tbase, depth, whole=ref))
        for x in s.get("allOf") or []:
            out.append(self.sub(x, base, depth))
        if s.get("anyOf"):
            out.append(self.any_of(s["anyOf"], base, depth))
        if s.get("oneOf"):
            out.append(self.one_of(s["oneOf"], base, depth))
        if "if" in s:
            out.append(self.if_then_else(s, base, depth))
        for key, dep in (s.get("dependentSchemas") or {}).items():
            dc = self.sub(dep, base, depth)
            if all(ev == NOTHING for _, ev in dc):
                out.append([([{"dependentSchemas": {key: self.part(dep, base)}}], NOTHING)])
            else:
                # only objects holding the key take dep (and its annotations): an array passes
                # `required` but must not have dep's items counted as evaluated
                out.append([([{"properties": {key: False}}], NOTHING),
                            *_product([([{"type": "object", "required": [key]}], NOTHING)], dc)])
        return out

    def sub(self, s: Any, base: str, depth: int, whole: Any = None) -> list[Case]:
        """Cases of a subschema; one case holding the whole of it when they all evaluate the same."""
        cs = self.cases(s, base, depth + 1)
        if len({ev for _, ev in cs}) == 1:
            return [([whole if whole is not None else self.part(s, base)], cs[0][1])]
        return cs

    def any_of(self, branches: list, base: str, depth: int) -> list[Case]:
        bc = [self.sub(b, base, depth) for b in branches]
        evs = {ev for cs in bc for _, ev in cs}
        if len(evs) <= 1:
            return [([{"anyOf": [_all(p) for cs in bc for p, _ in cs]}], next(iter(evs), NOTHING))]
        plain = [cs for cs in bc if all(ev == NOTHING for _, ev in cs)]
        others = [cs for cs in bc if not all(ev == NOTHING for _, ev in cs)]
        if len(others) > MAX_SUBSET_BRANCHES:
            raise _Fallback(f"more than {MAX_SUBSET_BRANCHES} anyOf branches evaluate different properties/items")
        out: list[Case] = []
        if plain:
            out.append(([{"anyOf": [_all(p) for cs in plain for p, _ in cs]}], NOTHING))
        for r in range(1, len(others) + 1):
            for subset in itertools.combinations(others, r):
                acc: list[Case] = [([], NOTHING)]
                for cs in subset:
                    acc = _product(acc, cs)
                out.extend(acc)
                if len(out) > MAX_CASES:
                    raise _Fallback("too many anyOf combinations")
        return _group(out)

    def one_of(self, branches: list, base: str, depth: int) -> list[Case]:
        bc = [self.sub(b, base, depth) for b in branches]
        evs = {ev for cs in bc for _, ev in cs}
        whole = [([{"oneOf": [_any(cs) for cs in bc]}], next(iter(evs), NOTHING))]
        if len(bc) == 1:
            return bc[0]
        if len(branches) > one_of.MAX_EXCLUSIVE:
            if len(evs) <= 1:
                return whole
            raise _Fallback(f"more than {one_of.MAX_EXCLUSIVE} oneOf branches")
        try:
            disjoint = one_of.disjoint(self.conv, [self.part(b, base) for b in branches], self.ptr,
                                       base=self.base0)
        except SchemaError:
            disjoint = False
        if disjoint and len(evs) <= 1:
            return whole
        out: list[Case] = []
        for i, cs in enumerate(bc):
            others = [_any(c) for j, c in enumerate(bc) if j != i]
            rest = [] if disjoint else [self._negate({"anyOf": others})]
            if rest and rest[0] is None:
                if len(evs) <= 1:
                    return whole      # the converter's oneOf handling (or its warning)
                rest = [{"not": {"anyOf": others}}]
            out.extend((parts + rest, ev) for parts, ev in cs)
        return _group(out)

    def if_then_else(self, s: dict, base: str, depth: int) -> list[Case]:
        ic = self.sub(s["if"], base, depth)
        tc = self.sub(s.get("then", True), base, depth)
        ec = self.sub(s.get("else", True), base, depth)
        evs = {ev for cs in (ic, tc, ec) for _, ev in cs}
        if len(evs) == 1:
            whole = {k: self.part(s[k], base) for k in ("if", "then", "else") if k in s}
            return [([whole], next(iter(evs)))]
        return _group(_product(ic, tc) + _product([([self.negation(_any(ic))], NOTHING)], ec))

    # -- negation (a branch that fails contributes nothing) -----------------------------------
    def negation(self, s: Any) -> Any:
        """A positive schema for ``not s`` when one can be written, else ``{"not": s}``."""
        n = self._negate(s)
        return {"not": s} if n is None else n

    def _negate(self, s: Any) -> Any:
        return negation.negate(s, lambda r: self.conv.local_target(r, self.base0, self.ptr), self.conv.draft)

    # -- what a case evaluates, and what it leaves to unevaluated* -----------------------------
    def own_ev(self, own: dict, base: str) -> Ev:
        ev = Ev(names=frozenset(own.get("properties") or {}),
                patterns=frozenset(own.get("patternProperties") or {}),
                all_props="additionalProperties" in own)
        items = own.get("items")
        if self.new_items:
            prefix = len(own.get("prefixItems") or [])
            every = "items" in own
        elif isinstance(items, list):
            prefix, every = len(items), "additionalItems" in own
        else:
            prefix, every = 0, "items" in own
        contains = frozenset([json.dumps(self.part(own["contains"], base), sort_keys=True)]) \
            if "contains" in own else frozenset()
        return replace(ev, prefix=prefix, all_items=every, contains=contains).norm()

    def closure_props(self, parts: list, ev: Ev, rest: Any, base: str) -> dict | None:
        if ev.all_props or rest is True or rest == {}:
            return None
        rest = self.part(rest, base)
        props: dict = {n: {} for n in sorted(ev.names)}
        for name in sorted(_mentioned(parts) - ev.names):
            # a name some part constrains without evaluating it: say its rule outright, so that
            # merging with the part cannot mistake it for a pattern property
            if not any(self.conv.strings.search(p, name, self.ptr) for p in ev.patterns):
                props[name] = rest
        out: dict = {"properties": props} if props else {}
        if ev.patterns:
            out["patternProperties"] = {p: {} for p in sorted(ev.patterns)}
        out["additionalProperties"] = rest
        return out

    def closure_items(self, ev: Ev, rest: Any, base: str) -> dict | None:
        if ev.all_items or rest is True or rest == {}:
            return None
        rest = self.part(rest, base)
        if ev.contains:
            rest = {"anyOf": [*(json.loads(c) for c in sorted(ev.contains)), rest]}
        # prefixItems even when empty: merging it with another prefixItems list is exact
        if self.new_items:
            return {"prefixItems": [{}] * ev.prefix, "items": rest}
        return {"items": [{}] * ev.prefix, "additionalItems": rest}

    # -- copying subschemas to the rewritten node --------------------------------------------
    def part(self, s: Any, base: str) -> Any:
        """``s`` (a subschema at ``base``) as a conjunct of the node being rewritten."""
        if not isinstance(s, dict):
            return s
        s = {k: v for k, v in s.items() if k not in _DROP and
             not (k in ("unevaluatedProperties", "unevaluatedItems") and v in (True, {}))}
        return self.index.relocate(s, base, "#" + self.ptr, into=self.base0)


def _mentioned(parts: list) -> set[str]:
    """Property names that ``parts`` constrain in place (properties, required, dependencies)."""
    out: set[str] = set()
    todo = list(parts)
    while todo:
        s = todo.pop()
        if isinstance(s, list):
            todo.extend(s)
        if not isinstance(s, dict):
            continue
        out.update(n for n in (s.get("properties") or {}) if isinstance(n, str))
        out.update(n for n in (s.get("required") or []) if isinstance(n, str))
        for k in ("dependentRequired", "dependentSchemas"):
            out.update(n for n in (s.get(k) or {}) if isinstance(n, str))
        for k in ("allOf", "anyOf", "oneOf", "not", "if", "then", "else"):
            if k in s:
                todo.append(s[k])
        todo.extend((s.get("dependentSchemas") or {}).values())
    return out


def _has_unevaluated(s: Any, depth: int = 0) -> bool:
    """Whether ``s`` uses unevaluated* at its own instance location (not through ``$ref``)."""
    if not isinstance(s, dict) or depth > MAX_NESTING:
        return False
    if "unevaluatedProperties" in s or "unevaluatedItems" in s:
        return True
    subs = [s.get(k) for k in ("not", "if", "then", "else")]
    subs += [x for k in ("allOf", "anyOf", "oneOf") for x in (s.get(k) or [])]
    subs += list((s.get("dependentSchemas") or {}).values())
    return any(_has_unevaluated(x, depth + 1) for x in subs)


def _all(parts: list) -> Any:
    parts = [p for p in parts if p is not True and p != {}]
    if any(p is False for p in parts):
        return False
    return {} if not parts else parts[0] if len(parts) == 1 else {"allOf": parts}


def _any(cases: list[Case]) -> Any:
    options = [_all(p) for p, _ in cases]
    return False if not options else options[0] if len(options) == 1 else {"anyOf": options}


def _product(left: list[Case], right: list[Case]) -> list[Case]:
    out = [(lp + rp, le | re) for lp, le in left for rp, re in right]
    if len(out) > MAX_CASES:
        raise _Fallback("too many combinations of in-place applicators")
    return out


def _group(cases: list[Case]) -> list[Case]:
    """Cases that evaluate the same united into one."""
    by_ev: dict[Ev, list[list]] = {}
    for parts, ev in cases:
        by_ev.setdefault(ev, []).append(parts)
    out = []
    for ev, options in by_ev.items():
        out.append((options[0], ev) if len(options) == 1 else ([{"anyOf": [_all(p) for p in options]}], ev))
    return out
