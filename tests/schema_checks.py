"""Shared checks for schema tests: jsonschema's verdict and the grammar's agree on every instance;
random texts drawn from a schema's grammar."""
from __future__ import annotations

import json
import random
from typing import Any, Iterator

import jsonschema

from halter.grammar import Grammar
from halter.grammar.random_text import random_text
from halter.schemas import schema_to_rules


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


def random_texts(schema: dict, n: int, seed: int, **options: Any) -> Iterator[str]:
    """``n`` texts drawn from the grammar of ``schema`` (``schema_to_rules(schema, **options)``) by
    walks choosing random alternatives, reproducibly from ``seed``."""
    rules = schema_to_rules(schema, **options)
    rng = random.Random(seed)
    for _ in range(n):
        yield random_text(rules, "root", rng)
