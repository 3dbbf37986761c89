"""``unevaluatedProperties``/``unevaluatedItems`` next to combinators, against python-jsonschema.

Each schema is compiled in strict mode (so nothing may be dropped); each hand-written instance has
the verdict written next to it, which python-jsonschema must confirm, and the grammar must give it
in the default and compact serializations.
"""
from __future__ import annotations

import warnings

import pytest

from halter.errors import UnsupportedSchemaError
from halter.grammar import Grammar
from tests.schema_checks import assert_grammar_agrees
from halter.schemas import SchemaWarning

OBJ = {"type": "object"}

CASES = [
    # allOf: properties named in a subschema are evaluated
    ({"properties": {"a": {"type": "string"}}, "allOf": [{"properties": {"b": {"type": "integer"}}}],
      "unevaluatedProperties": False},
     [({"a": "x", "b": 1}, True), ({"b": 2}, True), ({"a": "x", "c": 1}, False), ({"b": "x"}, False)]),
    # anyOf: only the branches that succeed evaluate
    ({"anyOf": [{"properties": {"a": {"const": 1}}, "required": ["a"]},
                {"properties": {"b": {"const": 2}}, "required": ["b"]}], "unevaluatedProperties": False},
     [({"a": 1}, True), ({"b": 2}, True), ({"a": 1, "b": 2}, True), ({"a": 1, "b": 3}, False),
      ({"a": 1, "c": 1}, False), ({}, False)]),
    # oneOf: exactly one branch, which evaluates its own properties
    ({"oneOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}}, "required": ["b"]}], "unevaluatedProperties": False},
     [({"a": "x"}, True), ({"b": 1}, True), ({"a": "x", "b": 1}, False), ({"a": "x", "b": "y"}, False)]),
    # if/then/else: a failing "if" evaluates nothing
    ({"if": {"properties": {"kind": {"const": "n"}}, "required": ["kind"]},
      "then": {"properties": {"value": {"type": "number"}}}, "else": {"properties": {"text": {"type": "string"}}},
      "unevaluatedProperties": False},
     [({"kind": "n", "value": 1}, True), ({"kind": "n", "text": "x"}, False), ({"kind": "s", "text": "x"}, False),
      ({"text": "x"}, True), ({"kind": "n"}, True)]),
    # dependentSchemas: evaluates only when its key is present
    ({"properties": {"a": {}}, "dependentSchemas": {"a": {"properties": {"b": {"type": "integer"}}}},
      "unevaluatedProperties": False},
     [({"a": 1, "b": 2}, True), ({"b": 2}, False), ({"a": 1}, True), ({"a": 1, "b": "x"}, False)]),
    # $ref siblings
    ({"$defs": {"base": {"properties": {"id": {"type": "integer"}}, "required": ["id"]}},
      "$ref": "#/$defs/base", "properties": {"name": {"type": "string"}}, "unevaluatedProperties": False},
     [({"id": 1, "name": "x"}, True), ({"id": 1}, True), ({"id": 1, "other": 1}, False), ({"name": "x"}, False)]),
    # nested: the inner keyword sees only its own subschema, and evaluates everything for the outer
    ({"allOf": [{"properties": {"a": {}}, "unevaluatedProperties": False}], "properties": {"b": {}}},
     [({"a": 1}, True), ({"a": 1, "b": 1}, False), ({}, True)]),
    ({"properties": {"a": {}}, "allOf": [{"unevaluatedProperties": {"type": "integer"}}],
      "unevaluatedProperties": False},
     [({"a": 1, "b": 2}, True), ({"b": "x"}, False), ({"a": "x"}, False), ({}, True)]),
    # a schema for the unevaluated properties, and a recursive $ref
    ({"properties": {"x": {"$ref": "#"}}, "unevaluatedProperties": {"type": "boolean"}},
     [({"x": {"x": {"y": True}}}, True), ({"x": {"y": 1}}, False), ({"y": False, "x": {}}, True)]),
    # not: a key the subschema leaves unevaluated makes it fail
    ({"not": {"anyOf": [True, {"properties": {"foo": True}}], "unevaluatedProperties": False}},
     [({"bar": 1}, True), ({"foo": 1}, False), ({}, False), (1, False), ({"foo": 1, "bar": 1}, True)]),
    ({"not": {"properties": {"a": {"type": "integer"}}, "unevaluatedProperties": False}},
     [({"b": 1}, True), ({"a": "x"}, True), ({"a": 1}, False), ({}, False), ("s", False)]),
    # unevaluatedItems: prefixItems across allOf
    ({"prefixItems": [{"type": "string"}], "allOf": [{"prefixItems": [True, {"type": "integer"}]}],
      "unevaluatedItems": False},
     [(["a"], True), (["a", 1], True), (["a", 1, 2], False), ([], True)]),
    # anyOf: a branch whose prefix fails does not evaluate
    ({"anyOf": [{"prefixItems": [{"const": 1}]}, {"prefixItems": [True, {"const": 2}]}], "unevaluatedItems": False},
     [([1], True), ([1, 2], True), ([1, 3], False), ([5, 2], True), ([5], True), ([1, 2, 3], False)]),
    # contains evaluates the items it matches
    ({"contains": {"type": "string"}, "unevaluatedItems": {"type": "integer"}},
     [([1, "a"], True), ([1.5, "a"], False), (["a"], True), ([], False), ([2, 3], False)]),
    # if without then/else still evaluates when it succeeds
    ({"if": {"prefixItems": [{"const": "a"}]}, "then": {"prefixItems": [True, {"type": "integer"}]},
      "unevaluatedItems": False},
     [(["a", 1], True), (["b"], False), (["a", 1, 2], False), ([], True), (["a"], True)]),
]


def _check(schema: dict, instances: list, **options) -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    assert_grammar_agrees(schema, instances, **options)


@pytest.mark.parametrize("schema,instances", CASES, ids=range(len(CASES)))
def test_unevaluated_is_exact_next_to_combinators(schema, instances):
    _check(schema, instances, strict=True)


def test_pattern_properties_in_one_branch_and_names_in_another():
    schema = {"anyOf": [{"patternProperties": {"^x": {"type": "integer"}}}, {"properties": {"a": {}}}],
              "unevaluatedProperties": {"type": "string"}}
    # key "x1" with a string: the pattern branch fails, so "x1" is unevaluated and must be a string
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        _check(schema, [({"x1": 1}, True), ({"y": "s"}, True), ({"y": 1}, False), ({"a": 1, "y": 2}, False),
                        ({"x1": "s"}, True), ({"a": [], "x1": 2, "z": "q"}, True)])


def test_too_many_differently_evaluating_branches_is_reported():
    schema = {"anyOf": [{"properties": {k: {"type": "integer"}}, "required": [k]} for k in "abcde"],
              "unevaluatedProperties": False}
    with pytest.raises(UnsupportedSchemaError) as err:
        Grammar.from_json_schema(schema, strict=True)
    assert err.value.keyword == "unevaluatedProperties"
    with pytest.warns(SchemaWarning, match="unevaluatedProperties"):
        g = Grammar.from_json_schema(schema)
    assert g.matches('{"a": 1, "z": 2}')          # dropped: a superset, never rejects a valid value
    assert g.matches('{"a": 1, "b": 2}') and not g.matches('{"z": 2}')
