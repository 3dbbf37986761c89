"""JSON Schema, regex, Pydantic models and Python types -> GBNF grammars.

``json_schema_to_gbnf(schema)`` and ``regex_to_gbnf(pattern)`` return GBNF text for
``Grammar.from_gbnf``; ``pydantic_to_json_schema`` and ``type_to_json_schema`` turn Python-side
declarations into JSON Schema first. See docs/json_schema.md for coverage and departures.
Importing this package gives ``Grammar`` its ``from_json_schema``, ``from_regex``, ``from_pydantic``
and ``from_type`` constructors (``grammar_constructors``).
"""
from typing import Any

from halter.schemas import grammar_constructors  # noqa: F401  (registers Grammar.from_json_schema, ...)

_EXPORTS = {
    "SchemaWarning": "halter.schemas.converter",
    "json_schema_to_gbnf": "halter.schemas.json_schema",
    "schema_to_rules": "halter.schemas.json_schema",
    "pydantic_to_json_schema": "halter.schemas.pytypes",
    "type_to_json_schema": "halter.schemas.pytypes",
    "RegexError": "halter.schemas.regex",
    "UnsupportedRegexError": "halter.schemas.regex",
    "regex_to_gbnf": "halter.schemas.regex",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """The converters load on first use (jsonschema, which they need, takes a while to import)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'halter.schemas' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
