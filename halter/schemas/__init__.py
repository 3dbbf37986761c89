"""JSON Schema, regex, Pydantic models and Python types -> GBNF grammars."""
from halter.schemas.converter import SchemaWarning, json_schema_to_gbnf, schema_to_rules
from halter.schemas.regex import RegexError, UnsupportedRegexError, regex_to_gbnf

__all__ = ["RegexError", "SchemaWarning", "UnsupportedRegexError", "json_schema_to_gbnf",
           "regex_to_gbnf", "schema_to_rules"]
