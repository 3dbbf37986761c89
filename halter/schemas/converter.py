"""JSON Schema -> GBNF: walks a schema and emits a grammar accepting exactly its JSON instances.

The entry points are in json_schema.py (``json_schema_to_gbnf``). The walk normalises each
subschema into alternatives (``anyOf``/``oneOf`` branches, with ``allOf`` and ``$ref`` siblings
merged in), then builds one grammar per allowed type. Plain ``$ref``s become shared rules (which is
how recursion works); so does a merged schema that meets itself again (``Converter.visit``).
Keywords a grammar cannot enforce are dropped with a ``SchemaWarning`` (the default, lenient mode),
which only ever makes the grammar accept more; ``strict=True`` raises ``UnsupportedSchemaError``.
"""
from __future__ import annotations

import copy
import json
import warnings
from typing import Any, Sequence

import jsonschema
from jsonschema import validators

from halter.errors import SchemaError, SchemaWarning, UnsupportedSchemaError
from halter.limits import LIMITS, bounded_recursion, check
from halter.grammar.ast import Expr, Literal, RuleRef, alt
from halter.grammar.left_recursion import left_recursive_rules
from halter.schemas import drafts, logic, one_of, unevaluated
from halter.schemas import merge as merging
from halter.schemas.arrays import array_grammar
from halter.schemas.formats import APPROXIMATE_FORMATS, FORMATS
from halter.schemas.formats_pydantic import PYDANTIC_FORMATS
from halter.schemas.json_content import EmbeddedJson, is_embedded_json
from halter.schemas.json_text import NEVER, JsonText
from halter.schemas.objects import object_grammar
from halter.schemas.refs import DEFAULT_BASE, RefIndex, pointer_escape
from halter.schemas.rules import Rules, tidy_rules
from halter.schemas.scalars import integer_grammar, number_grammar, values_grammar
from halter.schemas.strings import StringBuilder

TARGETS = ("json-schema", "pydantic")
"""Whose idea of a valid instance the grammar follows (``json_schema_to_gbnf(target=...)``)."""
MAX_ALTERNATIVES = 64
MAX_DEPTH = 40
MAX_VISITS = 10_000
"""Subschema visits in one conversion (the real-world and test-suite schemas need at most ~1,400);
past this the schema is refused, in either mode."""
_DRAFTS = {"draft-04": "draft4", "draft-06": "draft6", "draft-07": "draft7", "2019-09": "draft2019",
           "2020-12": "draft2020"}
_CONSTRAINT_FREE = merging.ANNOTATIONS | {"$ref"}
_INLINES = frozenset({"$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if",
                      "dependentSchemas", "dependencies"})
"""Keywords through which a schema can inline another (and so, through a reference, itself)."""


_MIN_BOUNDS = ("minLength", "minItems", "minProperties", "minContains")
_MAX_BOUNDS = ("maxLength", "maxItems", "maxProperties", "maxContains")
_DATA_KEYWORDS = ("const", "enum", "default", "examples")


def _bounded(schema: Any) -> Any:
    """``schema`` (a private copy, changed in place) with its length and count bounds checked
    against ``limits.length_bound``: an upper bound beyond it is no bound at all (no output is that
    long); a lower bound beyond it is a ``LimitError`` naming the keyword's JSON pointer."""
    stack = [(schema, "")]
    limit = LIMITS.length_bound
    while stack:
        node, ptr = stack.pop()
        if isinstance(node, dict):
            for key in _MAX_BOUNDS:
                if isinstance(node.get(key), (int, float)) and node[key] > limit:
                    del node[key]
            for key in _MIN_BOUNDS:
                if isinstance(node.get(key), (int, float)) and node[key] > limit:
                    check("length_bound", node[key], where=f"#{ptr}/{key}", what=f"{key} in a JSON Schema")
            stack.extend((v, f"{ptr}/{pointer_escape(k)}") for k, v in node.items() if k not in _DATA_KEYWORDS)
        elif isinstance(node, list):
            stack.extend((v, f"{ptr}/{i}") for i, v in enumerate(node))
    return schema


def _draft_of(schema: Any) -> str:
    uri = schema.get("$schema", "") if isinstance(schema, dict) else ""
    uri = uri if isinstance(uri, str) else ""
    for key, name in _DRAFTS.items():
        if key in uri:
            return name
    return "draft2020"


class Converter:
    def __init__(self, schema: Any, *, whitespace: str = "flexible", strict: bool = False,
                 closed_objects: bool = False, prop_order: Sequence[str] | None = None,
                 target: str = "json-schema", unique_checked: str | None = None) -> None:
        if target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, not {target!r}")
        self.schema = _bounded(copy.deepcopy(schema))
        self.strict = strict
        self.target = target
        self.formats = PYDANTIC_FORMATS if target == "pydantic" else FORMATS   # format name -> regex
        # uniqueItems the grammar cannot enforce: None (nobody checks it), "exact" (the caller checks
        # it beside the grammar, for every array the schema requires unique) or "partial" (checked,
        # except where the check cannot tell that the schema requires it)
        self.unique_checked = unique_checked
        self.needs_unique_check = False
        self.closed_objects = closed_objects
        self.prop_order = list(prop_order) if prop_order else None
        self.draft = _draft_of(self.schema)
        self.rules = Rules()
        spec = target == "json-schema"       # Pydantic: no lone surrogates; no 3.0 for an int (strict mode)
        # draft-04 counts 1.0 as a number, not an integer (draft-06 on: any number with a zero fraction)
        fractions = spec and self.draft != "draft4"
        self.literal_fractions = spec        # enum/const 1 equals 1.0 in every draft
        self.js = JsonText(self.rules, whitespace, lone_surrogates=spec, integer_fractions=fractions,
                           finite_numbers=not spec)
        self.strings = StringBuilder(self.js, self)
        self.embedded = EmbeddedJson(self)
        self.index = RefIndex(self.schema, self.draft)
        self.ref_rules: dict[str, RuleRef] = {}
        self.rule_pointers: dict[str, str] = {}          # rule made for a $ref (or a schema met again) -> where
        self.warnings: list[str] = []
        self._inlining: list[str] = []
        self._building: dict[str, str | None] = {}     # schemas being visited that inline: see visit
        self._built: dict[str, Expr | None] = {}       # and those visited, by the same key
        self._visits = 0
        self.split_patterns = False     # spell every pattern with rules (pattern_rules.py)
        self.probing = 0
        self.max_alternatives = MAX_ALTERNATIVES
        cls = validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        self.validator = cls(self.schema, format_checker=self._format_checker())

    def _format_checker(self) -> jsonschema.FormatChecker:
        """Formats as the grammar reads them, for the validator that filters enum values and
        property names (``not: {format: date}`` must keep "x")."""
        checker = jsonschema.FormatChecker(formats=())
        for name in [*self.formats, *APPROXIMATE_FORMATS]:
            checker.checks(name)(lambda v, name=name: not isinstance(v, str) or
                                 self.strings.fits({"format": name}, v, ""))
        return checker

    # ------------------------------------------------------------------------------------------
    def unsupported(self, keyword: str, pointer: str, why: str) -> None:
        """Strict: raise. Lenient: warn, and the caller drops the keyword."""
        where = "#" + pointer
        if self.strict:
            raise UnsupportedSchemaError(f"{keyword!r} cannot be enforced by a grammar: {why}",
                                         where, keyword)
        self.warn(f"{keyword!r} at {where} ignored: {why}")

    def warn(self, msg: str) -> None:
        """A ``SchemaWarning``, once per conversion (a $ref'd definition is converted once per use)."""
        if msg in self.warnings:
            return
        self.warnings.append(msg)
        warnings.warn(msg, SchemaWarning, stacklevel=5)

    def convert(self) -> dict[str, Expr]:
        root_name = self.rules.reserve("root")
        expr = self.visit(self.schema, "", DEFAULT_BASE)
        if expr is None:
            raise SchemaError("the schema accepts no value at all", "#", None)
        self.rules.define(root_name, expr)
        self.embedded.finish()
        self._warn_left_recursion()
        ordered = {"root": self.rules.rules.pop("root")}
        ordered.update(self.rules.rules)
        return tidy_rules(ordered)

    def _warn_left_recursion(self) -> None:
        """Warn about ``$ref`` cycles that reach themselves before reading anything
        (``{"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, ...]}}}``). JSON Schema leaves them
        undefined (a validator recurses without end); the grammar reads them by their least fixed
        point: the values the cycle's other alternatives allow, or none."""
        if not self.rule_pointers:      # no rule made for a $ref: no cycle to warn about (below)
            return
        for cycle in left_recursive_rules(self.rules.rules):
            where = [self.rule_pointers[n] for n in cycle if n in self.rule_pointers]
            if not where:
                continue
            self.warn(f"the $ref cycle through {', '.join(dict.fromkeys(where))} reaches itself before any "
                      "JSON text is read: JSON Schema leaves its meaning undefined (a validator recurses "
                      "without end); halter accepts the values the cycle's other alternatives allow (none if "
                      "it has none)")

    # ------------------------------------------------------------------------------------------
    def visit(self, schema: Any, ptr: str, base: str) -> Expr | None:
        """Grammar for the JSON texts of ``schema``; None if it accepts nothing.

        A schema that inlines a ``$ref`` (one with siblings, or under ``allOf``...) can meet itself
        again inside what it inlined: ``{"properties": {"c": {"$ref": "#", "type": "object"}}}``.
        Such a schema is tracked by its content while it is being built; met again, it becomes a
        rule that refers to itself (only then, so other grammars keep their shape)."""
        if schema is True or (isinstance(schema, dict) and not set(schema) - merging.ANNOTATIONS):
            return self.js.value()
        key = self._reentry_key(schema, base)
        if key is not None and key in self._built and not self.probing:
            return self._reuse(key, ptr)
        self._visits += 1
        if self._visits > MAX_VISITS:
            # a recursion whose schemas never repeat exactly (rewritten anew at each level) grows
            # without end: stop with an error rather than run for ever
            raise UnsupportedSchemaError(f"the schema expands to more than {MAX_VISITS} subschemas "
                                         "(a recursion through rewritten keywords?)", "#" + ptr, "$ref")
        if key is None:
            return self._visit(schema, ptr, base)
        if key in self._building:
            if self._building[key] is None:
                self._building[key] = self.rules.reserve(self.hint(ptr))
                self.rule_pointers[self._building[key]] = "#" + ptr
            return RuleRef(self._building[key])
        self._building[key] = None
        try:
            expr = self._visit(schema, ptr, base)
        finally:
            name = self._building.pop(key)
        if name is not None:
            self.rules.define(name, expr if expr is not None else NEVER)
            expr = RuleRef(name) if expr is not None else None
        if not self.probing:
            self._built[key] = expr
        return expr

    def _reuse(self, key: str, ptr: str) -> Expr | None:
        """The grammar of a schema built before (met again through its references, it would be
        built again at every level: exponential in the nesting); a rule from its second use on."""
        expr = self._built[key]
        if expr is None or isinstance(expr, RuleRef):
            return expr
        name = self.rules.reserve(self.hint(ptr))
        self.rules.define(name, expr)
        self._built[key] = RuleRef(name)
        return self._built[key]

    def _reentry_key(self, schema: Any, base: str) -> str | None:
        if not isinstance(schema, dict) or not _INLINES.intersection(schema):
            return None
        if isinstance(schema.get("$ref"), str) and (self.draft in ("draft4", "draft6", "draft7")
                                                    or not set(schema) - _CONSTRAINT_FREE):
            return None     # a plain reference: ref_rule makes it a rule, recursive or not
        return base + self.index.scope_key(base) + " " + json.dumps(schema, sort_keys=True, default=repr)

    def _visit(self, schema: Any, ptr: str, base: str) -> Expr | None:
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
        if "$ref" in schema and not isinstance(schema["$ref"], str):
            raise SchemaError(f"$ref must be a string (a URI reference), not {type(schema['$ref']).__name__}",
                              f"#{ptr}/$ref", "$ref")
        schema = drafts.own_keywords(schema, self.draft)
        if len(self._inlining) > MAX_DEPTH:
            raise UnsupportedSchemaError("allOf/$ref nesting too deep (recursive allOf?)", "#" + ptr, "allOf")
        ident = schema.get("$id", schema.get("id") if self.draft == "draft4" else None)
        if isinstance(ident, str) and self.draft != "draft4" and not (self.draft in ("draft6", "draft7") and "$ref" in schema):
            base = self.index.enter_id(base, ident, schema)
        schema = unevaluated.prepare(self, schema, ptr, base)     # $dynamicRef, unevaluated*
        if not isinstance(schema, dict):
            return self.alternatives(schema, ptr, base, inline)
        ref = schema.get("$ref")
        if isinstance(ref, str):
            only_ref = self.draft in ("draft4", "draft6", "draft7") or not (set(schema) - _CONSTRAINT_FREE)
            if only_ref and not inline:
                return [("ref", ref, base, ptr)]
        conjuncts: list[list[tuple]] = []
        own = {k: v for k, v in schema.items() if k not in ("allOf", "anyOf", "oneOf", "$ref")}
        own, implied = logic.rewrite(own, lambda r: self.local_target(r, base, ptr), self.draft)
        if set(own) - merging.ANNOTATIONS or not (implied or any(k in schema for k in ("allOf", "anyOf", "oneOf", "$ref"))):
            conjuncts.append([("dict", own, ptr, base)])
        for sub in implied:
            conjuncts.append(self.alternatives(sub, ptr, base, inline=True))
        if isinstance(ref, str):
            target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
            target = self._relocated(target, tbase, base, ptr)
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
                    if key == "oneOf" and not one_of.disjoint(self, schema[key], ptr, schema, base):
                        exact = one_of.exclusive(self, schema[key], ptr, base)
                        if exact is None:
                            self._overlap(ptr)
                        else:
                            union = exact
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
            if len(nxt) > MAX_ALTERNATIVES:
                if self.probing:
                    raise one_of.TooMany()
                # the conjuncts merged so far accept a superset of all of them together
                self.unsupported("allOf", ptr, "too many combinations of anyOf/oneOf branches")
                return result
            result = nxt
        return result

    def local_target(self, ref: str, base: str, ptr: str) -> Any:
        """The target of ``ref`` when it can be copied here (same base URI), else None."""
        try:
            target, tbase, _ = self.index.resolve(ref, base, "#" + ptr)
        except SchemaError:
            return None
        return target if tbase == base else None

    def _inline(self, alt_ref: tuple) -> list[tuple]:
        _, ref, base, ptr = alt_ref
        target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
        target = self._relocated(target, tbase, base, ptr)
        if tptr in self._inlining:
            raise UnsupportedSchemaError("a $ref that recurses through allOf", "#" + ptr, "$ref")
        self._inlining.append(tptr)
        try:
            found = self.alternatives(target, tptr, tbase, inline=True)
            # anyOf/oneOf branches inside the target may be refs again: inline them too
            return [x for a in found for x in (self._inline(a) if a[0] == "ref" else [a])]
        finally:
            self._inlining.pop()

    def _relocated(self, target: Any, tbase: str, base: str, ptr: str) -> Any:
        """An inlined target's references must not depend on the base its merge is visited at."""
        if self.draft in ("draft4", "draft6", "draft7"):
            return target
        return self.index.relocate(target, tbase, "#" + ptr, into=base)

    def _overlap(self, ptr: str) -> None:
        self.unsupported("oneOf", ptr, "branches may overlap and exactly-one cannot be enforced "
                                       "(lenient mode treats it as anyOf)")

    def ref_rule(self, ref: str, base: str, ptr: str) -> Expr | None:
        target, tbase, tptr = self.index.resolve(ref, base, "#" + ptr)
        key = tbase + "#" + tptr + self.index.scope_key(tbase)
        if key in self.ref_rules:
            return self.ref_rules[key]
        name = self.rules.reserve(self.hint(tptr) if tptr else "root-ref")
        self.ref_rules[key] = RuleRef(name)
        self.rule_pointers[name] = (tbase if tbase != DEFAULT_BASE else "") + "#" + tptr
        expr = self.visit(target, tptr, tbase)
        self.rules.define(name, expr if expr is not None else NEVER)
        return RuleRef(name) if expr is not None else None

    def hint(self, ptr: str) -> str:
        for prefix in ("/$defs/", "/definitions/"):
            if ptr.startswith(prefix):
                return "defs-" + ptr[len(prefix):]
        return "root" + ptr.replace("/", "-")

    # ------------------------------------------------------------------------------------------
    def build(self, s: dict, ptr: str, base: str) -> Expr | None:
        """Grammar for one flat (merged) schema without anyOf/oneOf/allOf."""
        for kw in ("not", "if", "dependentSchemas"):
            if kw in s:
                self.unsupported(kw, ptr, "the grammar would need negation or counting")
        for kw in s.get("x-halter-conflicts", []):
            self.unsupported(kw, ptr, "allOf combines two different values of this keyword")
        if "dependencies" in s and any(not isinstance(v, list) for v in s["dependencies"].values()):
            self.unsupported("dependencies", ptr, "schema dependencies need negation")
        if "const" in s or "enum" in s:
            return values_grammar(self, s, ptr)
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
            opts.append(number_grammar(self, s, ptr))
        elif "integer" in types:
            opts.append(integer_grammar(self, s, ptr))
        if "string" in types:
            embedded = self.target == "pydantic" and is_embedded_json(s)     # Json[T]: see json_content.py
            opts.append(self.embedded.string(s, ptr, base) if embedded else self.strings.build(s, ptr))
        if "array" in types:
            opts.append(array_grammar(self, s, ptr, base))
        if "object" in types:
            opts.append(object_grammar(self, s, ptr, base))
        opts = [o for o in opts if o is not None]
        if not opts:
            return None
        e = alt(*opts)
        if len(opts) > 1 or "array" in types or "object" in types:
            return self.rules.add(self.hint(ptr), e)
        return e

    def valid(self, schema: Any, value: Any) -> bool:
        """Whether ``value`` is valid under ``schema`` (True when the validator cannot tell)."""
        try:
            with bounded_recursion():
                return self.validator.evolve(schema=merging.for_validator(schema)).is_valid(value)
        except Exception:  # noqa: BLE001
            return True
