"""A growing set of named GBNF rules: readable names from schema paths, and sharing of equal bodies."""
from __future__ import annotations

import re

from halter.grammar.ast import Alt, Expr, Literal, Repeat, RuleRef, Seq
from halter.grammar.rule_memo import canonical

_BAD = re.compile(r"[^A-Za-z0-9-]+")


def rule_name(hint: str) -> str:
    """A valid GBNF rule name (letters, digits, ``-``) resembling ``hint``."""
    name = _BAD.sub("-", hint).strip("-")
    name = re.sub(r"-{2,}", "-", name)
    return name[:60].strip("-") or "r"


class Rules:
    """Rule name -> expression, in definition order; equal bodies share one rule."""

    def __init__(self) -> None:
        self.rules: dict[str, Expr] = {}
        self._by_body: dict[Expr, str] = {}
        self._reserved: set[str] = set()

    def reserve(self, hint: str) -> str:
        """A fresh unused name for a rule to be defined later (e.g. for recursion)."""
        base = rule_name(hint)
        name, k = base, 1
        while name in self.rules or name in self._reserved:
            k += 1
            name = f"{base}-{k}"
        self._reserved.add(name)
        return name

    def define(self, name: str, body: Expr) -> RuleRef:
        self._reserved.discard(name)
        self.rules[name] = body
        self._by_body.setdefault(body, name)
        return RuleRef(name)

    def add(self, hint: str, body: Expr, *, shared: bool = False) -> RuleRef:
        """A reference to a rule with ``body``: an existing one with the same body, or a new one.
        ``shared``: a body that recurs across schemas (an escape, an object's value tail); a new
        rule gets the process's one copy of it (``rule_memo.canonical``), hashed only then."""
        if isinstance(body, RuleRef):
            return body
        existing = self._by_body.get(body)
        if existing is not None:
            return RuleRef(existing)
        return self.define(self.reserve(hint), canonical(body) if shared else body)

    def fixed(self, name: str, body: Expr) -> RuleRef:
        """A rule with exactly ``name`` (shared helpers such as ``ws`` or ``json-string``).

        Its body is the process's one copy of it (``rule_memo.canonical``): the automaton built
        for it by one grammar serves the next."""
        if name not in self.rules:
            self.define(name, canonical(body))
        return RuleRef(name)


def tidy(expr: Expr, memo: dict[int, Expr] | None = None) -> Expr:
    """Make an expression print as valid GBNF: no repeat directly inside a repeat, no empty repeat.

    Subexpressions that need no change are kept as they are, and a subexpression shared by several
    parents (an enum's string set, ``string_set.py``) is tidied once (``memo``, by identity) and
    stays shared."""
    if memo is None:
        memo = {}
    if not isinstance(expr, (Seq, Alt, Repeat)):
        return expr
    done = memo.get(id(expr))
    if done is None:
        done = memo[id(expr)] = _tidy(expr, memo)
    return done


def _tidy(expr: Expr, memo: dict[int, Expr]) -> Expr:
    if isinstance(expr, Seq):
        items = tuple(tidy(i, memo) for i in expr.items)
        return expr if all(a is b for a, b in zip(items, expr.items)) else Seq(items)
    if isinstance(expr, Alt):
        options = tuple(tidy(o, memo) for o in expr.options)
        return expr if all(a is b for a, b in zip(options, expr.options)) else Alt(options)
    if isinstance(expr, Repeat):
        inner = tidy(expr.expr, memo)
        if isinstance(inner, Literal) and inner.text == "":
            return inner
        if isinstance(inner, Repeat):
            inner = Seq((inner,))
        return expr if inner is expr.expr else Repeat(inner, expr.min, expr.max)
    return expr


def tidy_rules(rules: dict[str, Expr]) -> dict[str, Expr]:
    """Final pass before printing: large repeats split into helper rules, nesting made printable."""
    memo: dict[int, Expr] = {}
    return {name: tidy(body, memo) for name, body in split_large_repeats(rules).items()}


REPEAT_LIMIT = 64
"""Repetition counts above this are spelled with doubling helper rules (``x{0,1000}`` would
otherwise become a 1000-state automaton in the engine)."""
CHUNK = 24
"""The doubling rules count chunks of this many repetitions, not single ones: with single ones
every repetition ends a rule, and a token mask inside a long bounded string had to follow almost
every token out of nested rules at its first character (a mask cost ~100x a plain string's the
first time); with chunks only tokens crossing a chunk's end leave it."""


def split_large_repeats(rules: dict[str, Expr]) -> dict[str, Expr]:
    """Rewrite ``x{m,n}`` with large m or n as products of doubling rules over chunks (same language)."""
    out: dict[str, Expr] = {}
    helpers: dict[str, Expr] = {}
    names: dict[Expr, str] = {}

    def unit(x: Expr) -> RuleRef:
        if isinstance(x, RuleRef):
            return x
        if x not in names:
            names[x] = f"rep{len(names) + 1}"
            helpers[names[x]] = x
        return RuleRef(names[x])

    def doubling(base: RuleRef, kind: str, bits: int) -> list[RuleRef]:
        """Rules ``{base}-{kind}{i}`` matching base exactly (``e``) / up to (``o``) 2**i times."""
        refs = []
        for i in range(bits):
            name = f"{base.name}-{kind}{i}"
            if name not in helpers:
                helpers[name] = (Repeat(base, 0, 1) if kind == "o" else base) if i == 0 else \
                    Seq((RuleRef(f"{base.name}-{kind}{i - 1}"), RuleRef(f"{base.name}-{kind}{i - 1}")))
            refs.append(RuleRef(name))
        return refs

    def counted(base: RuleRef, kind: str, n: int) -> list[Expr]:
        refs = doubling(base, kind, n.bit_length())
        return [refs[i] for i in range(n.bit_length()) if n >> i & 1]

    def chunk(base: RuleRef) -> RuleRef:
        name = f"{base.name}-c{CHUNK}"
        helpers.setdefault(name, Repeat(base, CHUNK, CHUNK))
        return RuleRef(name)

    def upto_rule(base: RuleRef, r: int) -> RuleRef:
        name = f"{base.name}-t{r}"
        helpers.setdefault(name, Repeat(base, 0, r))
        return RuleRef(name)

    def exactly(base: RuleRef, n: int) -> list[Expr]:
        """``base{n}``: doubling rules over chunks of CHUNK, then the rest inline."""
        q, r = divmod(n, CHUNK)
        return counted(chunk(base), "e", q) + ([Repeat(base, r, r)] if r else [])

    def up_to(base: RuleRef, m: int) -> Expr:
        """``base{0,m}`` = ``chunk{0,q-1} base{0,CHUNK-1} | chunk{q} base{0,r}`` (m = q*CHUNK + r)."""
        q, r = divmod(m, CHUNK)
        if q == 0:
            return Repeat(base, 0, m)
        fewer = counted(chunk(base), "o", q - 1) + [upto_rule(base, CHUNK - 1)]
        full = counted(chunk(base), "e", q) + ([upto_rule(base, r)] if r else [])
        return Alt((Seq(tuple(fewer)) if len(fewer) > 1 else fewer[0], Seq(tuple(full)) if len(full) > 1 else full[0]))

    walked: dict[int, Expr] = {}

    def walk(e: Expr) -> Expr:
        """``_walk`` once per subexpression (by identity: shared ones stay shared)."""
        if not isinstance(e, (Seq, Alt, Repeat)):
            return e
        done = walked.get(id(e))
        if done is None:
            done = walked[id(e)] = _walk(e)
        return done

    def _walk(e: Expr) -> Expr:
        if isinstance(e, Seq):
            items = tuple(walk(i) for i in e.items)
            return e if all(a is b for a, b in zip(items, e.items)) else Seq(items)
        if isinstance(e, Alt):
            options = tuple(walk(o) for o in e.options)
            return e if all(a is b for a, b in zip(options, e.options)) else Alt(options)
        if isinstance(e, Repeat):
            inner = walk(e.expr)
            big = e.min > REPEAT_LIMIT or (e.max is not None and e.max > REPEAT_LIMIT)
            if not big:
                return e if inner is e.expr else Repeat(inner, e.min, e.max)
            base = unit(inner)
            parts: list[Expr] = exactly(base, e.min) if e.min > REPEAT_LIMIT else \
                ([Repeat(base, e.min, e.min)] if e.min else [])
            if e.max is None:
                parts.append(Repeat(base, 0, None))
            elif e.max > e.min:
                parts.append(up_to(base, e.max - e.min))
            return Seq(tuple(parts)) if len(parts) != 1 else parts[0]
        return e

    for name, body in rules.items():
        out[name] = walk(body)
    out.update(helpers)
    return out
