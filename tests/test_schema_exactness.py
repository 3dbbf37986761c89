"""Exactness fixes checked against python-jsonschema: object constants in any key order, item
keywords merged across ``allOf``, ``uniqueItems`` over small value sets, escaped property names."""
from __future__ import annotations

import json
import warnings
from decimal import Decimal

import jsonschema
import pytest

from halter.grammar import Grammar
from halter.schemas import SchemaWarning, json_schema_to_gbnf
from tests.schema_checks import random_texts

D7 = "http://json-schema.org/draft-07/schema#"

# (schema, valid, invalid); every schema compiles in strict mode (so nothing is dropped)
CASES = [
    ({"const": {"foo": "bar", "baz": "bax"}},
     [{"foo": "bar", "baz": "bax"}, {"baz": "bax", "foo": "bar"}],
     [{"foo": "bar"}, {"foo": "bar", "baz": "bax", "x": 1}, {"baz": "bar", "foo": "bax"}]),
    ({"enum": [{"a": {"x": 1, "y": [1, {"p": None, "q": 2}]}, "b": 2}, [{"k": 1, "j": 2}]]},
     [{"b": 2, "a": {"y": [1.0, {"q": 2, "p": None}], "x": 1}}, [{"j": 2, "k": 1}]],
     [{"b": 2, "a": {"y": [{"q": 2, "p": None}, 1], "x": 1}}, [{"j": 2}], {"a": 1, "b": 2}]),
    ({"items": {"minimum": 5}, "allOf": [{"prefixItems": [{"minimum": 3}]}]},
     [[5, 5], [6], []], [[3, 5], [5, 4]]),
    ({"prefixItems": [{"type": "integer"}], "items": {"type": "string"},
      "allOf": [{"prefixItems": [{"minimum": 0}, {"maxLength": 2}]}]},
     [[1, "ab", "xyz"], [0]], [[-1], [1, "abc"], [1, 2]]),
    ({"$schema": D7, "items": {"type": "integer"}, "allOf": [{"items": [{"minimum": 3}], "additionalItems": {"maximum": 0}}]},
     [[3, 0, -1], [4]], [[2], [3, 1], [3, "a"]]),
    ({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
     [[], [True], [False, True]], [[False, False], [True, False, True]]),
    ({"type": "array", "items": {"enum": ["a", "b", 1, None]}, "uniqueItems": True, "minItems": 2},
     [["a", 1], [None, "b", "a", 1]], [["a"], ["a", "a"], [1, 1.0], ["a", "b", "a"]]),
    ({"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "items": False, "uniqueItems": True},
     [[False, True], [True]], [[False, False], [True, True], [True, False, True]]),
    ({"$schema": D7, "items": [{"type": "boolean"}, {"type": "null"}], "additionalItems": {"type": "integer", "minimum": 0,
      "maximum": 2}, "uniqueItems": True}, [[True, None, 0, 2], [False]], [[True, None, 1, 1], [True, True]]),
    ({"dependentSchemas": {"foo\tbar": {"required": ["x\"y"]}, "foo'bar": {"properties": {"a\u00e9": {"type": "integer"}}}}},
     [{"foo\tbar": 1, "x\"y": 2}, {"foo'bar": 1, "a\u00e9": 2}, {"a": 1, "b": 2}],
     [{"foo\tbar": 1}, {"foo'bar": 1, "a\u00e9": "x"}, {"foo\tbar": 1, "x\"z": 2}]),
    # dependentSchemas.json#2: the escaped keys were always recognised; the count of extra members
    # next to a tracked key was what got dropped
    ({"dependentSchemas": {"foo\tbar": {"minProperties": 4}, "foo'bar": {"required": ["foo\"bar"]}}},
     [{"foo\tbar": 1, "a": 2, "b": 3, "c": 4}, {"foo'bar": 1, "foo\"bar": 2}, {"x": 1}],
     [{"foo\tbar": 1, "a": 2}, {"foo'bar": 1}]),
    ({"properties": {"a": {}, "b": {"type": "integer"}}, "required": ["a"], "minProperties": 2, "maxProperties": 3},
     [{"a": 1, "x": 2}, {"b": 1, "a": 2, "y": 3}, {"x": 1, "a": 2, "y": 3}], [{"a": 1}, {"a": 1, "x": 2, "y": 3, "z": 4}, {"x": 1, "y": 2}]),
]


def _texts(v):
    return {json.dumps(v), json.dumps(v, separators=(",", ":")), json.dumps(v, ensure_ascii=False)}


@pytest.mark.parametrize("schema,valid,invalid", CASES, ids=[json.dumps(c[0])[:40] for c in CASES])
def test_grammar_agrees_with_jsonschema(schema, valid, invalid):
    validator = jsonschema.validators.validator_for(schema)(schema)
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    for v in valid:
        assert validator.is_valid(v), v
        for t in _texts(v):
            assert g.matches(t), f"valid instance rejected: {t}"
    for v in invalid:
        assert not validator.is_valid(v), v
        for t in _texts(v):
            assert not g.matches(t), f"invalid instance accepted: {t}"


@pytest.mark.parametrize("schema", [c[0] for c in CASES], ids=[json.dumps(c[0])[:40] for c in CASES])
def test_random_instances_are_valid(schema):
    validator = jsonschema.validators.validator_for(schema)(schema)
    checked = 0
    for text in random_texts(schema, 30, seed=5, strict=True):
        if _has_duplicate_keys(text):       # documented: duplicate extra keys count twice
            continue
        assert validator.is_valid(json.loads(text)), text
        checked += 1
    assert checked >= 20


def _has_duplicate_keys(text: str) -> bool:
    found = []

    def pairs(items):
        keys = [k for k, _ in items]
        found.append(len(set(keys)) < len(keys))
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return any(found)


def test_unique_items_with_a_finite_prefix_only_is_a_warned_superset():
    """Booleans first, then any items: the prefix is kept duplicate-free, the rest is not checked."""
    schema = {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "boolean"}], "uniqueItems": True}
    with pytest.warns(SchemaWarning, match="uniqueItems"):
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches('[false, true, "foo", "bar"]') and g.matches("[true]")
    assert not g.matches("[false, false]") and not g.matches('[true, true, "foo"]')
    assert g.matches('[true, false, "foo", "foo"]')        # the documented superset


def test_unique_items_over_large_domains_still_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        json_schema_to_gbnf({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True})
    with pytest.warns(SchemaWarning, match="uniqueItems"):
        json_schema_to_gbnf({"type": "array", "items": {"enum": list(range(9))}, "uniqueItems": True})


ONE_OF = [
    # a key one branch requires is forbidden by the other (JSONSchemaStore bitbucket-pipelines image)
    ({"type": "object", "oneOf": [
        {"properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": False},
        {"properties": {"name": {"type": "string"}, "user": {"type": "string"}}, "required": ["name", "user"],
         "additionalProperties": False}]},
     [{"name": "a"}, {"name": "a", "user": "b"}], [{}, {"user": "b"}, {"name": "a", "x": 1}]),
    # tagged union: the discriminator's constants differ
    ({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}}, "required": ["kind", "y"]}]},
     [{"kind": "a", "x": 1}, {"kind": "b", "y": 1}, {"kind": "a", "y": 2}], [{"kind": "b"}, {"kind": "d", "y": 1}, {}]),
    # closed objects with no key in common share only {}, which three branches accept: exactly-one
    # rejects it (bitbucket-pipelines' step/stage/parallel items, nested inside another oneOf)
    ({"$defs": {"item": {"oneOf": [
        {"type": "object", "properties": {"step": {"type": "object"}}, "additionalProperties": False},
        {"type": "object", "properties": {"stage": {"type": "object"}}, "additionalProperties": False},
        {"type": "object", "properties": {"parallel": {"type": "array"}}, "additionalProperties": False}]}},
      "type": "array", "items": {"oneOf": [
          {"type": "object", "properties": {"variables": {"type": "array"}}, "additionalProperties": False},
          {"$ref": "#/$defs/item"}]}},
     [[{"step": {}}, {"variables": []}, {}, {"parallel": [1]}]],
     [[{"step": {}, "stage": {}}], [{"step": 1}], [{"x": 1}], [{"variables": [], "step": {}}]]),
    # overlapping closed objects: exact through the negation of additionalProperties: false
    ({"oneOf": [{"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False},
                {"type": "object", "properties": {"a": {}, "c": {"type": "integer"}}, "additionalProperties": False}]},
     [{"b": 1}, {"a": 1, "b": 2}, {"c": 1}, {"a": 1, "c": 2}], [{}, {"a": 1}, {"x": 1}, {"a": 1, "c": "x"}, {"b": 1, "c": 1}]),
    # a constant checked against the other branch
    ({"oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"const": "full"}]}, [1, "full", 0.5], [0, "x", -1]),
]


@pytest.mark.parametrize("schema,valid,invalid", ONE_OF, ids=[json.dumps(c[0])[:40] for c in ONE_OF])
def test_disjoint_one_of_branches_are_exact_without_negation(schema, valid, invalid):
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # proved disjoint: no "may overlap" warning
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    validator = jsonschema.Draft202012Validator(schema)
    for v in valid:
        assert validator.is_valid(v) and g.matches(json.dumps(v)), v
    for v in invalid:
        assert not validator.is_valid(v) and not g.matches(json.dumps(v)), v


def test_overlapping_object_branches_are_still_reported():
    """Both branches accept {"a": 1}, and additionalProperties with a schema has no positive
    negation ("some extra key whose value fails it"), so exactly-one cannot be enforced: default
    mode warns and accepts the overlap."""
    schema = {"oneOf": [{"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": {"type": "integer"}},
                        {"type": "object", "properties": {"a": {}, "c": {}}, "additionalProperties": {"type": "integer"}}]}
    with pytest.warns(SchemaWarning, match="oneOf"):
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches('{"b": 1}') and g.matches('{"a": 1}')


@pytest.mark.parametrize("schema", [c[0] for c in ONE_OF], ids=[json.dumps(c[0])[:40] for c in ONE_OF])
def test_random_instances_of_exact_one_of_are_valid(schema):
    validator = jsonschema.Draft202012Validator(schema)
    for text in random_texts(schema, 30, seed=11, strict=True):
        # "3E-9731" is above 0 although it underflows a float: exact decimals then
        assert validator.is_valid(json.loads(text)) or validator.is_valid(json.loads(text, parse_float=Decimal)), text


@pytest.mark.parametrize("schema, instances", [
    # two different `contains` in an allOf: both must find a match (was merged into one `contains`
    # matching both at once, which rejected ["a", "b"])
    ({"allOf": [{"contains": {"const": "a"}}, {"contains": {"const": "b"}}]},
     [["a", "b"], ["b", "a"], ["b", "x", "a"]]),
    # minContains applies to its sibling `contains` only: here it has none and is a no-op
    ({"allOf": [{"contains": {"const": "a"}}, {"minContains": 2}]}, [["a"], ["a", "x"]]),
    ({"allOf": [{"contains": {"const": "a"}}, {"contains": {"const": "b"}, "minContains": 2}]},
     [["a", "b", "b"], ["b", "a", "b"]]),
])
def test_contains_in_allof_never_rejects_a_valid_array(schema: dict, instances: list) -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for inst in instances:
        assert validator.is_valid(inst)
        assert g.matches(json.dumps(inst)), inst
    assert not g.matches("[]")
