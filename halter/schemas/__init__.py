"""JSON Schema, regex, Pydantic models and Python types -> GBNF grammars.

``json_schema_to_gbnf(schema)`` and ``regex_to_gbnf(pattern)`` return GBNF text for
``Grammar.from_gbnf``; ``pydantic_to_json_schema`` and ``type_to_json_schema`` turn Python-side
declarations into JSON Schema first. See docs/json_schema.md for coverage and departures.
"""
from halter.schemas.converter import SchemaWarning
from halter.schemas.json_schema import json_schema_to_gbnf, schema_to_rules
from halter.schemas.pytypes import pydantic_to_json_schema, type_to_json_schema
from halter.schemas.regex import RegexError, UnsupportedRegexError, regex_to_gbnf

__all__ = ["RegexError", "SchemaWarning", "UnsupportedRegexError", "json_schema_to_gbnf",
           "pydantic_to_json_schema", "regex_to_gbnf", "schema_to_rules", "type_to_json_schema"]
