"""``multipleOf`` with decimal divisors, combined with bounds, and the negations "not a multiple" /
"not an integer": grammars checked against exact decimal arithmetic and python-jsonschema."""
from __future__ import annotations

import json
import random
import re
from decimal import Decimal
from fractions import Fraction

import jsonschema
import pytest

from halter.errors import UnsupportedSchemaError
from halter.grammar import Grammar
from halter.schemas import json_schema_to_gbnf
from halter.schemas.decimal_dfa import decimal_parts
from tests.schema_checks import random_texts


def _grammar(schema, **kw):
    return Grammar.from_gbnf(json_schema_to_gbnf(schema, **kw))


def _is_multiple(text: str, d) -> bool:
    return (Fraction(text) / Fraction(repr(d))).denominator == 1


def _random_decimal(rng: random.Random) -> str:
    whole = rng.choice(["0", str(rng.randint(1, 9)), str(rng.randint(10, 99999)), str(rng.randint(1, 10**16))])
    text = ("-" if rng.random() < 0.3 else "") + whole
    if rng.random() < 0.7:
        frac = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.3:
            frac += "0" * rng.randint(1, 3)
        text += "." + frac
    return text


@pytest.mark.parametrize("d", [1, 1.5, 0.01, 0.0001, 0.5, 2.5, 0.25, 7, 12, 0.3, 1e-05, 100])
def test_decimal_divisibility_agrees_with_exact_arithmetic(d):
    g = _grammar({"type": "number", "multipleOf": d})
    rng = random.Random(hash(d) & 0xFFFF)
    seen = {True: 0, False: 0}
    for _ in range(300):
        text = _random_decimal(rng)
        if rng.random() < 0.4:       # a true multiple, written with 0-3 extra trailing zeros
            n = rng.randint(-10**6, 10**6)
            value = Decimal(n) * Decimal(repr(d))
            text = format(value, "f")
            if "." in text and rng.random() < 0.5:
                text += "0" * rng.randint(1, 3)
        want = _is_multiple(text, d)
        seen[want] += 1
        assert g.matches(text) == want, (d, text, want)
    assert seen[True] > 20 and seen[False] > 20


@pytest.mark.parametrize("d,lo,hi", [(0.01, 0, 99999999999999.98), (1.5, -10, 30), (0.25, 0.5, 100.75),
                                     (3, -50, 1000), (0.1, -1.05, 2.35)])
def test_divisor_combined_with_bounds_is_exact(d, lo, hi):
    g = _grammar({"type": "number", "multipleOf": d, "minimum": lo, "maximum": hi})
    rng = random.Random(7)
    lo_f, hi_f = Fraction(repr(lo)), Fraction(repr(hi))
    for _ in range(300):
        text = _random_decimal(rng)
        if rng.random() < 0.5:
            n = rng.randint(int(lo_f / Fraction(repr(d))) - 3, int(hi_f / Fraction(repr(d))) + 3)
            text = format(Decimal(n) * Decimal(repr(d)), "f")
        want = _is_multiple(text, d) and lo_f <= Fraction(text) <= hi_f
        assert g.matches(text) == want, (text, want)


def test_real_schema_money_amount():
    """JSONSchemaBench Github_easy/o46421: cents between 0 and 99999999999999.98."""
    schema = {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 99999999999999.98}
    g = _grammar(schema)
    for text in ["0", "0.5", "12345.67", "12345.670", "99999999999999.98", "-0"]:
        assert g.matches(text), text
    for text in ["12345.678", "-0.01", "99999999999999.99", "100000000000000", "1e2"]:
        assert not g.matches(text), text


@pytest.mark.parametrize("schema,valid,invalid", [
    ({"type": "number", "multipleOf": 1.5}, [0, 1.5, -4.5, 3, 30], [35, 1.6, 0.75]),
    ({"type": "number", "multipleOf": 1}, [0, 3, -4, 1643723400], [1643723400.5, 0.25]),
    ({"type": "number", "multipleOf": 1.0, "minimum": 1}, [1, 30], [1.5, 0]),
    ({"type": "number", "multipleOf": 0.0001}, [0.0075, 1, 12.5], [0.00751, 1.00001]),
    ({"type": "integer", "multipleOf": 0.5}, [0, 1, -7, 3.0], [0.5, 1.5]),
    ({"type": "integer", "multipleOf": 4, "minimum": 3, "exclusiveMaximum": 1000}, [4, 996, 500], [0, 1000, 6, 1004]),
    ({"allOf": [{"multipleOf": 0.5}, {"multipleOf": 0.2}]}, [1, 2, -3, 0], [0.5, 0.2, 0.4]),
    ({"not": {"multipleOf": 2}}, [1, 3, 2.5, -7], [0, 2, -4, 2.0, "x", None]),
    ({"type": "number", "not": {"multipleOf": 0.1}, "maximum": 1}, [0.05, -0.15, 0.99], [0.1, 1, 2.05]),
    ({"type": "number", "not": {"type": "integer"}, "minimum": 2}, [2.5, 3.01], [2, 3, 3.0, 1.5]),
    ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2.5, -5, 0], [3, 2, 1.5, 7.0]),
    ({"if": {"exclusiveMaximum": 0}, "then": {"minimum": -10}, "else": {"multipleOf": 2}}, [-1, 0, 4, -10], [-11, 3]),
    ({"enum": [1, 1.5, 2, 3], "not": {"multipleOf": 1}}, [1.5], [1, 2, 3]),
])
def test_numeric_keywords_agree_with_jsonschema(schema, valid, invalid):
    g = _grammar(schema, strict=True)
    validator = jsonschema.Draft202012Validator(schema)
    for v in valid:
        assert validator.is_valid(v), v
        assert g.matches(json.dumps(v)), v
    for v in invalid:
        assert not validator.is_valid(v), v
        assert not g.matches(json.dumps(v)), v


@pytest.mark.parametrize("schema", [
    {"type": "number", "multipleOf": 0.01, "minimum": 0, "maximum": 99999999999999.98},
    {"type": "number", "multipleOf": 1.5, "exclusiveMinimum": -3},
    {"not": {"multipleOf": 3}},
    {"type": "number", "not": {"type": "integer"}, "maximum": 5},
    {"oneOf": [{"type": "integer"}, {"minimum": 2}]},
])
def test_random_instances_are_valid(schema):
    validator = jsonschema.Draft202012Validator(schema)
    for text in random_texts(schema, 40, seed=99, strict=True):
        value = json.loads(text)
        if isinstance(value, float):         # jsonschema divides floats; check exactly instead
            exact = json.loads(text, parse_float=Decimal)
            assert validator.evolve(schema={k: v for k, v in schema.items() if k != "multipleOf"}).is_valid(value), text
            if "multipleOf" in schema:
                assert _is_multiple(str(exact), schema["multipleOf"]), text
        else:
            assert validator.is_valid(value), text


def test_divisor_parts():
    assert decimal_parts(1.5) == (15, 1)
    assert decimal_parts(0.0001) == (1, 4)
    assert decimal_parts(100) == (100, 0)
    assert decimal_parts(2.0) == (2, 0)
    assert decimal_parts(0) is None


@pytest.mark.parametrize("d", [0.123456789, 997])
def test_too_fine_divisor_is_reported_and_dropped(d):
    schema = {"type": "number", "multipleOf": d}
    with pytest.raises(UnsupportedSchemaError, match="multipleOf"):
        json_schema_to_gbnf(schema, strict=True)
    with pytest.warns(UserWarning, match="multipleOf"):
        g = _grammar(schema)
    assert g.matches("0.5")


def test_exponent_notation_is_not_accepted_with_a_divisor():
    """Documented departure: 1e308 is a multiple of 0.5 (and an integer), but numbers constrained by
    bounds or multipleOf are only written in decimal notation."""
    g = _grammar({"type": "integer", "multipleOf": 0.5})
    assert g.matches("100000") and not g.matches("1e308")


def test_equal_number_schemas_share_one_automaton():
    price = {"type": "number", "multipleOf": 0.01, "minimum": 0}
    one = json_schema_to_gbnf({"type": "object", "properties": {"a": price}})
    many = json_schema_to_gbnf({"type": "object", "properties": {k: dict(price) for k in "abcd"}})
    def automaton_rules(gbnf: str) -> int:
        return len(re.findall(r"-num-n\d+ ::=", gbnf))
    assert automaton_rules(one) == automaton_rules(many) > 0


def test_divisor_automaton_too_large_for_the_engine_is_dropped():
    """Divisibility by 256 needs 66 states: beyond MAX_RULES, so it is reported (as before)."""
    with pytest.raises(UnsupportedSchemaError, match="multipleOf"):
        json_schema_to_gbnf({"type": "integer", "multipleOf": 256}, strict=True)


# ------------------------------------------------------------ bounds and exponent notation

_BOUNDS = ["0", "1", "0.5", "-2.5", "150", "1e-10", "123.456", "-0.001", "1e20", "99.99", "-150", "7"]


def _sci_texts(rng: random.Random, bounds: list[Decimal]) -> list[str]:
    """Normalized exponent spellings (one nonzero digit before the point) near and between bounds."""
    texts = []
    for b in bounds:
        for x in (b, -b, b * Decimal("1.0000001"), b * Decimal("0.9999999"), b * 10, b / 10):
            if x:
                texts += [f"{x:e}", f"{x:E}", f"{x:.0e}", f"{x:.12e}"]
    for _ in range(30):
        v = rng.choice([-1, 1]) * rng.uniform(1, 10) * 10.0 ** rng.randint(-14, 22)
        texts += [json.dumps(v), f"{v:e}", repr(v), f"{v:.3E}"]
    texts += ["0e0", "-0.0E+5", "1e-0005", "1E+0", "1.50e2", "1e-400", "-1e-400", "9e999"]
    return [t for t in texts if "e" in t.lower()]


@pytest.mark.parametrize("seed", range(6))
def test_bounded_numbers_take_normalized_exponent_spellings_exactly(seed) -> None:
    """``json.dumps(1e-05)`` under ``minimum: 0, maximum: 1`` and every other normalized exponent
    spelling is accepted exactly when its decimal value is within the bounds."""
    rng = random.Random(seed)
    for _ in range(5):
        lo, hi = sorted(rng.sample(_BOUNDS, 2), key=Decimal)
        kinds = rng.choice([("minimum", "maximum"), ("exclusiveMinimum", "exclusiveMaximum"),
                            ("minimum", "exclusiveMaximum"), ("minimum", None), (None, "exclusiveMaximum")])
        schema = {"type": "number"}
        if kinds[0]:
            schema[kinds[0]] = float(lo)
        if kinds[1]:
            schema[kinds[1]] = float(hi)
        g = Grammar.from_json_schema(schema)
        for text in _sci_texts(rng, [Decimal(lo), Decimal(hi)]):
            v = Decimal(text)
            ok = all([kinds[0] != "minimum" or v >= Decimal(lo), kinds[0] != "exclusiveMinimum" or v > Decimal(lo),
                      kinds[1] != "maximum" or v <= Decimal(hi), kinds[1] != "exclusiveMaximum" or v < Decimal(hi)])
            assert g.matches(text) == ok, (schema, text)


def test_json_dumps_of_small_and_large_bounded_floats_round_trip() -> None:
    g = Grammar.from_json_schema({"type": "object", "properties": {
        "p": {"type": "number", "minimum": 0, "maximum": 1},
        "w": {"type": "number", "exclusiveMinimum": -1e30, "maximum": 1e30}}})
    for p, w in [(1e-05, -1.5e16), (5e-324, 1e+30), (1.0, 9.999e29), (0.0001, -2.5e-300)]:
        text = json.dumps({"p": p, "w": w})
        assert g.matches(text), text
        assert g.matches(json.dumps({"p": p, "w": w}, separators=(",", ":")))
    for bad in ['{"p": 1.0000001e0}', '{"p": -1e-05}', '{"w": -1e30}', '{"w": 1.0000000001e+30}']:
        assert not g.matches(bad), bad


def test_exponent_spellings_beside_a_divisor_stay_decimal_only() -> None:
    g = Grammar.from_json_schema({"type": "number", "minimum": 0, "maximum": 10, "multipleOf": 0.5})
    assert g.matches("2.5") and not g.matches("2.5e0")


def test_exponent_spellings_compare_every_digit_of_a_long_bound() -> None:
    big = 123456789012345678901234567890123456789          # past Decimal's 28-digit context
    g = Grammar.from_json_schema({"type": "number", "maximum": big})
    assert g.matches("1.23456789012345678901234567890123456789e38")
    assert g.matches("1.23456789012345678901234567890123456788e+38")
    assert not g.matches("1.2345678901234567890123456789012345679e38")     # what 28 digits round to
    assert not g.matches("1.234567890123456789012345678901234567891E38")
