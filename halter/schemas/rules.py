"""A growing set of named GBNF rules: readable names from schema paths, and sharing of equal bodies."""
from __future__ import annotations

import re

from halter.grammar.ast import Expr, RuleRef

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

    def add(self, hint: str, body: Expr) -> RuleRef:
        """A reference to a rule with ``body``: an existing one with the same body, or a new one."""
        if isinstance(body, RuleRef):
            return body
        existing = self._by_body.get(body)
        if existing is not None:
            return RuleRef(existing)
        return self.define(self.reserve(hint), body)

    def fixed(self, name: str, body: Expr) -> RuleRef:
        """A rule with exactly ``name`` (shared helpers such as ``ws`` or ``json-string``)."""
        if name not in self.rules:
            self.define(name, body)
        return RuleRef(name)
