"""JSON Schema -> GBNF: walks a schema and emits a grammar accepting exactly its JSON instances.

``json_schema_to_gbnf`` is the entry point. The walk normalises each subschema into alternatives
(``anyOf``/``oneOf`` branches, with ``allOf`` and ``$ref`` siblings merged in), then builds one
grammar per allowed type. Plain ``$ref``s become shared rules (which is how recursion works).
Keywords a grammar cannot enforce raise ``UnsupportedSchemaError`` in strict mode; in lenient mode
they are dropped with a warning, which only ever makes the grammar accept more.
"""
from __future__ import annotations

import copy
import json
import warnings
from typing import Any, Sequence

import jsonschema
from jsonschema import validators

from halter.errors import SchemaError, UnsupportedSchemaError
from halter.grammar.ast import Expr, Literal, Repeat, RuleRef, alt, format_grammar
from halter.schemas import merge as merging
from halter.schemas.json_text import NEVER, JsonText, cat
from halter.schemas.numbers import (DivisibleBy, decimal_bounds, integer_bounds, integer_range,
                                     multiple_of_integer, number_range)
from halter.schemas.objects import MAX_TRACKED, ObjectBuilder, ObjectSpec, _CountUnsupported, key_complement
from halter.schemas.refs import DEFAULT_BASE, RefIndex, pointer_escape
from halter.schemas.rules import Rules, tidy_rules
from halter.schemas.strings import StringBuilder

MAX_ALTERNATIVES = 64
MAX_DEPTH = 40
_DRAFTS = {"draft-04": "draft4", "draft-06": "draft6", "draft-07": "draft7", "2019-09": "draft2019",
           "2020-12": "draft2020"}
_CONSTRAINT_FREE = merging.ANNOTATIONS | {"$ref"}


class SchemaWarning(UserWarning):
    """A keyword dropped in lenient mode; the grammar then accepts more than the schema."""


def _draft_of(schema: Any) -> str:
    uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
    for key, name in _DRAFTS.items():
        if key in uri:
            return name
    return "draft2020"


class Converter:
    def __init__(self, schema: Any, *, whitespace: str = "flexible", strict: bool = True,
                 closed_objects: bool = False, prop_order: Sequence[str] | None = None) -> None:
        self.schema = copy.deepcopy(schema)
        self.strict = strict
        self.closed_objects = closed_objects
        self.prop_order = list(prop_order) if prop_order else None
        self.draft = _draft_of(self.schema)
        self.rules = Rules()
        self.js = JsonText(self.rules, whitespace)
        self.strings = StringBuilder(self.js, self)
        self.index = RefIndex(self.schema, self.draft)
        self.ref_rules: dict[str, RuleRef] = {}
        self.warnings: list[str] = []
        self._inlining: list[str] = []
        cls = validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        self.validator = cls(self.schema)

    # ------------------------------------------------------------------------------------------
    def unsupported(self, keyword: str, pointer: str, why: str) -> None:
        """Strict: raise. Lenient: warn, and the caller drops the keyword."""
        where = "#" + pointer
        if self.strict:
            raise UnsupportedSchemaError(f"{keyword!r} cannot be enforced by a grammar: {why}",
                                         where, keyword)
        msg = f"{keyword!r} at {where} ignored: {why}"
        self.warnings.append(msg)
        warnings.warn(msg, SchemaWarning, stacklevel=4)

    def convert(self) -> dict[str, Expr]:
        root_name = self.rules.reserve("root")
        expr = self.visit(self.schema, "", DEFAULT_BASE)
        if expr is None:
            raise SchemaError("the schema accepts no value at all", "#", None)
        self.rules.define(root_name, expr)
        ordered = {"root": self.rules.rules.pop("root")}
        ordered.update(self.rules.rules)
        return tidy_rules(ordered)

    # ------------------------------------------------------------------------------------------
    def visit(self, schema: Any, ptr: str, base: str) -> Expr | None:
        """Grammar for the JSON texts of ``schema``; None if it accepts nothing."""
        if schema is True or (isinstance(schema, dict) and not set(schema) - merging.ANNOTATIONS):
            return self.js.value()
        options = []
        for a in self.alternatives(schema, ptr, base, inline=False):
            e = self.ref_rule(*a[1:]) if a[0] == "ref" else self.build(a[1], a[2], a[3])
            if e is not None:
                options.append(e)
        return alt(*options) if options else None

    def alternatives(self, schema: Any, ptr: str, base: str, inline: bool) -> list[tuple]:
        """``("ref", ref, base, ptr)`` or ``("dict", schema, ptr, base)`` branches; their union."""
        if schema is True:
            return [("dict", {}, ptr, base)]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}",
                              "#" + ptr)
        if len(self._inlining) > MAX_DEPTH:
            raise UnsupportedSchemaError("allOf/$ref nesting too deep (recursive allOf?)", "#" + ptr, "allOf")
        ident = schema.get("$id")
        if isinstance(ident, str) and self.draft != "draft4" and not (self.draft in ("draft6", "draft7") and "$ref" in schema):
            from urllib.parse import urldefrag, urljoin
            base = urldefrag(urljoin(base, ident))[0] or base
        ref = schema.get("$ref")
        if "$dynamicRef" in schema or "$recursiveRef" in schema:
            key = "$dynamicRef" if "$dynamicRef" in schema else "$recursiveRef"
            self.unsupported(key, ptr, "dynamic references are not supported")
        if isinstance(ref, str):
            only_ref = self.draft in ("draft4", "draft6", "draft7") or not (set(schema) - _CONSTRAINT_FREE)
            if only_ref and not inline:
                return [("ref", ref, base, ptr)]
        conjuncts: list[list[tuple]] = []
        own = {k: v for k, v in schema.items() if k not in ("allOf", "anyOf", "oneOf", "$ref")}
        if set(own) - merging.ANNOTATIONS or not any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref")):
            conjuncts.append([("dict", own, ptr, base)])
        if isinstance(ref, str):
            target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
            if tptr in self._inlining:
                raise UnsupportedSchemaError("a $ref that recurses through allOf/sibling keywords",
                                             "#" + ptr, "$ref")
            self._inlining.append(tptr)
            try:
                conjuncts.append(self.alternatives(target, tptr, tbase, inline=True))
            finally:
                self._inlining.pop()
            if self.draft in ("draft4", "draft6", "draft7"):
                conjuncts = conjuncts[-1:]
        if self.draft not in ("draft4", "draft6", "draft7") or not isinstance(ref, str):
            for i, sub in enumerate(schema.get("allOf") or []):
                conjuncts.append(self.alternatives(sub, f"{ptr}/allOf/{i}", base, inline=True))
            for key in ("anyOf", "oneOf"):
                if key in schema:
                    union = []
                    for i, sub in enumerate(schema[key]):
                        union.extend(self.alternatives(sub, f"{ptr}/{key}/{i}", base, inline=False))
                    if key == "oneOf":
                        self._check_disjoint(schema[key], ptr)
                    conjuncts.append(union)
        # the product of the conjuncts, merged
        result: list[tuple] = [("dict", {}, ptr, base)]
        for options in conjuncts:
            if len(conjuncts) > 1:
                options = [o for opt in options for o in (self._inline(opt) if opt[0] == "ref" else [opt])]
            nxt = []
            for r in result:
                for o in options:
                    if len(conjuncts) == 1 and len(result) == 1 and r[1] == {}:
                        nxt.append(o)
                        continue
                    m = merging.merge(r[1], o[1])
                    if m is not False:
                        nxt.append(("dict", m, o[2] if r[1] == {} else r[2], o[3] if r[1] == {} else r[3]))
            result = nxt
            if len(result) > MAX_ALTERNATIVES:
                self.unsupported("allOf", ptr, "too many combinations of anyOf/oneOf branches")
                return [("dict", {}, ptr, base)]
        return result

    def _inline(self, alt_ref: tuple) -> list[tuple]:
        _, ref, base, ptr = alt_ref
        target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
        if tptr in self._inlining:
            raise UnsupportedSchemaError("a $ref that recurses through allOf", "#" + ptr, "$ref")
        self._inlining.append(tptr)
        try:
            return self.alternatives(target, tptr, tbase, inline=True)
        finally:
            self._inlining.pop()

    def _check_disjoint(self, options: list, ptr: str) -> None:
        """oneOf is treated as anyOf; that is exact when the branches cannot overlap."""
        kinds = []
        for o in options:
            if not isinstance(o, dict):
                return self._overlap(ptr)
            if "$ref" in o:
                o = self.index.resolve(o["$ref"], DEFAULT_BASE, "#" + ptr)[0]
                if not isinstance(o, dict):
                    return self._overlap(ptr)
            t = merging.types_of(o)
            if "const" in o or "enum" in o:
                kinds.append(("values", tuple(json.dumps(v, sort_keys=True) for v in ([o["const"]] if "const" in o else o["enum"]))))
            elif t is not None:
                kinds.append(("types", frozenset("number" if x == "integer" else x for x in t)))
            else:
                return self._overlap(ptr)
        seen_types: set = set()
        seen_values: set = set()
        for kind, val in kinds:
            if kind == "types":
                if seen_types & val:
                    return self._overlap(ptr)
                seen_types |= val
            else:
                if seen_values & set(val):
                    return self._overlap(ptr)
                seen_values |= set(val)
        return None

    def _overlap(self, ptr: str) -> None:
        self.unsupported("oneOf", ptr, "branches may overlap and exactly-one cannot be enforced "
                                       "(lenient mode treats it as anyOf)")

    def ref_rule(self, ref: str, base: str, ptr: str) -> Expr | None:
        target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
        key = tbase + "#" + tptr
        if key in self.ref_rules:
            return self.ref_rules[key]
        name = self.rules.reserve(self._hint(tptr) if tptr else "root-ref")
        self.ref_rules[key] = RuleRef(name)
        expr = self.visit(target, tptr, tbase)
        self.rules.define(name, expr if expr is not None else NEVER)
        return RuleRef(name) if expr is not None else None

    def _hint(self, ptr: str) -> str:
        for prefix in ("/$defs/", "/definitions/"):
            if ptr.startswith(prefix):
                return "defs-" + ptr[len(prefix):]
        return "root" + ptr.replace("/", "-")

    # ------------------------------------------------------------------------------------------
    def build(self, s: dict, ptr: str, base: str) -> Expr | None:
        """Grammar for one flat (merged) schema without anyOf/oneOf/allOf."""
        for kw in ("not", "if", "dependentSchemas", "contains"):
            if kw in s:
                self.unsupported(kw, ptr, "the grammar would need negation or counting")
        for kw in s.get("x-halter-conflicts", []):
            self.unsupported(kw, ptr, "allOf combines two different values of this keyword")
        if "dependencies" in s and any(not isinstance(v, list) for v in s["dependencies"].values()):
            self.unsupported("dependencies", ptr, "schema dependencies need negation")
        if s.get("uniqueItems") is True and not (isinstance(s.get("maxItems"), int) and s["maxItems"] <= 1):
            if self._may_be("array", s):
                self.unsupported("uniqueItems", ptr, "uniqueness of items is not context-free")
        if "const" in s or "enum" in s:
            return self.values(s, ptr, base)
        if not set(s) - merging.ANNOTATIONS:
            return self.js.value()
        types = merging.types_of(s)
        if types is None:
            types = {"null", "boolean", "object", "array", "string", "number"}
        opts = []
        if "null" in types:
            opts.append(Literal("null"))
        if "boolean" in types:
            opts.append(alt(Literal("true"), Literal("false")))
        if "number" in types:
            opts.append(self.number(s, ptr))
        elif "integer" in types:
            opts.append(self.integer(s, ptr))
        if "string" in types:
            opts.append(self.strings.build(s, ptr))
        if "array" in types:
            opts.append(self.array(s, ptr, base))
        if "object" in types:
            opts.append(self.object(s, ptr, base))
        opts = [o for o in opts if o is not None]
        if not opts:
            return None
        e = alt(*opts)
        if len(opts) > 1 or "array" in types or "object" in types:
            return self.rules.add(self._hint(ptr), e)
        return e

    def _may_be(self, t: str, s: dict) -> bool:
        types = merging.types_of(s)
        return types is None or t in types

    def values(self, s: dict, ptr: str, base: str) -> Expr | None:
        values = [s["const"]] if "const" in s else list(s["enum"])
        rest = {k: v for k, v in s.items() if k not in ("const", "enum")}
        if "const" in s and "enum" in s:
            values = [v for v in values if any(merging._canon(v) == merging._canon(e) for e in s["enum"])]
        check = self.validator.evolve(schema=rest)
        kept = []
        for v in values:
            try:
                ok = check.is_valid(v)
            except Exception:
                ok = True
            if ok:
                kept.append(v)
        opts = [self.literal(v) for v in kept]
        return self.rules.add(self._hint(ptr), alt(*opts)) if opts else None

    def literal(self, v: Any) -> Expr:
        """The JSON texts of the value ``v`` (numbers in any equal spelling: 1, 1.0, -0)."""
        js, ws = self.js, self.js.ws()
        if v is None or isinstance(v, bool):
            return Literal(json.dumps(v))
        if isinstance(v, int):
            return integer_range(v, v)
        if isinstance(v, float):
            if v.is_integer():
                return integer_range(int(v), int(v))
            from decimal import Decimal
            d = Decimal(repr(v))
            return number_range(d, False, d, False)
        if isinstance(v, str):
            return js.quoted(v)
        if isinstance(v, list):
            if not v:
                return cat(js.tok("["), Literal("]"))
            items = [cat(self.literal(x), ws) for x in v]
            body = [items[0]]
            for it in items[1:]:
                body += [js.tok(","), it]
            return cat(js.tok("["), *body, Literal("]"))
        if isinstance(v, dict):
            if not v:
                return cat(js.tok("{"), Literal("}"))
            members = [cat(js.quoted(k), ws, js.tok(":"), self.literal(x), ws) for k, x in v.items()]
            body = [members[0]]
            for m in members[1:]:
                body += [js.tok(","), m]
            return cat(js.tok("{"), *body, Literal("}"))
        raise SchemaError(f"not a JSON value: {v!r}", "", "enum")

    # ------------------------------------------------------------------------------------------
    def integer(self, s: dict, ptr: str) -> Expr | None:
        lo, hi = integer_bounds(s)
        mult = s.get("multipleOf")
        if mult is not None:
            got = multiple_of_integer(mult, lo, hi)
            if isinstance(got, DivisibleBy):
                for name, body in got.rules.items():
                    self.rules.fixed(name, body)
                return got.expr
            if got is not False:
                return got
            self.unsupported("multipleOf", ptr, "only integer divisors of unbounded integers, or small ranges")
        if lo is None and hi is None:
            return self.js.integer()
        return integer_range(lo, hi)

    def number(self, s: dict, ptr: str) -> Expr | None:
        if s.get("multipleOf") is not None:
            got = self.integer(s, ptr) if merging._is_int(s["multipleOf"]) else None
            if got is not None:
                return got
            self.unsupported("multipleOf", ptr, "non-integer divisors are not supported")
        lo, ls, hi, hs = decimal_bounds(s)
        if lo is None and hi is None:
            return self.js.number()
        return number_range(lo, ls, hi, hs)

    # ------------------------------------------------------------------------------------------
    def array(self, s: dict, ptr: str, base: str) -> Expr | None:
        js, ws = self.js, self.js.ws()
        if self.draft in ("draft4", "draft6", "draft7", "draft2019") and isinstance(s.get("items"), list):
            prefix_schemas, rest_schema, rest_key = s["items"], s.get("additionalItems", True), "additionalItems"
            prefix_key = "items"
        else:
            prefix_schemas, rest_schema, rest_key = s.get("prefixItems") or [], s.get("items", True), "items"
            prefix_key = "prefixItems"
        if "unevaluatedItems" in s:
            if rest_schema is True and not prefix_schemas or s["unevaluatedItems"] is True:
                rest_schema = s["unevaluatedItems"] if rest_schema is True else rest_schema
            elif rest_schema is True:
                rest_schema = s["unevaluatedItems"]
        lo = int(s.get("minItems", 0))
        hi = s.get("maxItems")
        hi = None if hi is None else int(hi)
        prefix = [self.visit(p, f"{ptr}/{prefix_key}/{i}", base) for i, p in enumerate(prefix_schemas)]
        rest = self.visit(rest_schema, f"{ptr}/{rest_key}", base)
        # the longest possible array: a position no value can take ends it
        k = len(prefix)
        for i, p in enumerate(prefix):
            if p is None:
                k = i
                break
        if rest is None or k < len(prefix):
            hi = k if hi is None else min(hi, k)
        if hi is not None and lo > hi:
            return None
        items = [self.rules.add(f"{self._hint(ptr)}-item-{i}", cat(p, ws)) if not isinstance(p, RuleRef) else cat(p, ws) for p, i in zip(prefix[:k], range(k))]
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

    # ------------------------------------------------------------------------------------------
    def object(self, s: dict, ptr: str, base: str) -> Expr | None:
        props_schema = s.get("properties") or {}
        pattern_props = s.get("patternProperties") or {}
        additional = s.get("additionalProperties", True)
        if "unevaluatedProperties" in s and additional is True:
            additional = s["unevaluatedProperties"]
        if self.closed_objects and "additionalProperties" not in s and not pattern_props:
            additional = False
        names = list(props_schema)
        if self.prop_order:
            names.sort(key=lambda n: self.prop_order.index(n) if n in self.prop_order else len(self.prop_order))
        prop_names = s.get("propertyNames")
        if prop_names is not None and prop_names is not True and not (isinstance(prop_names, dict) and not set(prop_names) - merging.ANNOTATIONS):
            names = [n for n in names if self._valid(prop_names, n)]
        props: dict[str, Expr | None] = {}
        for n in names:
            sub = props_schema[n]
            for pat, psub in pattern_props.items():
                if self.strings.search(pat, n, f"{ptr}/patternProperties"):
                    sub = merging._both(sub, psub)
            props[n] = self.visit(sub, f"{ptr}/properties/{pointer_escape(n)}", base)
        required = [r for r in (s.get("required") or []) if isinstance(r, str)]
        if any(r not in props_schema for r in required):
            # required keys without a property schema: they take the extra-key rule
            for r in required:
                if r not in props_schema and (prop_names is None or self._valid(prop_names, r)):
                    sub = additional
                    for pat, psub in pattern_props.items():
                        if self.strings.search(pat, r, f"{ptr}/patternProperties"):
                            sub = psub if sub is additional else merging._both(sub, psub)
                    props[r] = self.visit(sub, f"{ptr}/required", base)
        extra: list[tuple[Expr, Expr]] = []
        known = list(props)
        # names whose value rule differs from what the extra-key route would allow: an extra key
        # must never spell them (names with an unconstrained rule may, harmlessly)
        strict_known = [n for n in known if props_schema.get(n, None) not in (True, {}, additional)
                        or n in required]
        if pattern_props:
            if len(pattern_props) > 1 or additional is not False:
                # several patterns or patterns next to additional properties: approximate unless exact
                exact = self.strings.pattern_keys(pattern_props, additional, strict_known, ptr, base)
                extra.extend(exact)
            else:
                pat, psub = next(iter(pattern_props.items()))
                value = self.visit(psub, f"{ptr}/patternProperties/{pointer_escape(pat)}", base)
                if value is not None:
                    extra.append((self.strings.key_pattern(pat, strict_known, f"{ptr}/patternProperties"), value))
        elif additional is not False:
            value = self.visit(additional, f"{ptr}/additionalProperties", base)
            if value is not None:
                if prop_names is not None and prop_names is not True:
                    key = self.strings.key_schema(prop_names, strict_known, f"{ptr}/propertyNames", base)
                else:
                    key = key_complement(self.js, known)
                if key is not None:
                    extra.append((key, value))
        deps = {k: list(v) for k, v in (s.get("dependentRequired") or {}).items()}
        deps.update({k: list(v) for k, v in (s.get("dependencies") or {}).items() if isinstance(v, list)})
        spec = ObjectSpec(props=props, required=required, extra=extra,
                          min_props=int(s.get("minProperties", 0)), max_props=s.get("maxProperties"),
                          dependent_required=deps, ordered=bool(self.prop_order))
        if deps and (len(props) > MAX_TRACKED or spec.ordered):
            self.unsupported("dependentRequired", ptr, "only for objects with few properties")
            spec.dependent_required = {}
        try:
            return ObjectBuilder(self.js, self.rules, self._hint(ptr)).build(spec)
        except _CountUnsupported:
            self.unsupported("maxProperties" if spec.max_props is not None else "minProperties", ptr,
                             "property counts are exact only for objects with few known properties")
            spec.min_props, spec.max_props = 0, None
            return ObjectBuilder(self.js, self.rules, self._hint(ptr)).build(spec)

    def _valid(self, schema: Any, value: Any) -> bool:
        try:
            return self.validator.evolve(schema=schema).is_valid(value)
        except Exception:
            return True


def _meta_validate(schema: Any) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}", "#")
    cls = validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        ptr = "#" + "".join("/" + pointer_escape(p) for p in e.absolute_path)
        raise SchemaError(f"invalid JSON Schema: {e.message}", ptr, e.validator) from None


def json_schema_to_gbnf(schema: dict | str | bool, *, whitespace: str = "flexible", strict: bool = True,
                        closed_objects: bool = False, prop_order: Sequence[str] | None = None) -> str:
    """GBNF text (root rule ``root``) accepting the JSON texts valid under ``schema``.

    Parameters
    ----------
    schema : a JSON Schema as a dict/bool, or its JSON text. Not modified.
    whitespace : ``"flexible"`` (default; bounded whitespace that accepts ``json.dumps`` output
        with default separators or ``indent`` up to 64 columns) or ``"compact"`` (none at all).
    strict : raise ``UnsupportedSchemaError`` for keywords a grammar cannot enforce (default);
        ``False`` drops them with a ``SchemaWarning``, so the grammar accepts a superset.
    closed_objects : forbid properties not listed in ``properties`` unless the schema says
        otherwise (llama.cpp's behaviour); the spec's default allows them.
    prop_order : known properties in this order (then schema order) instead of any order.

    Raises
    ------
    SchemaError : invalid schema (checked against its metaschema) or unresolvable ``$ref``.
    UnsupportedSchemaError : strict mode and a keyword a grammar cannot express.
    """
    return format_grammar(schema_to_rules(schema, whitespace=whitespace, strict=strict,
                                          closed_objects=closed_objects, prop_order=prop_order))


def schema_to_rules(schema: dict | str | bool, **options: Any) -> dict[str, Expr]:
    """Like ``json_schema_to_gbnf`` but returns the rules as syntax trees."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})", "#") from None
    _meta_validate(schema)
    return Converter(schema, **options).convert()
