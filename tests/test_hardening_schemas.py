"""JSON Schema input that used to crash, recurse without bound or run for a long time: each now
works or fails with a typed ``HalterError`` naming the place."""
from __future__ import annotations

import json
import warnings

import jsonschema
import pytest

from halter import limits
from halter.errors import HalterError, LimitError, SchemaError
from halter.grammar import Grammar

D4 = "http://json-schema.org/draft-04/schema#"
D7 = "http://json-schema.org/draft-07/schema#"


def nested_properties(n: int) -> dict:
    s: dict = {"type": "integer"}
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"], "additionalProperties": False}
    return s


def ref_chain(n: int) -> dict:
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(n)}
    defs[f"d{n}"] = {"type": "integer", "minimum": 0}
    return {"$ref": "#/$defs/d0", "$defs": defs}


@pytest.mark.parametrize("text", ["[1E-99999999999999999999, 2]", "[1e999999999999999999999, 1]",
                                  "[-0.0e-99999999999999999999, 1]"])
def test_unique_items_reads_any_exponent(text: str) -> None:
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "number"}, "uniqueItems": True})
    assert g.matches(text)
    m = g.matcher()
    assert m.accept_bytes(text.encode()) and m.is_accepting()


def test_unique_items_compares_huge_exponents_exactly() -> None:
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "number"}, "uniqueItems": True})
    assert not g.matches("[1E-99999999999999999999, 10E-100000000000000000000]")    # equal values
    assert g.matches("[1E-99999999999999999999, 1E-99999999999999999998]")
    assert not g.matches("[1, 1.0]") and not g.matches("[0, -0.0]") and g.matches("[1, 1.5]")


def test_a_hundred_nested_properties() -> None:
    g = Grammar.from_json_schema(nested_properties(100), whitespace="compact")
    assert g.matches('{"a":' * 100 + "7" + "}" * 100)
    assert not g.matches('{"a":' * 99 + "7" + "}" * 99)


def test_a_300_long_ref_chain() -> None:
    g = Grammar.from_json_schema(ref_chain(300))
    assert g.matches("12") and not g.matches("-1")


def test_nesting_beyond_the_limit_is_a_limit_error() -> None:
    deep: object = {"type": "integer"}
    for _ in range(limits.LIMITS.nesting_depth):
        deep = {"items": deep}
    with pytest.raises(LimitError) as info:
        Grammar.from_json_schema(deep)
    assert info.value.limit == "nesting_depth" and "halter.limits.set(nesting_depth=" in str(info.value)


def test_limits_can_be_raised_and_lowered() -> None:
    old = limits.LIMITS.nesting_depth
    try:
        limits.set(nesting_depth=5)
        with pytest.raises(LimitError):
            Grammar.from_json_schema(nested_properties(5))
    finally:
        limits.set(nesting_depth=old)
    with pytest.raises(TypeError, match="unknown limit"):
        limits.set(no_such_limit=1)


def test_a_format_with_a_length_it_cannot_have_fails_before_expansion() -> None:
    with pytest.raises(SchemaError, match="accepts no value"):
        Grammar.from_json_schema({"type": "string", "format": "date", "minLength": 1000000})
    g = Grammar.from_json_schema({"anyOf": [{"type": "string", "format": "date", "minLength": 11},
                                            {"type": "integer"}]})
    assert g.matches("3") and not g.matches('"2024-01-01"')


def test_length_bounds_beyond_the_limit() -> None:
    with pytest.raises(LimitError) as info:
        Grammar.from_json_schema({"properties": {"a": {"minLength": 1e308}}})
    assert info.value.limit == "length_bound" and info.value.where == "#/properties/a/minLength"
    g = Grammar.from_json_schema({"type": "string", "maxLength": 1e308})      # no output is that long
    assert g.matches('"abc"')
    g = Grammar.from_json_schema({"const": {"maxLength": 10 ** 7}})          # data, not a bound
    assert g.matches('{"maxLength": 10000000}') and not g.matches("{}")


def test_a_long_mixed_enum_is_built_in_chunks() -> None:
    values = [f"v{i}" for i in range(300)] + list(range(300)) + [{"k": i} for i in range(20)] + [None]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_json_schema({"enum": values})
    for v in ["v0", "v299", 0, 299, {"k": 19}, None]:
        assert g.matches(json.dumps(v)), v
    for v in ["v300", 300, {"k": 20}, True]:
        assert not g.matches(json.dumps(v)), v


@pytest.mark.parametrize("schema,pointer", [
    ({"$schema": 5, "type": "integer"}, "#/$schema"),
    ({"$schema": ["x"]}, "#/$schema"),
    ({"$schema": D4, "properties": {"x": {"$ref": 5}}}, "#/properties/x/$ref"),
    ({"$schema": D4, "$ref": None}, "#/$ref"),
    ({"$schema": D7, "$defs": {"a": 5}, "$ref": "#/$defs/a"}, "#/$defs/a"),
    ({"$schema": D7, "$ref": "#/x", "x": {"$id": 5}}, "#/x/$id"),
    ({"$ref": "#/x", "x": {"type": 5}}, "#/x/type"),
    ({"$ref": "#/x", "x": {"properties": 5}}, "#/x/properties"),
    ({"$ref": "#/x", "x": {"required": 5, "type": "object"}}, "#/x/required"),
])
def test_malformed_schemas_are_schema_errors_with_a_pointer(schema: dict, pointer: str) -> None:
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert info.value.pointer == pointer


def test_draft4_integers_have_no_fraction() -> None:
    for schema in [{"$schema": D4, "type": "integer"}, {"$schema": D4, "not": {"type": "integer"}},
                   {"$schema": D4, "type": "integer", "minimum": 0, "maximum": 5},
                   {"$schema": D4, "enum": [1, 2.0]}, {"type": "integer"}]:
        g = Grammar.from_json_schema(schema)
        v = jsonschema.validators.validator_for(schema)(schema)
        for text in ["1", "1.0", "2.0", "1.5", "-0.0", "-0", "15e-1"]:
            assert g.matches(text) == v.is_valid(json.loads(text)), (schema, text)


def test_one_of_two_array_schemas_refuses_the_empty_array() -> None:
    schema = {"oneOf": [{"type": "array", "items": {"type": "integer"}},
                        {"type": "array", "items": {"type": "string"}}]}
    g = Grammar.from_json_schema(schema)
    assert not g.matches("[]") and g.matches("[1]") and g.matches('["a"]')


def test_every_schema_error_is_a_halter_error() -> None:
    assert issubclass(LimitError, HalterError) and issubclass(SchemaError, HalterError)


def test_a_ref_that_reaches_itself_inside_if_does_not_crash_the_process(tmp_path) -> None:
    """An enum checked against an ``if`` whose ``$ref`` loops on itself sent jsonschema's validator
    down a generator recursion that overflowed the deep call's thread stack: a segmentation fault.
    Run in a child process, so a crash fails this test instead of the whole run."""
    import subprocess
    import sys
    code = ("from halter.grammar import Grammar\n"
            "s = {'additionalProperties': {'allOf': [{'enum': [1, None, 'x']},"
            " {'if': {'$ref': '#/$defs/d', 'multipleOf': 0.5}, 'then': {'$ref': '#/$defs/d'}}]},"
            " '$defs': {'d': {'$ref': '#/$defs/d'}}}\n"
            "g = Grammar.from_json_schema(s)\n"
            "print(g.matches('{}'))\n")
    env = {**__import__("os").environ, "HALTER_CACHE_DIR": str(tmp_path)}       # a cold build
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode in (0, 1), (out.returncode, out.stderr[-500:])
    if out.returncode == 1:
        assert "HalterError" in out.stderr or "SchemaError" in out.stderr or "Warning" in out.stderr, out.stderr[-500:]


@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-07/schema#", None])
def test_not_items_is_exact_under_every_draft(draft) -> None:
    """``not {"items": X}`` is rewritten as arrays that contain a non-X; under draft-04, which has
    no ``contains``, the rewrite was dropped as a foreign keyword and every array passed."""
    schema = {"not": {"items": {"type": "integer"}}, **({"$schema": draft} if draft else {})}
    g = Grammar.from_json_schema(schema)
    validator = jsonschema.validators.validator_for(schema)(schema)
    for text in ("[]", "[1]", '["a"]', '[1,"a"]', '"x"', "1", "{}"):
        assert g.matches(text) == validator.is_valid(json.loads(text)), (draft, text)
