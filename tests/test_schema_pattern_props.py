"""``patternProperties``, ``additionalProperties`` and ``propertyNames`` partition keys exactly,
and ``pattern`` next to length bounds or another pattern is exact: the grammar's verdict on
hand-written instances is ``jsonschema``'s, with no warning (so strict mode compiles)."""
from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from halter.grammar import Grammar
from halter.schemas import json_schema_to_gbnf
from halter.schemas.converter import SchemaWarning
from tests.schema_checks import assert_verdicts_agree


def check(schema: dict, instances: list) -> Grammar:
    with warnings.catch_warnings():
        warnings.simplefilter("error", SchemaWarning)
        g = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    assert_verdicts_agree(g, validator, instances, spellings=("default", "unicode", "compact"), both_verdicts=True)
    return g


OVERLAPPING = {
    "type": "object",
    "properties": {"foo": {"type": "string"}, "fax": {"maxLength": 3}},
    "patternProperties": {"^f": {"type": "string"}, "o$": {"minLength": 2}, "x": {"enum": ["ab", "abcd", 1]}},
    "additionalProperties": {"type": "integer"},
}


@pytest.mark.parametrize("schema,instances", [
    (OVERLAPPING, [
        {"foo": "ab"}, {"foo": "a"}, {"foo": 1}, {"fo": "ab"}, {"fo": "a"}, {"go": "ab"}, {"go": 5},
        {"fax": "ab"}, {"fax": "abcd"}, {"fax": 1}, {"fx": "abcd"}, {"x": 1}, {"x": "abcd"},
        {"other": 3}, {"other": "3"}, {"": 0}, {"fxo": "ab"}, {"fxo": "a"}, {"f\u00e9o": "x"},
        {"f\u00e9o": "xy"}, {"foo": "ab", "bar": 2, "fox": "abcd"}, {"foo": "ab", "bar": 2, "xx": "no"},
    ]),
    ({"type": "object", "properties": {"alpha": {"type": "integer"}},
      "patternProperties": {"^[a-z]+$": {"type": "integer"}, "^[A-Z]": {"type": "boolean"}},
      "additionalProperties": False}, [
        {"alpha": 1}, {"beta": 2}, {"beta": True}, {"Beta": True}, {"Beta": 1}, {"b1": 1},
        {"_x": 1}, {}, {"alpha": 1, "Z": False, "zz": 3}, {"alpha": "1"},
    ]),
    ({"type": "object", "patternProperties": {".": {"type": "object"}}},   # secrethub's shape
     [{"secret4": 123}, {"secret4": {}}, {"": 123}, {"a": {}, "b": []}]),
])
def test_keys_partition_exactly(schema, instances):
    check(schema, instances)


def test_unicode_property_patterns_as_keys():
    # Python's re (so jsonschema) has no \p{...}: the verdicts are written out
    schema = {"type": "object", "patternProperties": {"^\\p{Lu}": {"type": "string"}, "\\p{Nd}$": {"type": "integer"}},
              "additionalProperties": False}
    g = Grammar.from_json_schema(schema)
    for inst, want in [({"\u00c9t\u00e9": "x"}, True), ({"\u00c9t\u00e9": 1}, False), ({"a\u0663": 3}, True),
                       ({"A1": 3}, False), ({"A1": "3"}, False), ({"a": 1}, False), ({"\u00e9": "x"}, False)]:
        for text in (json.dumps(inst), json.dumps(inst, ensure_ascii=False)):
            assert g.matches(text) == want, text


def test_property_names_pattern_with_known_names():
    schema = {"type": "object", "properties": {"id": {"type": "integer"}},
              "propertyNames": {"pattern": "^[a-z]{2,4}$"},
              "additionalProperties": {"type": "string"}}
    check(schema, [{"id": 1}, {"id": "1"}, {"name": "x"}, {"name": 1}, {"n": "x"}, {"names": "x"},
                   {"ID": "x"}])


def test_property_names_next_to_pattern_properties():
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "integer"}},
              "propertyNames": {"maxLength": 4}}
    check(schema, [{"x-ab": 1}, {"x-ab": "1"}, {"x-abc": 1}, {"abcd": "s"}, {"abcde": 1}])


@pytest.mark.parametrize("schema,instances", [
    ({"type": "string", "pattern": "^$|^[a-z][a-z0-9A-Z]*$", "minLength": 1}, ["", "a", "aB1", "1a"]),
    ({"type": "string", "pattern": "a.*b", "maxLength": 5}, ["ab", "xaxxb", "xaxxbx", "a\u00e9b", "b"]),
    ({"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)*$", "minLength": 3, "maxLength": 9},
     ["1.2", "12", "1.2.3.4.5", "1.2.3.4.56", "1..2"]),
    ({"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b$"}]}, ["ab", "ba", "a", "b", "aab"]),
    ({"type": "string", "format": "ipv4", "pattern": "^10\\."}, ["10.0.0.1", "11.0.0.1", "10.0.0", "10.256.0.1"]),
    ({"type": "string", "pattern": "\U0001F600", "maxLength": 2}, ["\U0001F600", "x\U0001F600", "xx\U0001F600"]),
    # alternatives of different fixed lengths before the repeat: a branch per length, no automaton
    ({"type": "string", "maxLength": 2100, "pattern": "^data:(jpg|jpeg|svg\\+xml);[a-z]*$"},
     ["data:jpg;" + "a" * 2091, "data:jpg;" + "a" * 2092, "data:jpeg;" + "a" * 2091, "data:svg+xml;x", "data:png;x"]),
])
def test_pattern_with_length_or_a_second_pattern(schema, instances):
    check(schema, instances)


def test_strict_mode_compiles_what_used_to_be_approximate():
    json_schema_to_gbnf(OVERLAPPING, strict=True)
    json_schema_to_gbnf({"type": "string", "pattern": "a.*b", "maxLength": 5}, strict=True)


def test_too_many_overlapping_patterns_fall_back_with_a_warning():
    pats = {f"{c}": {"type": "integer"} for c in "abcde"}     # 31 possible "matches exactly" sets
    schema = {"type": "object", "patternProperties": pats, "additionalProperties": False}
    with pytest.warns(SchemaWarning, match="patternProperties"):
        g = Grammar.from_json_schema(schema)
    assert g.matches('{"a": 1, "bc": 2}') and not g.matches('{"z": 1}')


def test_grammar_for_several_patterns_stays_small():
    gbnf = json_schema_to_gbnf(OVERLAPPING)
    assert len(gbnf) < 20_000


def test_property_names_enum_and_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}},
              "propertyNames": {"enum": ["a", "b", "c"]}, "additionalProperties": {"type": "string"}}
    check(schema, [{"a": 1}, {"a": "1"}, {"b": "x"}, {"b": 1}, {"d": "x"}, {"a": 1, "c": "z"}])
    schema = {"type": "object", "propertyNames": {"format": "ipv4"}}
    check(schema, [{"1.2.3.4": 1}, {"1.2.3": 1}, {"x": 1}, {}])


def test_excluded_strings_next_to_a_pattern_or_length():
    check({"type": "string", "minLength": 2, "not": {"enum": ["ab", "abc"]}}, ["a", "ab", "abc", "abd", ""])
    check({"type": "string", "pattern": "^a", "not": {"const": "ab"}}, ["a", "ab", "abc", "b"])


def test_too_large_length_automaton_warns_or_raises_in_strict_mode():
    from halter.errors import UnsupportedSchemaError
    schema = {"type": "string", "maxLength": 120, "pattern": "^(?:\\S+\\s+){0,9}\\S+$"}
    with pytest.warns(SchemaWarning, match="maxLength"):
        g = Grammar.from_json_schema(schema)
    assert g.matches('"a b"') and not g.matches('"a  "')
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_to_gbnf(schema, strict=True)
    assert err.value.keyword == "maxLength"


def test_long_counted_key_patterns_build():
    # a single pattern's keys keep the regex's counted repeat instead of a 255-state chain
    schema = {"type": "object", "patternProperties": {"^[0-9a-z]{1,255}$": {"type": "string"}},
              "additionalProperties": False}
    g = check(schema, [{"a" * 255: "x"}, {"a" * 256: "x"}, {"ab": 1}, {"A": "x"}])
    # minus a known name the automaton would be that chain: too long, so the approximation
    schema["properties"] = {"abc": {"minLength": 2}}
    with pytest.warns(SchemaWarning, match="patternProperties"):
        g = Grammar.from_json_schema(schema)
    assert g.matches('{"abc": "xy"}') and not g.matches('{"abc": 1}')
