"""JSON text inside a JSON string: ``contentMediaType: application/json`` with ``contentSchema``.

Pydantic's ``Json[T]`` fields hold a string whose content is the JSON of a ``T`` (``"[1, 2]"``).
JSON Schema calls ``contentSchema`` an annotation, so only ``target="pydantic"`` enforces it. The
grammar of the content is the grammar of ``contentSchema`` with every character spelled as a JSON
string character (``"`` as ``\\"``, a newline as ``\\n``, any character as ``\\uXXXX``...): a
character-by-character substitution, which keeps a grammar context-free. Each rule the content
reaches gets an escaped copy; they are made once the whole schema is converted, since a
``$ref``'d rule may be defined only after the string that embeds it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.grammar.ast import Expr, Literal, RuleRef
from halter.schemas.json_text import cat

if TYPE_CHECKING:
    from halter.schemas.converter import Converter


class EmbeddedJson:
    """Builds string grammars whose content is JSON text of a schema, for one converter."""

    def __init__(self, conv: "Converter") -> None:
        self.conv = conv
        self._pending: list[tuple[str, Expr]] = []    # (rule to define, content grammar to escape)
        self._copies: dict[str, str] = {}             # rule -> its escaped copy

    def string(self, s: dict, ptr: str, base: str) -> Expr | None:
        """``"`` + the escaped JSON text of ``s["contentSchema"]`` (any JSON without one) + ``"``."""
        inner = self.conv.visit(s.get("contentSchema", True), ptr + "/contentSchema", base)
        if inner is None:
            return None
        name = self.conv.rules.reserve("json-content")
        self._pending.append((name, inner))
        return cat(Literal('"'), RuleRef(name), Literal('"'))

    def finish(self) -> None:
        """Define the escaped content rules (call after the schema is converted)."""
        while self._pending:
            name, inner = self._pending.pop()
            self.conv.rules.define(name, self._escape(inner))

    def _escape(self, e: Expr) -> Expr:
        return self.conv.js.encode_expr(e, rule=lambda ref: RuleRef(self._copy(ref.name)))

    def _copy(self, name: str) -> str:
        copy = self._copies.get(name)
        if copy is None:
            rules = self.conv.rules
            copy = self._copies[name] = rules.reserve(f"{name}-in-string")
            rules.define(copy, self._escape(rules.rules[name]))
        return copy


def is_embedded_json(s: Any) -> bool:
    """Does the (flat) string schema ``s`` say its content is JSON?"""
    return isinstance(s, dict) and s.get("contentMediaType") == "application/json"
