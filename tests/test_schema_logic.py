"""``not``, ``if``/``then``/``else``, ``dependentSchemas`` and ``contains`` against python-jsonschema.

Each schema is compiled in strict mode (so nothing may be dropped) and every candidate instance must
get the validator's verdict, in the default and compact serializations.
"""
from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from halter.errors import SchemaError, UnsupportedSchemaError
from halter.grammar import Grammar
from halter.schemas import SchemaWarning, json_schema_to_gbnf
from halter.schemas.logic import negate
from tests.schema_checks import assert_verdicts_agree, random_texts

CANDIDATES = [None, True, False, 0, 1, -3, 2.5, 10, "", "a", "b", "abc", "hello", [], [1], ["a", 2],
              [1, 2, 3], ["x", "y"], {}, {"a": 1}, {"a": "x"}, {"a": 1, "b": 2}, {"b": 2}, {"c": 3},
              {"a": 2, "c": 1}]

SCHEMAS = [
    {"not": {"type": "string"}},
    {"not": {"type": ["string", "number"]}},
    {"not": {"enum": ["a", 1, None]}},
    {"not": {"const": True}},
    {"not": {"minimum": 2}},
    {"not": {"type": "string", "minLength": 2}},
    {"not": {"required": ["a"]}},
    {"not": {"properties": {"a": {"type": "string"}}}},
    {"not": {"anyOf": [{"type": "object"}, {"type": "array", "minItems": 2}]}},
    {"not": {"not": {"type": "array"}}},
    {"not": {"items": {"type": "string"}}},
    {"not": {"contains": {"type": "string"}}},
    {"properties": {"a": {"not": {}}}},
    {"if": {"type": "object", "required": ["a"]}, "then": {"required": ["b"]}, "else": {"type": "array"}},
    {"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}, "else": {"type": "object"}},
    {"if": {"type": "string"}, "else": {"type": "number"}},
    {"dependentSchemas": {"a": {"required": ["b"]}}},
    {"dependentSchemas": {"a": {"properties": {"b": {"type": "string"}}}}},
    {"type": "array", "contains": {"type": "string"}},
    {"type": "array", "items": {"type": ["integer", "string"]}, "contains": {"type": "integer"}, "minContains": 2},
    {"type": "array", "contains": {"const": 1}, "minContains": 0},
    {"$defs": {"s": {"type": "string"}}, "not": {"$ref": "#/$defs/s"}},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_rewritten_keywords_are_exact(schema):
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    assert_verdicts_agree(g, jsonschema.Draft202012Validator(schema), CANDIDATES)


def test_negate_gives_up_on_what_has_no_positive_form():
    resolve = lambda ref: None  # noqa: E731
    assert negate({"pattern": "^a"}, resolve, "draft2020") is None
    assert negate({"type": "string", "format": "email"}, resolve, "draft2020") is None
    assert negate({"enum": [[1]]}, resolve, "draft2020") is None
    assert negate({}, resolve, "draft2020") is False
    assert negate({"title": "x", "x-unknown": 1}, resolve, "draft2020") is False


def test_default_mode_is_lenient_and_warns():
    schema = {"type": "array", "uniqueItems": True}
    with pytest.warns(SchemaWarning, match="uniqueItems"):
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches("[1, 1]")           # a superset: the dropped keyword is not enforced
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_gbnf(schema, strict=True)


def test_schema_accepting_nothing_is_an_error():
    with pytest.raises(SchemaError, match="accepts no value"):
        json_schema_to_gbnf({"not": {}})


def test_ecmascript_property_escapes_are_not_invalid_schemas():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "string", "pattern": "^\\p{L}+$"}))
    assert g.matches('"x"') and not g.matches('"1"')
    with pytest.raises(UnsupportedSchemaError):
        json_schema_to_gbnf({"type": "string", "pattern": "^\\p{Script=Greek}+$"}, strict=True)


def test_refs_inside_a_referenced_one_of_are_inlined_when_intersected():
    schema = {"$defs": {"one": {"oneOf": [{"$ref": "#/$defs/two"}, {"required": ["b"]}]},
                        "two": {"required": ["c"], "properties": {"c": {"type": "integer"}}}},
              "allOf": [{"$ref": "#/$defs/one"}], "type": "object", "properties": {"b": {"type": "string"}}}
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches('{"c": 1}') and g.matches('{"b": "x"}')
    assert not g.matches('{"c": "x"}') and not g.matches("{}")


def test_a_pattern_matching_every_key_leaves_no_additional_properties():
    schema = {"properties": {"basic": {"type": "string"}}, "patternProperties": {".*": {"type": "string"}},
              "required": ["basic"]}
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    assert g.matches('{"basic": "x", "a": "y"}')
    assert not g.matches('{"basic": "x", "a": 1}') and not g.matches('{"basic": 1}')


def test_many_required_keys_in_any_order():
    names = "abcdefgh"
    schema = {"type": "object", "required": list(names), "properties": {k: {"type": "integer"} for k in names + "ij"}}
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    assert g.matches(json.dumps({k: 1 for k in reversed(names + "j")}))
    assert not g.matches(json.dumps({k: 1 for k in names[1:]}))


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"type": "number"}, {"minimum": 2}]},
    {"oneOf": [{"type": "integer"}, {"type": ["number", "string"]}]},
    {"not": {"type": "integer"}},
    {"oneOf": [{"const": "a"}, {"type": "string"}]},
    {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "type": "object"},
    {"oneOf": [{"type": "string", "minLength": 2}, {"type": "string", "maxLength": 3}, {"type": "array"}]},
], ids=lambda s: json.dumps(s)[:60])
def test_overlapping_one_of_is_exact_when_branches_can_be_negated(schema):
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    assert_verdicts_agree(g, jsonschema.Draft202012Validator(schema), CANDIDATES + [2, 3, 1.5, "abcd", "xy"],
                          spellings=("default",))


@pytest.mark.parametrize("schema", [
    {"dependentRequired": {"bar": ["foo"]}},
    {"dependentRequired": {"quux": ["foo", "bar"]}, "properties": {"foo": {"type": "integer"}}},
], ids=lambda s: json.dumps(s)[:60])
def test_dependent_required_keys_without_property_schemas(schema):
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    values = [{}, {"bar": 2}, {"foo": 1, "bar": 2}, {"quux": 1}, {"foo": 1, "bar": 1, "quux": 1},
              {"foo": "x", "bar": 1, "quux": 1}, {"zap": 1}]
    assert_verdicts_agree(g, jsonschema.Draft202012Validator(schema), values, spellings=("default",))


def test_dependencies_on_objects_with_many_properties():
    props = {k: {"type": "string"} for k in ["order", "billTo", "billAddress", "shipTo", "shipAddress", "loyaltyId", "bonus"]}
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "properties": props, "additionalProperties": False,
              "required": ["order"], "dependencies": {"shipTo": ["shipAddress"], "loyaltyId": ["bonus"]}}
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=True))
    validator = jsonschema.Draft4Validator(schema)
    for value in [{"order": "1"}, {"order": "1", "shipTo": "x"}, {"shipAddress": "a", "order": "1", "shipTo": "x"},
                  {"order": "1", "loyaltyId": "x", "billTo": "y"}, {"bonus": "b", "loyaltyId": "x", "order": "1"}]:
        assert g.matches(json.dumps(value)) == validator.is_valid(value), value


def test_too_many_combinations_keep_the_conjuncts_merged_so_far():
    many = {"anyOf": [{"const": i} for i in range(10)]}
    schema = {"type": "integer", "minimum": 3, "allOf": [many, {"anyOf": [{"maximum": 100 + i} for i in range(10)]}]}
    with pytest.warns(SchemaWarning, match="too many combinations"):
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches("5") and not g.matches("2") and not g.matches('"x"')


def test_idn_hostname_superset_keeps_valid_names_and_applies_contextual_rules():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "string", "format": "idn-hostname"}))
    for name in ["실례.테스트", "xn--ihqwcrb4cv8a8dqg056pqjye", "l·l", "α͵β", "א׳ב", "क्\u200dष", "a。b", "a" * 63]:
        assert g.matches(json.dumps(name)), name
    for name in ["", "a..b", "-hello", "hello-", "a·l", "α͵S", "׳ב", "\u200dष", "\u0300hello", "a" * 64]:
        assert not g.matches(json.dumps(name)), name


@pytest.mark.parametrize("schema", [
    {"contains": {"const": 1}, "maxContains": 1},
    {"contains": {"const": 1}, "minContains": 2, "maxContains": 3},
    {"contains": {"const": 1}, "minContains": 0, "maxContains": 1},
    {"items": {"type": "integer"}, "contains": {"minimum": 2}, "maxContains": 1},
], ids=lambda s: json.dumps(s)[:60])
def test_max_contains_counts_matches_among_non_matches(schema):
    g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "array", **schema}, strict=True))
    validator = jsonschema.Draft202012Validator({"type": "array", **schema})
    for value in [[], [1], [2], [1, 1], [1, 2], [2, 1, 1], [1, 1, 1], [1, 1, 1, 1], [3, 1, 2, 1], ["a", 1], [5, 5]]:
        assert g.matches(json.dumps(value)) == validator.is_valid(value), value


@pytest.mark.parametrize("schema", SCHEMAS + [
    {"oneOf": [{"type": "number"}, {"minimum": 2}]},
    {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "type": "object"},
    {"type": "array", "contains": {"const": 1}, "minContains": 1, "maxContains": 2},
], ids=lambda s: json.dumps(s)[:60])
def test_random_texts_of_rewritten_grammars_are_valid(schema):
    validator = jsonschema.Draft202012Validator(schema)
    for text in random_texts(schema, 30, seed=7, strict=True):
        assert validator.is_valid(json.loads(text)), text
