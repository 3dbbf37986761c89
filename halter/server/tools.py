"""Tool calls: OpenAI ``tools`` + ``tool_choice`` as a grammar, and the output read back as ``tool_calls``.

A call is generated as one JSON object ``{"name": ..., "arguments": {...}}`` whose ``arguments``
are constrained by that function's ``parameters`` schema (the schema keeps its own ``$ref`` scope:
it is embedded under an ``$id``). ``"required"`` allows any one of the functions, a named
``tool_choice`` exactly that one, and ``"auto"`` either such a call or plain text that does not
start with ``{``. The tools are passed to the chat template as ``tools``; a template that does
not use them gets a system message describing them and the call format instead.
"""
from __future__ import annotations

import json
import uuid
from typing import Any, Mapping, Sequence

from halter.api import model_memo
from halter.constraints import Constraint, json_value_parser

__all__ = ["call_schema", "tool_calls_of", "tool_constraint", "tools_system_message"]

_AUTO_ROOT = "halter-tool-or-text"


def call_schema(functions: Sequence[Mapping[str, Any]], choice: Any) -> dict[str, Any]:
    """The JSON Schema of one call to any of ``functions`` (or to the one ``choice`` names)."""
    if isinstance(choice, Mapping):
        functions = [f for f in functions if f["name"] == choice["name"]]
    alts = []
    for i, fn in enumerate(functions):
        params = fn["parameters"]
        if isinstance(params, Mapping) and "$id" not in params:
            params = {**params, "$id": f"urn:halter:tool:{i}"}
        alts.append({"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": params},
                     "required": ["name", "arguments"], "additionalProperties": False})
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def tool_constraint(model: Any, functions: Sequence[Mapping[str, Any]], choice: Any) -> Constraint:
    """The compiled grammar of a tool-calling request (kept in ``halter.cache`` for the next
    request with the same tools)."""
    key = ("tools", json.dumps([functions, choice], sort_keys=True, default=str))
    return model_memo(model, key, lambda: _tool_constraint(model, functions, choice))


def _tool_constraint(model: Any, functions: Sequence[Mapping[str, Any]], choice: Any) -> Constraint:
    from halter.grammar import Grammar
    from halter.schemas import json_schema_to_gbnf

    schema = call_schema(functions, choice)
    if choice == "auto":
        gbnf = json_schema_to_gbnf(schema) + \
            f"\n{_AUTO_ROOT} ::= root | halter-text\nhalter-text ::= [^{{] .*\n"
        grammar = Grammar.from_gbnf(gbnf, root=_AUTO_ROOT)
        return Constraint(grammar.compile(model.vocab), lambda text: text)
    grammar = Grammar.from_json_schema(schema)
    return Constraint(grammar.compile(model.vocab), json_value_parser(schema))


def tool_calls_of(text: str) -> list[dict[str, Any]] | None:
    """OpenAI ``tool_calls`` for a generated call, or ``None`` when ``text`` is not a (complete) call."""
    if not text.startswith("{"):          # the grammar's call branch starts right there; "  {" is text
        return None
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str) or "arguments" not in call:
        return None
    return [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
             "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]


def tools_system_message(functions: Sequence[Mapping[str, Any]], choice: Any) -> str:
    """A system message that describes the tools and the call format, for templates without tools."""
    lines = ["You can call these functions:"]
    for fn in functions:
        lines.append(json.dumps({"name": fn["name"], "description": fn.get("description", ""),
                                 "parameters": fn["parameters"]}, ensure_ascii=False))
    how = 'To call a function, reply with only {"name": <function name>, "arguments": <arguments object>}.'
    if choice == "auto":
        how += " Otherwise reply with plain text."
    lines.append(how)
    return "\n".join(lines)
