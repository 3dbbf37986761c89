"""Checking a schema against its draft's metaschema, the root and every subschema ``$ref`` reaches.

The root document is checked once (``check_document``). A ``$ref`` can also point at a place no
keyword of the metaschema describes (``{"$ref": "#/x", "x": {...}}``), or at keywords the declared
draft does not define (``$defs`` under draft-07): such targets are checked on their own when
resolved (``check_subschema``), so a malformed subschema is a ``SchemaError`` with its pointer
instead of a crash deep in the converter.
"""
from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema import validators

from halter.errors import SchemaError

__all__ = ["check_document", "check_subschema", "validator_class"]

_BY_DRAFT = {"draft4": jsonschema.Draft4Validator, "draft6": jsonschema.Draft6Validator,
             "draft7": jsonschema.Draft7Validator, "draft2019": jsonschema.Draft201909Validator,
             "draft2020": jsonschema.Draft202012Validator}


def _escape(token: Any) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def validator_class(schema: Any) -> type:
    """The jsonschema validator class of a root schema (2020-12 when ``$schema`` is absent)."""
    if isinstance(schema, dict) and "$schema" in schema and not isinstance(schema["$schema"], str):
        raise SchemaError(f"$schema must be a string (a metaschema URI), not {type(schema['$schema']).__name__}",
                          "#/$schema", "$schema")
    return validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _check(schema: Any, cls: type, pointer: str) -> None:
    # no format checker: patterns are ECMA-262 (``\p{L}`` is valid there, not in Python's re)
    e = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if e is not None:
        ptr = "#" + pointer + "".join("/" + _escape(p) for p in e.absolute_path)
        raise SchemaError(f"invalid JSON Schema: {e.message}", ptr, e.validator)


def check_document(schema: Any) -> None:
    """``SchemaError`` (with the pointer of the problem) unless ``schema`` is a valid schema of its draft."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}", "#")
    _check(schema, validator_class(schema), "")


def check_subschema(schema: Any, draft: str, pointer: str) -> None:
    """Check a subschema reached through ``$ref`` at ``pointer`` against the metaschema of ``draft``."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}",
                          "#" + pointer)
    _check(schema, _BY_DRAFT.get(draft, jsonschema.Draft202012Validator), pointer)
