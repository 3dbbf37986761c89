"""JSON objects as grammars: known properties in any order, required ones enforced, extra keys.

Members are written ``key ws ":" ws value ws`` and separated by ``"," ws``. Known properties are
*tracked*: a rule per set of keys already written, so each appears at most once, in any order, and
the object can only close once every required key is there. Tracking costs a rule per subset, so
it is exact up to ``MAX_TRACKED`` keys; beyond that only the required keys are tracked (when there
are at most ``MAX_TRACKED_REQUIRED`` of them, else they must come in schema order) and the optional known
keys become *free* members, which may then repeat (documented departure). Extra keys never spell a
known key: the extra-key grammar is the complement of the known names (a trie complement).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from halter.grammar.ast import Expr, Literal, Repeat, RuleRef, alt
from halter.schemas import merge as merging
from halter.schemas.char_automaton import EVERYTHING, Dfa
from halter.schemas.json_text import NEVER, JsonText, cat
from halter.schemas.refs import pointer_escape
from halter.schemas.rules import Rules

if TYPE_CHECKING:
    from halter.schemas.converter import Converter

MAX_TRACKED = 5
MAX_TRACKED_REQUIRED = 8
MAX_COUNTED = 64
"""Extra members counted for min/maxProperties next to tracked keys (a rule per count)."""
_KEY_RULE_NODES = 24
"""Required keys tracked (any order, 2^n rules) when there are more than MAX_TRACKED known keys."""


@dataclass
class ObjectSpec:
    """What an object allows: known ``props`` (name -> value grammar, None = forbidden)."""
    props: dict[str, Expr | None]
    required: list[str]
    extra: list[tuple[Expr, Expr]] = field(default_factory=list)   # (key grammar, value grammar)
    min_props: int = 0
    max_props: int | None = None
    dependent_required: dict[str, list[str]] = field(default_factory=dict)
    ordered: bool = False


def key_complement(js: JsonText, names: list[str]) -> Expr:
    """A JSON string (with quotes) whose value is any string except ``names``."""
    if not names:
        return js.string()
    trie: dict = {}
    for n in names:
        node = trie
        for ch in n:
            node = node.setdefault(ch, {})
        node[""] = {}
    rules = js.rules
    any_rest = rules.add("key-rest", cat(Repeat(js.string_char(), 0, None), Literal('"')), shared=True)

    def size(node: dict) -> int:
        return 1 + sum(size(v) for v in node.values())

    def build(node: dict, depth: int, prefix: str) -> Expr:
        children = sorted(c for c in node if c)
        opts: list[Expr] = []
        if "" not in node:
            opts.append(Literal('"'))
        leave = [(0, 0x10FFFF)]
        for c in children:
            cp = ord(c)
            nxt = []
            for lo, hi in leave:
                if lo <= cp <= hi:
                    if lo < cp:
                        nxt.append((lo, cp - 1))
                    if cp < hi:
                        nxt.append((cp + 1, hi))
                else:
                    nxt.append((lo, hi))
            leave = nxt
        opts.append(cat(js.encode_class(leave), any_rest))
        for c in children:
            sub = build(node[c], depth + 1, prefix + c)
            if size(node[c]) > _KEY_RULE_NODES:      # keeps each rule's automaton small
                sub = rules.add("key-other-part", sub)
            opts.append(cat(js.encode_text(c), sub))
        return alt(*opts)

    return rules.add("key-other", cat(Literal('"'), build(trie, 0, "")))


class ObjectBuilder:
    def __init__(self, js: JsonText, rules: Rules, hint: str) -> None:
        self.js = js
        self.rules = rules
        self.hint = hint

    def member(self, key: Expr, value: Expr) -> Expr:
        ws = self.js.ws()
        tail = cat(ws, Literal(":"), ws, value, ws)
        if isinstance(key, Literal):
            return cat(key, tail)
        # a key rule (keys other than the named ones, patternProperties) may end inside a token
        # (``":``): what follows is one rule shared by every object with the same value schema,
        # so the masks that depend on it are computed once, not once per object
        # (a value that is a rule call, such as any JSON value, makes a small tail every schema
        # may share: kept once per process, see Rules.add; a value written out stays local)
        return cat(key, self.rules.add("member-value", tail, shared=isinstance(value, RuleRef)))

    def build(self, spec: ObjectSpec) -> Expr | None:
        js = self.js
        props = {k: v for k, v in spec.props.items() if v is not None}
        if any(r not in props for r in spec.required):
            return None                      # a required key that no value can satisfy
        pairs = {k: self.rules.add(f"{self.hint}-{k}-kv", self.member(js.quoted(k), v)) for k, v in props.items()}
        free: list[Expr] = [self.member(k, v) for k, v in spec.extra]
        required = list(dict.fromkeys(spec.required))
        names = list(props)
        if spec.ordered or len(names) > MAX_TRACKED:
            involved = {n for k, v in spec.dependent_required.items() for n in [k, *v]}
            tracked = [n for n in names if n in required or n in involved] if not spec.ordered else names
            if len(tracked) > MAX_TRACKED_REQUIRED and not spec.ordered:
                return self._chain(spec, pairs, free, names, ordered_all=False)
            if spec.ordered:
                return self._chain(spec, pairs, free, names, ordered_all=True)
            free = [pairs[n] for n in names if n not in tracked] + free
            count_exact = False
        else:
            tracked = names
            count_exact = not free
        count_free = False          # extra members counted in the state too (capped)
        if not count_exact and (spec.min_props > len(required) or spec.max_props is not None):
            lo, hi = spec.min_props, spec.max_props
            if tracked and free and len(names) <= MAX_TRACKED and max(lo, hi or 0) <= MAX_COUNTED:
                count_free = True
            elif tracked or lo > 0 and not free:
                raise _CountUnsupported()
        if not count_exact and not count_free and (spec.min_props > len(required) or spec.max_props is not None):
            lo, hi = spec.min_props, spec.max_props
            # only free members: count them with repetition bounds
            member = self.rules.add(f"{self.hint}-member", alt(*free)) if free else None
            if member is None:
                return cat(js.tok("{"), Literal("}")) if lo == 0 else None
            if hi == 0:
                return cat(js.tok("{"), Literal("}"))
            body = cat(member, Repeat(cat(js.tok(","), member), max(lo - 1, 0), None if hi is None else hi - 1))
            return cat(js.tok("{"), Repeat(body, 0, 1) if lo == 0 else body, Literal("}"))
        free_member = self.rules.add(f"{self.hint}-member", alt(*free)) if free else None
        states: dict[tuple, RuleRef | None] = {}
        base = self.rules.reserve(f"{self.hint}-obj")

        counted = count_exact or count_free
        cap = spec.max_props if spec.max_props is not None else spec.min_props

        def can_close(used: frozenset, c: int = 0) -> bool:
            if not set(required) <= used:
                return False
            if any(k in used and not set(deps) <= used for k, deps in spec.dependent_required.items()):
                return False
            n = len(used) + c
            if counted and not (spec.min_props <= n <= (spec.max_props if spec.max_props is not None else n)):
                return False
            return True

        def full(used: frozenset, c: int) -> bool:
            return counted and spec.max_props is not None and len(used) + c >= spec.max_props

        def state(used: frozenset, c: int = 0) -> Expr | None:
            """After the tracked keys ``used`` and ``c`` counted extra members (at least one member);
            None when the object can no longer be completed."""
            if (used, c) in states:
                return states[(used, c)]
            name = base if not used and c == (1 if count_free else 0) else \
                self.rules.reserve(f"{self.hint}-after-{len(used)}")
            states[(used, c)] = RuleRef(name)
            nexts: list[tuple[Expr, Expr | None]] = []
            for n in tracked:
                if n not in used and not full(used, c):
                    nexts.append((pairs[n], state(used | {n}, c)))
            if free_member is not None and not full(used, c):
                nexts.append((free_member, state(used, min(c + 1, cap)) if count_free else RuleRef(name)))
            opts: list[Expr] = [cat(js.tok(","), m, nxt) for m, nxt in nexts if nxt is not None]
            if can_close(used, c):
                opts.append(Literal("}"))
            if not opts:
                self.rules._reserved.discard(name)
                states[(used, c)] = None
                return None
            self.rules.define(name, alt(*opts))
            return states[(used, c)]

        first: list[Expr] = []
        for n in tracked:
            if counted and spec.max_props == 0:
                break
            if (nxt := state(frozenset({n}))) is not None:
                first.append(cat(pairs[n], nxt))
        if free_member is not None and not (counted and spec.max_props == 0):
            if (nxt := state(frozenset(), min(1, cap) if count_free else 0)) is not None:
                first.append(cat(free_member, nxt))
        if can_close(frozenset()):
            first.append(Literal("}"))
        if states.get((frozenset(), 1 if count_free else 0)) is None:
            self.rules._reserved.discard(base)
        return cat(js.tok("{"), alt(*first)) if first else None

    def _chain(self, spec: ObjectSpec, pairs, free, names, ordered_all: bool) -> Expr:
        """Known keys in schema order (all of them, or the required ones with optional ones free)."""
        js = self.js
        if spec.min_props > len(spec.required) or spec.max_props is not None:
            raise _CountUnsupported()
        seq_names = names if ordered_all else [n for n in names if n in spec.required]
        if not ordered_all:
            free = [pairs[n] for n in names if n not in spec.required] + free
        free_member = self.rules.add(f"{self.hint}-member", alt(*free)) if free else None
        # state i: the next chain key to come is seq_names[i]
        refs = [RuleRef(self.rules.reserve(f"{self.hint}-at-{i}")) for i in range(len(seq_names) + 1)]
        for i in range(len(seq_names) + 1):
            opts: list[Expr] = []
            for j in range(i, len(seq_names)):
                opts.append(cat(js.tok(","), pairs[seq_names[j]], refs[j + 1]))
                if seq_names[j] in spec.required:
                    break
            if free_member is not None:
                opts.append(cat(js.tok(","), free_member, refs[i]))
            if all(n not in spec.required for n in seq_names[i:]):
                opts.append(Literal("}"))
            self.rules.define(refs[i].name, alt(*opts) if opts else NEVER)
        first: list[Expr] = []
        for j in range(len(seq_names)):
            first.append(cat(pairs[seq_names[j]], refs[j + 1]))
            if seq_names[j] in spec.required:
                break
        if free_member is not None:
            first.append(cat(free_member, refs[0]))
        if not spec.required:
            first.append(Literal("}"))
        return cat(js.tok("{"), alt(*first))


class _CountUnsupported(Exception):
    """min/maxProperties together with members that are not counted exactly."""


def object_grammar(conv: "Converter", s: dict, ptr: str, base: str) -> Expr | None:
    """Grammar for a flat object schema: known, required, pattern and extra properties, counts."""
    from halter.schemas.pattern_keys import key_pattern, key_schema, names_dfa, partition_keys, pattern_keys
    props_schema = s.get("properties") or {}
    pattern_props = s.get("patternProperties") or {}
    additional = s.get("additionalProperties", True)
    if "unevaluatedProperties" in s and additional is True:
        additional = s["unevaluatedProperties"]
    if conv.closed_objects and "additionalProperties" not in s and not pattern_props:
        additional = False
    if any(_matches_every_key(p) for p in pattern_props):
        additional = False          # every key is a pattern property: additionalProperties never applies
    names = list(props_schema)
    if conv.prop_order:
        names.sort(key=lambda n: conv.prop_order.index(n) if n in conv.prop_order else len(conv.prop_order))
    prop_names = s.get("propertyNames")
    if prop_names is not None and prop_names is not True and not (isinstance(prop_names, dict) and not set(prop_names) - merging.ANNOTATIONS):
        names = [n for n in names if conv.valid(prop_names, n)]
    sides = s.get(merging.SIDES) or []        # allOf members' own additionalProperties: see merge.py

    def search(pat: str, key: str) -> bool:
        return conv.strings.search(pat, key, f"{ptr}/patternProperties")

    props: dict[str, Expr | None] = {}
    for n in names:
        sub = props_schema[n]
        for pat, psub in pattern_props.items():
            if search(pat, n):
                sub = merging._both(sub, psub)
        for side in sides:
            sub = merging._both(sub, merging.side_rule(side, n, search))
        props[n] = conv.visit(sub, f"{ptr}/properties/{pointer_escape(n)}", base)
    required = [r for r in (s.get("required") or []) if isinstance(r, str)]
    deps = {k: list(v) for k, v in (s.get("dependentRequired") or {}).items()}
    deps.update({k: list(v) for k, v in (s.get("dependencies") or {}).items() if isinstance(v, list)})
    # keys named by required/dependencies must be tracked even without a property schema
    needed = list(dict.fromkeys(required + [n for k, v in deps.items() for n in [k, *v] if isinstance(n, str)]))
    if any(r not in props_schema for r in needed):
        # such keys without a property schema: they take the extra-key rule
        for r in needed:
            if r not in props_schema and (prop_names is None or conv.valid(prop_names, r)):
                sub, matched = additional, False
                for pat, psub in pattern_props.items():
                    if search(pat, r):
                        sub = merging._both(sub, psub) if matched else psub
                        matched = True
                if matched:
                    for side in sides:
                        sub = merging._both(sub, merging.side_rule(side, r, search))
                props[r] = conv.visit(sub, f"{ptr}/required", base)
    extra: list[tuple[Expr, Expr]] = []
    known = list(props)
    # names whose value rule differs from what the extra-key route would allow: an extra key
    # must never spell them (names with an unconstrained rule may, harmlessly)
    strict_known = [n for n in known if props_schema.get(n, None) not in (True, {}, additional)
                    or n in needed]
    names_given = prop_names is not None and prop_names is not True and \
        not (isinstance(prop_names, dict) and not set(prop_names) - merging.ANNOTATIONS)
    names = (Dfa([EVERYTHING], [[-1]], [False]) if prop_names is False else names_dfa(conv, prop_names, f"{ptr}/propertyNames")) \
        if names_given else None
    if names_given and names is None and pattern_props:
        conv.unsupported("propertyNames", f"{ptr}/propertyNames", "next to patternProperties only "
                         "exact for pattern/length keywords and automata of a sane size")
    exact = None
    if pattern_props or names is not None:
        exact = partition_keys(conv, pattern_props, additional, known, names, ptr, base, sides)
    if exact is not None:
        extra.extend(exact)
    elif pattern_props:
        if sides:
            conv.unsupported("additionalProperties", ptr, "allOf joins objects with patternProperties "
                             "whose key automata are too large to keep each one's additionalProperties")
        if names_given:
            conv.unsupported("propertyNames", f"{ptr}/propertyNames", "next to patternProperties only "
                             "exact for pattern/length keywords and automata of a sane size")
        if len(pattern_props) > 1 or additional is not False:
            # several patterns or patterns next to additional properties: approximate unless exact
            extra.extend(pattern_keys(conv, pattern_props, additional, strict_known, ptr, base))
        else:
            pat, psub = next(iter(pattern_props.items()))
            value = conv.visit(psub, f"{ptr}/patternProperties/{pointer_escape(pat)}", base)
            if value is not None:
                key = (key_complement(conv.js, known) if _matches_every_key(pat)
                       else key_pattern(conv, pat, strict_known, f"{ptr}/patternProperties"))
                extra.append((key, value))
    elif additional is not False:
        value = conv.visit(additional, f"{ptr}/additionalProperties", base)
        if value is not None:
            if names_given:
                key = key_schema(conv, prop_names, strict_known, f"{ptr}/propertyNames", base)
            else:
                key = key_complement(conv.js, known)
            if key is not None:
                extra.append((key, value))
    if s.get("maxProperties") is not None and int(s.get("minProperties", 0)) > int(s["maxProperties"]):
        return None
    spec = ObjectSpec(props=props, required=required, extra=extra,
                      min_props=int(s.get("minProperties", 0)),
                      max_props=None if s.get("maxProperties") is None else int(s["maxProperties"]),
                      dependent_required=deps, ordered=bool(conv.prop_order))
    involved = set(required) | {n for k, v in deps.items() for n in [k, *v]}
    if deps and (spec.ordered or len(props) > MAX_TRACKED and len(involved & set(props)) > MAX_TRACKED_REQUIRED):
        conv.unsupported("dependentRequired", ptr, "only for objects with few properties")
        spec.dependent_required = {}
    try:
        return ObjectBuilder(conv.js, conv.rules, conv.hint(ptr)).build(spec)
    except _CountUnsupported:
        conv.unsupported("maxProperties" if spec.max_props is not None else "minProperties", ptr,
                         "property counts are exact only for objects with few known properties")
        spec.min_props, spec.max_props = 0, None
        return ObjectBuilder(conv.js, conv.rules, conv.hint(ptr)).build(spec)


def _matches_every_key(pattern: str) -> bool:
    """Whether an unanchored ECMAScript ``pattern`` finds a match in every string.

    True when it matches the empty string without anchors, lookaround or word boundaries (so it
    matches at position 0 of any string), e.g. ``""``, ``".*"``, ``"a*"``.
    """
    if any(tok in pattern for tok in ("^", "$", "(?", "\\b", "\\B")):
        return False
    try:
        return re.fullmatch(pattern, "") is not None
    except re.error:
        return False
