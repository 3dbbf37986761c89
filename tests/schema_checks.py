"""Shared checks for schema tests: jsonschema's verdict and the grammar's agree on every instance;
random texts drawn from a schema's grammar."""
from __future__ import annotations

import json
import random
from typing import Any, Iterable, Iterator

import jsonschema

from halter.grammar import Grammar
from halter.grammar.random_text import random_text
from halter.schemas import schema_to_rules


SPELLINGS = {
    "default": json.dumps,
    "compact": lambda value: json.dumps(value, separators=(",", ":")),
    "unicode": lambda value: json.dumps(value, ensure_ascii=False),
}
"""The ways a JSON value is written for the agreement checks."""


def assert_verdicts_agree(grammar: Grammar, validator: Any, values: Iterable[Any], *,
                          spellings: tuple[str, ...] = ("default", "compact"), both_verdicts: bool = False) -> None:
    """The agreement check: for each value, ``grammar`` matches its JSON text, written each way of
    ``spellings`` (``SPELLINGS``), exactly when ``validator`` (jsonschema) finds the value valid. With
    ``both_verdicts`` the values must include valid and invalid ones."""
    verdicts = set()
    for value in values:
        valid = validator.is_valid(value)
        verdicts.add(valid)
        for name in spellings:
            text = SPELLINGS[name](value)
            assert grammar.matches(text) == valid, f"{text} under {json.dumps(validator.schema)}: valid={valid}"
    if both_verdicts:
        assert verdicts == {True, False}, "the values should include valid and invalid ones"


def assert_text_verdicts_agree(grammar: Grammar, validator: Any, texts: Iterable[str], *, compact: bool = False,
                               both_verdicts: bool = False) -> None:
    """The agreement check on JSON texts as written (their spelling is part of the case): ``grammar``
    matches each exactly when ``validator`` finds its value valid; with ``compact``, the compact
    re-spelling too where it reads the same (ASCII, no exponent)."""
    verdicts = {text: validator.is_valid(json.loads(text)) for text in texts}
    if both_verdicts:
        assert any(verdicts.values()) and not all(verdicts.values()), "cases must hold both verdicts"
    for text, valid in verdicts.items():
        assert grammar.matches(text) == valid, f"{text} under {json.dumps(validator.schema)}: valid={valid}"
        if compact:
            respelled = json.dumps(json.loads(text), separators=(",", ":"))
            if respelled.isascii() and "e" not in text.lower():
                assert grammar.matches(respelled) == valid, respelled


def assert_grammar_agrees(schema: dict, instances: list[tuple[Any, bool]],
                          validator_class: Any = jsonschema.Draft202012Validator, **options: Any) -> None:
    """Each ``(instance, valid)``: the test data is right, and the grammar built from ``schema``
    (``Grammar.from_json_schema(schema, **options)``) accepts the instance, in default and compact
    serialization, exactly when it is valid."""
    validator = validator_class(schema)
    g = Grammar.from_json_schema(schema, **options)
    for instance, valid in instances:
        assert validator.is_valid(instance) == valid, f"test data: {instance!r} under {schema}"
    assert_verdicts_agree(g, validator, [instance for instance, _ in instances])


def random_texts(schema: dict, n: int, seed: int, **options: Any) -> Iterator[str]:
    """``n`` texts drawn from the grammar of ``schema`` (``schema_to_rules(schema, **options)``) by
    walks choosing random alternatives, reproducibly from ``seed``."""
    rules = schema_to_rules(schema, **options)
    rng = random.Random(seed)
    for _ in range(n):
        yield random_text(rules, "root", rng)
