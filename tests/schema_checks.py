"""Shared check for schema tests: jsonschema's verdict and the grammar's agree on every instance."""
from __future__ import annotations

import json
from typing import Any

import jsonschema

from halter.grammar import Grammar


def assert_grammar_agrees(schema: dict, instances: list[tuple[Any, bool]],
                          validator_class: Any = jsonschema.Draft202012Validator, **options: Any) -> None:
    """Each ``(instance, valid)``: the test data is right, and the grammar built from ``schema``
    (``Grammar.from_json_schema(schema, **options)``) accepts the instance, in default and compact
    serialization, exactly when it is valid."""
    validator = validator_class(schema)
    g = Grammar.from_json_schema(schema, **options)
    for instance, valid in instances:
        assert validator.is_valid(instance) == valid, f"test data: {instance!r} under {schema}"
        for text in (json.dumps(instance), json.dumps(instance, separators=(",", ":"))):
            assert g.matches(text) == valid, f"{text} under {json.dumps(schema)}"
