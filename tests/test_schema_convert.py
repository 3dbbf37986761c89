"""JSON Schema -> GBNF: random instances drawn from the grammar validate with jsonschema, and
hand-written invalid instances (one per keyword) are rejected, in default and compact spellings."""
from __future__ import annotations

import json
import re

import jsonschema
import pytest

from halter.errors import SchemaError, UnsupportedSchemaError
from halter.grammar import Grammar
from halter.schemas import SchemaWarning, json_schema_to_gbnf
from halter.schemas.format_check import format_checker
from tests.conftest import shared_path
from tests.schema_checks import random_texts

# (schema, valid instances, invalid instances)
CASES = [
    ({"type": "integer", "minimum": -5, "maximum": 1000}, [-5, 0, 7, 1000, 3.0], [-6, 1001, 2.5, "1"]),
    ({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, [1, 9], [0, 10]),
    ({"type": "number", "minimum": 0.5, "exclusiveMaximum": 2.25}, [0.5, 1, 2.2499, 2], [0.49, 2.25, 3, -1]),
    ({"type": "number", "minimum": 0}, [0, 1e-05, 3.5e20], [-0.1, -1e-05]),
    ({"type": "integer", "multipleOf": 7}, [0, 7, -14, 700], [1, 15, -8]),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ["ab", "abc", "é😀"], ["a", "abcd", "😀"]),
    ({"type": "string", "pattern": "^[a-z]{2,5}$"}, ["ab", "hello"], ["a", "Hello", "abcdef"]),
    ({"type": "string", "pattern": "b+c"}, ["abbc", "bc", "xxbcyy"], ["ac", "b c", ""]),
    ({"type": "string", "format": "date"}, ["2020-02-29", "1999-12-31"], ["2021-02-29", "2020-13-01", "20200101"]),
    ({"type": "string", "format": "date-time"}, ["2020-01-01T10:00:00Z", "2020-01-01t10:00:00.5+01:30"], ["2020-01-01 10:00:00Z"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
    ({"type": "string", "format": "ipv4"}, ["192.168.0.1"], ["256.1.1.1", "01.1.1.1"]),
    ({"type": "string", "format": "ipv6"}, ["::1", "fe80::1:2"], ["1:::2", "12345::"]),
    ({"type": "string", "format": "email"}, ["joe.bloggs@example.com"], ["joe..bloggs@example.com", "joe"]),
    ({"type": "string", "format": "uri"}, ["https://example.com/a?b=c#d"], ["//example.com", "no scheme"]),
    ({"type": "string", "format": "hostname"}, ["example.com", "a-b.c"], ["-ab.com", "a_b.com"]),
    ({"type": ["string", "null"]}, ["x", None], [1, True]),
    ({"enum": ["red", 1, None, [1, 2], {"a": 1}]}, ["red", 1, 1.0, None, [1, 2], {"a": 1}], ["blue", 2, [2, 1]]),
    ({"const": "é\"\n"}, ["é\"\n"], ["e"]),
    ({"type": "array", "prefixItems": [{"type": "boolean"}, {"const": "x"}], "items": {"type": "integer"},
      "minItems": 1, "maxItems": 4}, [[True], [False, "x", 1, 2]], [[], ["x"], [True, "x", 1, 2, 3], [True, "y"]]),
    ({"type": "array", "items": {"type": "string"}, "minItems": 2}, [["a", "b"], ["a", "b", "c"]], [["a"], [1, 2]]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]},
     [{"a": 1}, {"b": "x", "a": 2}, {"a": 1, "zzz": [None]}], [{}, {"b": "x"}, {"a": "1"}, {"a": 1, "b": 2}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"a": 1}], [{"b": 1}, {"a": 1, "c": 2}]),
    ({"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2},
     [{"x": 1}, {"x": 1, "y": 2}], [{}, {"x": "1"}, {"x": 1, "y": 2, "z": 3}]),
    ({"type": "object", "patternProperties": {"^x-": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"x-a": 1}], [{"y": 1}, {"x-a": "1"}]),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, [{}, {"abc": 1}], [{"abcd": 1}]),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
     [{"b": 1}, {"a": 1, "b": 2}], [{"a": 1}]),
    ({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 1}]}, [10, "a"], [9, "ab"]),
    ({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}, [1, True], ["x"]),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"b": {"enum": [1, "two", None]}}, "required": ["b"]}]},
     [{"a": 1, "b": "two"}, {"b": None, "a": 0}], [{"a": 1}, {"a": 1, "b": 2}]),
    ({"type": "object", "properties": {"x": {"type": "integer"}}, "anyOf": [{"required": ["x"]}, {"required": ["y"]}]},
     [{"x": 1}, {"y": "s"}], [{}, {"x": "1"}]),
    ({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                                                          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                         "required": ["v", "next"], "additionalProperties": False}},
      "$ref": "#/$defs/node"},
     [{"v": 1, "next": None}, {"v": 1, "next": {"v": 2, "next": None}}], [{"v": 1}, {"v": 1, "next": {"v": "2", "next": None}}]),
    ({"definitions": {"pos": {"type": "integer", "minimum": 1}}, "$schema": "http://json-schema.org/draft-07/schema#",
      "type": "array", "items": [{"$ref": "#/definitions/pos"}], "additionalItems": False}, [[], [1]], [[0], [1, 2]]),
    (True, [1, "x", None, {"a": [1]}], []),
]


def _validator(schema):
    cls = jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {})
    return cls(schema, format_checker=format_checker(cls))


def _texts(value):
    return {json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, ensure_ascii=False),
            json.dumps(value, indent=2)}


@pytest.mark.parametrize("schema,valid,invalid", CASES, ids=[json.dumps(c[0])[:50] for c in CASES])
def test_schema_grammar_agrees_with_jsonschema(schema, valid, invalid):
    g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    for v in valid:
        assert _validator(schema).is_valid(v)
        for t in _texts(v):
            assert g.matches(t), f"valid instance rejected: {t}"
    for v in invalid:
        # python-jsonschema only checks these formats loosely (or with optional packages)
        if not (isinstance(schema, dict) and schema.get("format") in ("email", "uri", "hostname")):
            assert not _validator(schema).is_valid(v)
        for t in _texts(v):
            assert not g.matches(t), f"invalid instance accepted: {t}"
    compact = Grammar.from_gbnf(json_schema_to_gbnf(schema, whitespace="compact"))
    for v in valid:
        assert compact.matches(json.dumps(v, separators=(",", ":")))
        if isinstance(v, (dict, list)) and len(v) > 0:
            assert not compact.matches(json.dumps(v, indent=1))


@pytest.mark.parametrize("schema", [c[0] for c in CASES], ids=[json.dumps(c[0])[:50] for c in CASES])
def test_random_instances_from_the_grammar_validate(schema):
    validator = _validator(schema)
    for text in random_texts(schema, 25, seed=1234):
        value = json.loads(text)
        if re.search(r"[0-9]{2}:[0-9]{2}:60", text):   # RFC 3339 leap second (23:59:60 UTC, any
            continue                                    # offset): valid, python-jsonschema says no
        assert validator.is_valid(value), f"grammar produced an invalid instance: {text}"


def test_schema_is_not_mutated():
    schema = {"allOf": [{"properties": {"a": {"type": "integer"}}}, {"required": ["a"]}], "$defs": {"x": {}}}
    before = json.dumps(schema, sort_keys=True)
    json_schema_to_gbnf(schema)
    assert json.dumps(schema, sort_keys=True) == before


@pytest.mark.parametrize("keyword,schema", [
    ("uniqueItems", {"type": "array", "uniqueItems": True}),
    ("not", {"not": {"pattern": "^a"}}),
    ("if", {"if": {"pattern": "^a"}, "then": {"minLength": 2}}),
    ("contains", {"type": "array", "contains": {"pattern": "^a"}, "maxContains": 2}),
    ("multipleOf", {"type": "number", "multipleOf": 0.123456789}),
])
def test_unsupported_keywords_name_keyword_and_pointer(keyword, schema):
    wrapped = {"type": "object", "properties": {"p": schema}}
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_to_gbnf(wrapped, strict=True)
    assert err.value.keyword == keyword
    assert err.value.pointer == "#/properties/p"
    with pytest.warns(SchemaWarning, match=keyword):
        lenient = Grammar.from_gbnf(json_schema_to_gbnf(wrapped, strict=False))
    assert lenient.matches('{"p": []}') or keyword in ("multipleOf",)


def test_invalid_schema_is_reported_with_pointer():
    with pytest.raises(SchemaError) as err:
        json_schema_to_gbnf({"type": "object", "properties": {"a": {"type": "strin"}}})
    assert err.value.pointer == "#/properties/a/type"
    with pytest.raises(SchemaError, match="not valid JSON"):
        json_schema_to_gbnf("{nope")
    with pytest.raises(SchemaError, match="cannot resolve"):
        json_schema_to_gbnf({"$ref": "https://example.com/other.json"})


def test_closed_objects_and_prop_order():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    closed = Grammar.from_gbnf(json_schema_to_gbnf(schema, closed_objects=True))
    assert closed.matches('{"a": 1}') and not closed.matches('{"c": 1}')
    ordered = Grammar.from_gbnf(json_schema_to_gbnf(schema, prop_order=["b", "a"]))
    assert ordered.matches('{"b": 1, "a": 2}') and not ordered.matches('{"a": 2, "b": 1}')


def test_whitespace_is_bounded():
    g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "array"}))
    assert g.matches("[ 1 ]") and g.matches("[\n  1\n]")
    assert not g.matches("[" + " " * 200 + "1]")
    assert not g.matches("[\n\n\n1]")


def test_known_keys_cannot_be_smuggled_as_extra_properties():
    g = Grammar.from_gbnf(json_schema_to_gbnf({"properties": {"name": {"type": "string"}}, "type": "object"}))
    assert g.matches('{"nam": 1, "names": 2, "name": "x"}')
    assert not g.matches('{"name": 1}')
    assert not g.matches('{"name": "x", "name": "y"}')


def test_overlapping_one_of_is_strict_error_and_lenient_any_of():
    schema = {"oneOf": [{"type": "string"}, {"pattern": "^a"}]}
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_to_gbnf(schema, strict=True)
    assert err.value.keyword == "oneOf"
    with pytest.warns(SchemaWarning):
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema, strict=False))
    assert g.matches("1") and g.matches('"x"')


def test_unchecked_format_is_strict_error():
    with pytest.raises(UnsupportedSchemaError, match="idn-hostname"):
        json_schema_to_gbnf({"type": "string", "format": "idn-hostname"}, strict=True)
    assert json_schema_to_gbnf({"type": "string", "format": "my-own-format"})   # unknown: annotation


def test_integer_valued_float_counts_are_counts():
    """JSON Schema counts may be written as 1.0 (an integer by the spec's number model)."""
    g = Grammar.from_json_schema({"maxProperties": 1.0, "minItems": 0.0})
    assert g.matches("{}") and g.matches('{"a": 1}') and not g.matches('{"a": 1, "b": 2}')


@pytest.mark.parametrize("never", [False, {"type": "string", "minLength": 3, "maxLength": 2},
                                   {"allOf": [{"type": "string"}, {"type": "integer"}]}])
def test_gbnf_text_parses_when_a_referenced_schema_accepts_nothing(never):
    """A definition no value satisfies becomes a rule that matches nothing; its GBNF text must still
    parse (GBNF has no empty class ``[]``), and the optional property using it can only be left out."""
    import warnings
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/never"}, "b": {"type": "integer"}},
              "$defs": {"never": never}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
    assert g.matches('{"b": 1}') and g.matches("{}")
    assert not g.matches('{"a": 1}') and not g.matches('{"a": "xyz"}')


@pytest.mark.parametrize("lo,hi", [(0, 255), (65, 65), (100, 300), (0, 1000), (70, None), (0, 88)])
def test_long_length_bounds_count_exactly(lo, hi):
    """Bounds above 64 are spelled with doubling rules over chunks of characters plus a rest: every
    length around the bounds and the chunk edges must be counted exactly (é is one character)."""
    schema = {"type": "string", "minLength": lo, **({"maxLength": hi} if hi is not None else {})}
    g = Grammar.from_json_schema(schema)
    top = (hi if hi is not None else lo) + 60
    lengths = {n for b in (lo, hi or lo, 24, 48, 72, 96, 240, 264) for n in (b - 1, b, b + 1)} | {top}
    for n in sorted(x for x in lengths if x >= 0):
        for text in ("x" * n, "é" * n, "\\u00e9" * n):
            ok = lo <= n and (hi is None or n <= hi)
            assert g.matches(f'"{text}"') == ok, (n, text[:8])


def test_long_bounds_keep_the_automaton_small():
    """Doubling rules over chunks are calls, not copies: the inliner counts a callee once per
    occurrence (a chunk is 24 characters), so two long bounds stay near 2,000 positions (before
    the count was fixed, rules of 2^k chunks were expanded in place: ~7,000 here, 30 s builds on
    a real schema with bounds up to 262144)."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 262144},
                                               "b": {"type": "string", "maxLength": 262137}}}
    g = Grammar.from_json_schema(schema)
    assert g._automata.n_positions < 3000
    assert g.matches('{"a": "' + "x" * 1000 + '", "b": "yz"}')


# -- the 2020-12 metaschema check, made of one document --------------------------------------------

_BAD_2020 = [{"minLength": -1}, {"$defs": {"a": 3}}, {"definitions": {"a": "x"}}, {"dependencies": {"a": 3}},
             {"$anchor": "1bad"}, {"prefixItems": {}}, {"unevaluatedProperties": 3}, {"contentSchema": 3},
             {"format": 3}, {"deprecated": "x"}, {"type": "integr"}, {"properties": {"a": {"items": 5}}},
             {"anyOf": []}, {"items": {"$ref": 7}}, {"required": ["a", "a"]}, {"$recursiveAnchor": "1x"},
             {"dependentRequired": {"a": [1]}}, {"not": {"enum": 5}}, {"additionalProperties": {"minimum": "0"}}]


def test_the_one_document_2020_metaschema_judges_schemas_as_the_full_one_does():
    from halter.schemas.metaschema import _flat_2020_validator, check_document
    fast = _flat_2020_validator()
    assert fast is not None
    full = jsonschema.Draft202012Validator(jsonschema.Draft202012Validator.META_SCHEMA)
    rows = shared_path("schema", "jsonschemabench_dev.jsonl").read_text().splitlines()
    schemas = [json.loads(row)["schema"] for row in rows[::3]] + _BAD_2020
    schemas += [{"properties": {"p": bad}} for bad in _BAD_2020] + [{"$defs": {"d": bad}} for bad in _BAD_2020]
    verdicts = [full.is_valid(s) for s in schemas]
    assert [fast.is_valid(s) for s in schemas] == verdicts
    assert sum(verdicts) >= 40 and verdicts.count(False) >= 3 * len(_BAD_2020)
    # an invalid schema's error is the full metaschema's
    with pytest.raises(SchemaError) as err:
        check_document({"properties": {"p": {"minLength": -1}}})
    assert err.value.pointer == "#/properties/p/minLength" and "-1" in str(err.value)
