"""Schemas that combine keywords across ``allOf``/``$ref``/``dependentSchemas`` and the number
spellings between them, each checked in strict mode against python-jsonschema's verdict.

The cases are the smallest forms of disagreements a differential fuzz found (random schemas, texts
drawn from their grammars and mutated): a recursive ``$ref`` with sibling keywords that never
finished converting, ``patternProperties`` of one ``allOf`` member exempting keys from another
member's ``additionalProperties``, ``dependentSchemas`` annotating arrays, ``contains: false`` with
``minContains: 0``, a ``$defs`` name holding ``%25``, and exponent spellings of numbers.
"""
from __future__ import annotations

import json
import random

import jsonschema
import pytest

from halter.errors import SchemaError, UnsupportedSchemaError
from halter.grammar import Grammar
from halter.schemas import SchemaWarning, schema_to_rules
from halter.grammar.random_text import random_text
from tests.schema_checks import assert_text_verdicts_agree

CASES = [
    # a $ref next to other keywords inlines its target, which meets the same schema again
    ({"properties": {"c": {"$ref": "#", "type": "object"}}},
     ['{}', '{"c": {}}', '{"c": {"c": {"c": {}}}}', '{"c": 1}', '{"c": {"c": []}}']),
    ({"$defs": {"N": {"type": "object", "properties": {"kids": {"type": "array", "items": {
        "$ref": "#/$defs/N", "required": ["id"]}}}}}, "$ref": "#/$defs/N"},
     ['{}', '{"kids": []}', '{"kids": [{"id": 1, "kids": [{"id": 2}]}]}', '{"kids": [{}]}',
      '{"kids": [{"id": 1, "kids": [{"kids": []}]}]}']),
    ({"$defs": {"A": {"type": "object", "properties": {"x": {"allOf": [{"$ref": "#/$defs/A"}]}}}},
      "$ref": "#/$defs/A"},
     ['{"x": {"x": {}}}', '{"x": {"x": 1}}']),
    ({"items": {"$ref": "#"}, "contains": {"type": "array"}}, ['{}', '[[]]', '[1]', '"a"']),
    ({"properties": {"b": {"$ref": "#"}}, "patternProperties": {"^b": {"type": "object"}}},
     ['{"b": {"b": {}}}', '{"b": {"b": 1}}', '{"b": 2}', '{"bc": 3}']),
    # additionalProperties sees only the names and patterns of its own schema object
    ({"allOf": [{"additionalProperties": False}], "patternProperties": {"a": {}}}, ['{}', '{"a": 1}']),
    ({"allOf": [{"patternProperties": {"c": {}}}], "additionalProperties": False}, ['{}', '{"c": 0}']),
    ({"allOf": [{"properties": {"x": {}}}], "patternProperties": {"^y": {"type": "string"}},
      "additionalProperties": False},
     ['{"x": 1}', '{"y": "a"}', '{"y": 1}', '{}']),
    ({"allOf": [{"patternProperties": {"^a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}],
      "patternProperties": {"b": {"minimum": 3}}, "properties": {"ab": {}, "q": {}}, "required": ["zz"]},
     ['{"zz": "s"}', '{"zz": 1}', '{"zz": "s", "b": 4}', '{"zz": "s", "b": "x"}', '{"zz": "s", "ab": 1}',
      '{"zz": "s", "ab": "x"}', '{"zz": "s", "q": 1}', '{"zz": "s", "abb": 2}', '{"zz": "s", "abb": 4}',
      '{"zz": "s", "bb": 5}', '{"zz": "s", "bb": "a"}']),
    ({"$defs": {"A": {"unevaluatedProperties": False}}, "$ref": "#/$defs/A", "patternProperties": {"b": {}}},
     ['{}', '{"b": 1}']),
    ({"anyOf": [{"unevaluatedProperties": False}], "patternProperties": {"b": {}}}, ['{}', '{"b": 1}']),
    # dependentSchemas applies to objects holding the key only, so it evaluates no array items
    ({"dependentSchemas": {"c": {"prefixItems": [{}]}}, "unevaluatedItems": False},
     ['[]', '[1]', '{"c": 1}']),
    # contains: false matches nothing, which minContains: 0 allows
    ({"type": "array", "contains": False, "minContains": 0, "maxContains": 0}, ['[]', '[1]', '{}']),
    ({"contains": False}, ['[]', '[1]', '{}']),
    # a $defs name holding "%25" stays that name when the $ref is rewritten for unevaluated*
    ({"$defs": {"%25": {"type": "array"}}, "$ref": "#/$defs/%2525", "unevaluatedProperties": False},
     ['[]', '{}']),
    # integers in exponent notation are integers, so never "not an integer"
    ({"not": {"type": "integer"}},
     ['1e2', '-0.29e4', '1.5e1', '1', '2.0', '1.5', '1.5e0', '1.5e-3', '15e-1', '-7E-0001', '0.5E+0']),
    ({"oneOf": [{"type": "integer"}, {"required": ["b"]}]}, ['-23.6698e70', '1.5', '1', '{"b": 1}', '{}']),
    # a lone zero bound decides by the sign, so every spelling is accepted or refused exactly
    ({"exclusiveMaximum": 0}, ['-5e-05', '-1e2', '0e0', '-0', '0.0', '1e-5', '-0.01']),
    ({"maximum": 0}, ['-5e-05', '-1e2', '0e0', '-0.0e3', '0', '1e-5', '0.01']),
    ({"exclusiveMinimum": 0}, ['5e-05', '1E+2', '0e0', '-0', '0.0', '-1e-5', '0.01']),
    ({"minimum": 0}, ['5e-05', '0e0', '-0', '-0.000', '-1e-5', '0.5']),
    # enum/const values must also pass every pattern and the format
    ({"allOf": [{"pattern": "a"}, {"pattern": "0"}], "enum": ["a", "a0", 5]}, ['"a"', '"a0"', '5']),
    # a required key matching two patterns takes both, even when one's schema is additionalProperties'
    ({"patternProperties": {"^a": False, "b": {}}, "additionalProperties": False, "dependentRequired": {"ab": []}},
     ['{"ab": 1}', '{}']),
    # multipleOf says nothing of non-numbers, also when two divisors are kept apart
    ({"allOf": [{"multipleOf": 3}, {"multipleOf": 0.5}], "enum": ["s", 3, 4, 1.5, None]},
     ['"s"', '3', '4', '1.5', 'null']),
    # counts that no object meets
    ({"minProperties": 1, "maxProperties": 0}, ['{}', '{"a": 1}', '[]']),
    ({"minProperties": 2, "maxProperties": 1}, ['{"a": 1, "b": 2}', '{"a": 1}', '1']),
]

NESTED = ['{}', '{"c": 1}', '{"c": {"c": 1}}', '{"c": {"c": {"c": 1}}}', '{"c": {"c": {"c": {}}}}',
          '{"a": 1, "c": {"c": {"a": 1}}}', '{"a": 1, "c": 1}', '{"c": {"a": 1, "c": {}}}', '[]']
RECURSIONS = [
    # allOf of two recursive members: each level asks "#" and "c: #" again; merged as a growing
    # nest of allOf (allOf[allOf[#, c: #], #] ...) this never finished
    {"allOf": [{"properties": {"c": {"$ref": "#"}}, "maxProperties": 1},
               {"properties": {"c": {"properties": {"c": {"$ref": "#"}}}}}]},
    {"properties": {"c": {"$ref": "#"}}, "allOf": [{"properties": {"c": {"properties": {"c": {"$ref": "#", "minProperties": 1}}}}}]},
    # the same schemas met again through their references were built again at every level
    # (exponential in the nesting; refused after 10,000 visits)
    {"unevaluatedItems": {}, "anyOf": [
        {"dependentSchemas": {"a": {"properties": {"c": {"properties": {"c": {"$ref": "#"}}}}}}},
        {"properties": {"c": {"$ref": "#"}}}], "maxProperties": 1},
    {"allOf": [{"properties": {"c": {"$ref": "#", "maxProperties": 1}}},
               {"dependentSchemas": {"a": {"properties": {"c": {"properties": {"c": {"$ref": "#", "type": "object"}}}}}}}]},
]


@pytest.mark.parametrize("schema", RECURSIONS, ids=lambda s: json.dumps(s)[:70])
def test_recursions_through_merged_schemas_close(schema, monkeypatch):
    from halter.schemas import converter
    monkeypatch.setattr(converter, "MAX_VISITS", 100)     # each needs < 40 subschema visits
    g = Grammar.from_json_schema(schema, strict=True)
    assert_text_verdicts_agree(g, jsonschema.Draft202012Validator(schema), NESTED, both_verdicts=True)


@pytest.mark.parametrize("schema,texts", CASES, ids=lambda x: json.dumps(x)[:70] if isinstance(x, dict) else "")
def test_strict_grammar_gives_the_validators_verdict(schema, texts):
    g = Grammar.from_json_schema(schema, strict=True)
    assert_text_verdicts_agree(g, jsonschema.Draft202012Validator(schema), texts, compact=True, both_verdicts=True)


@pytest.mark.parametrize("schema", [c[0] for c in CASES[:5]], ids=lambda s: json.dumps(s)[:70])
def test_recursive_merged_refs_draw_valid_instances(schema):
    validator = jsonschema.Draft202012Validator(schema)
    rules = schema_to_rules(schema, strict=True)
    rng = random.Random(5)
    for _ in range(40):
        text = random_text(rules, "root", rng, max_depth=6)
        assert validator.is_valid(json.loads(text)), text


def test_the_input_schema_is_not_changed():
    schema = {"allOf": [{"additionalProperties": False}], "patternProperties": {"a": {}},
              "properties": {"c": {"$ref": "#", "type": "object"}}}
    before = json.dumps(schema, sort_keys=True)
    Grammar.from_json_schema(schema)
    assert json.dumps(schema, sort_keys=True) == before


def test_enum_values_are_filtered_by_the_format():
    schema = {"type": "string", "format": "ipv4", "enum": ["1", "1.2.3.4", "2020-01-01"]}
    g = Grammar.from_json_schema(schema, strict=True)
    assert [g.matches(json.dumps(v)) for v in schema["enum"]] == [False, True, False]
    with pytest.raises(SchemaError, match="accepts no value"):
        Grammar.from_json_schema({"format": "date", "const": "x"})


def test_property_names_it_cannot_split_by_are_not_dropped_silently():
    schema = {"patternProperties": {"x": {}}, "propertyNames": {"not": {"const": "b"}}}
    with pytest.raises(UnsupportedSchemaError) as e:
        Grammar.from_json_schema(schema, strict=True)
    assert e.value.keyword == "propertyNames"
    with pytest.warns(SchemaWarning, match="propertyNames"):
        g = Grammar.from_json_schema(schema)
    assert g.matches('{"x": 1}') and g.matches('{"b": 1}')      # the superset, as the warning says


@pytest.mark.parametrize("schema", [
    {"type": "array", "items": False, "minItems": 1, "uniqueItems": True},
    {"$ref": "#/$defs/d", "$defs": {"d": {"type": "object", "properties": {"v": {"$ref": "#/$defs/d"}},
                                          "required": ["v"]}}},
], ids=["unique-items-of-nothing", "required-self"])
def test_schemas_without_a_finite_instance_are_schema_errors(schema):
    with pytest.raises(SchemaError, match="accepts no value"):
        Grammar.from_json_schema(schema)


def test_random_compositions_agree_with_the_validator():
    # a small run of bench/schema_fuzz.py (the bench runs thousands of schemas)
    from tests.conftest import bench_module
    fuzz = bench_module("schema_fuzz")
    counts, found = fuzz.run(40, seed=11)       # (fails on the code before 0407e81)
    assert counts["built"] > 40 and counts["checks"] > 10_000
    assert found == [], found[:3]


def test_a_schema_object_shared_between_keywords_is_read_like_its_json_copy():
    # the same dict as additionalProperties and as a pattern's schema: matched by identity, the
    # second pattern's schema replaced the first instead of joining it
    shared = {"type": "integer"}
    schema = {"patternProperties": {"b": shared, "a": {"minimum": 5}}, "additionalProperties": shared,
              "required": ["ab"]}
    for s in (schema, json.loads(json.dumps(schema))):
        g = Grammar.from_json_schema(s, strict=True)
        assert [g.matches(t) for t in ('{"ab": "s"}', '{"ab": 7}', '{"ab": 3}')] == [False, True, False]


def test_formats_inside_a_negation_filter_enum_values_as_the_grammar_reads_them():
    # the validator that filters enum values read "format" as an annotation, so not: {format: date}
    # failed every value and "x" was dropped
    for schema, texts in [({"const": "x", "not": {"format": "date"}}, {'"x"': True}),
                          ({"enum": ["x", "2020-01-01"], "if": {"format": "date"}, "then": False},
                           {'"x"': True, '"2020-01-01"': False})]:
        g = Grammar.from_json_schema(schema)
        assert {t: g.matches(t) for t in texts} == texts, schema


def test_a_schema_past_the_visit_limit_is_refused_in_either_mode(monkeypatch):
    from halter.schemas import converter
    monkeypatch.setattr(converter, "MAX_VISITS", 20)        # a safety net: the suites need < 1,400
    schema = {"properties": {k: {"anyOf": [{"type": "integer"}, {"minLength": i}]} for i, k in enumerate("abcdefghijklmnopqrstuvwxyz")}}
    for strict in (True, False):
        with pytest.raises(UnsupportedSchemaError, match="expands to more than 20 subschemas"):
            Grammar.from_json_schema(schema, strict=strict)


D4, D6, D7 = (f"http://json-schema.org/draft-0{n}/schema#" for n in (4, 6, 7))
D2019 = "https://json-schema.org/draft/2019-09/schema"


@pytest.mark.parametrize("schema,texts", [
    # keywords of later drafts are unknown to earlier ones, which ignore them (a draft-7 fuzz
    # found every one of these enforced)
    ({"$schema": D7, "unevaluatedProperties": False, "properties": {"a": {"type": "string"}}}, ['{"b": 1}', '{"a": 1}']),
    ({"$schema": D7, "dependentRequired": {"a": ["b"]}, "required": ["c"]}, ['{"a": 1, "c": 1}', '{"a": 1}']),
    ({"$schema": D7, "prefixItems": [{"type": "string"}], "maxItems": 1}, ['[1]', '[1, 2]']),
    ({"$schema": D7, "anyOf": [{"not": {"prefixItems": [{"type": "string"}]}}, {"type": "array"}]}, ['[1]', '1']),
    ({"$schema": D7, "allOf": [{"unevaluatedItems": False}], "type": "array"}, ['[1]', '{}']),
    ({"$schema": D6, "if": {"type": "string"}, "then": False, "type": "string"}, ['"a"', '1']),
    ({"$schema": D4, "const": 1, "type": "integer"}, ['2', '"x"']),
    ({"$schema": D4, "propertyNames": {"maxLength": 1}, "type": "object"}, ['{"ab": 1}', '[]']),
    ({"$schema": D4, "oneOf": [{"const": 1, "type": "integer"}, {"type": "string"}]}, ['5', '"x"', 'null']),
    ({"$schema": D2019, "prefixItems": [{"type": "string"}], "items": [{"type": "integer"}]}, ['[1]', '["x"]']),
    # a property named like a foreign keyword is still a property
    ({"$schema": D4, "properties": {"const": {"type": "string"}}}, ['{"const": "x"}', '{"const": 1}']),
], ids=lambda x: json.dumps(x)[40:100] if isinstance(x, dict) else "")
def test_keywords_foreign_to_the_draft_are_ignored(schema, texts):
    g = Grammar.from_json_schema(schema, strict=True)
    assert_text_verdicts_agree(g, jsonschema.validators.validator_for(schema)(schema), texts)
