"""Numeric bounds hundreds of digits long (``minimum: 1e250``, ``exclusiveMinimum: 1e-200``,
``10**250 + 1``): their digit-range grammars are built flat (``schemas/digits.py``), not a level
of nesting per digit, which took every walk of the expression past Python's recursion limit (a
``RecursionError`` from about 150 digits). Checked against exact decimal comparison, and the flat
construction against the nested one on short bounds, where both apply."""
from __future__ import annotations

import random
from decimal import Decimal

import pytest

import halter.schemas.digits as digits
import halter.schemas.numbers as numbers
from halter.grammar import Grammar
from halter.schemas import json_schema_to_gbnf


def _in_range(text: str, schema: dict) -> bool:
    v = Decimal(text)
    checks = {"minimum": v.__ge__, "maximum": v.__le__, "exclusiveMinimum": v.__gt__, "exclusiveMaximum": v.__lt__}
    return all(checks[k](Decimal(str(b))) for k, b in schema.items() if k in checks)


def _probes(bound: Decimal) -> list[str]:
    """Decimal texts at and around ``bound``, in plain notation."""
    step = Decimal(1).scaleb(bound.adjusted() - 20)
    out = []
    for v in (bound, bound - step, bound + step, bound * 2, bound / 2, -bound, Decimal(0), Decimal(5)):
        text = format(v, "f")
        out.append(text if "." not in text else text.rstrip("0").rstrip("."))
    return out


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 10**250 + 1},
    {"type": "integer", "minimum": -(10**200 + 7), "maximum": 10**200 - 12345},
    {"type": "number", "minimum": 1e250},
    {"type": "number", "exclusiveMinimum": 1e-200},
    {"type": "number", "exclusiveMinimum": 1e-200, "maximum": 2.5e-200},
    {"type": "number", "minimum": 1.234e-150, "exclusiveMaximum": 1.2345e-150},
    {"type": "number", "exclusiveMaximum": -3.5e-180},
])
def test_long_bounds_are_exact(schema) -> None:
    g = Grammar.from_json_schema(schema)
    probes = []
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            probes += _probes(Decimal(str(schema[key])))
    for text in probes:
        if schema["type"] == "integer" and "." in text:
            continue
        assert g.matches(text) == _in_range(text, schema), text


def test_bounds_past_any_double_build() -> None:
    """An integer bound beyond a double's range used to raise OverflowError (``math.isfinite``)."""
    g = Grammar.from_json_schema({"type": "number", "maximum": 10**400})
    assert g.matches("1" + "0" * 400) and not g.matches("1" + "0" * 400 + ".5")
    assert Grammar.from_json_schema({"type": "integer", "minimum": -(10**400), "maximum": 5}).matches("-7")


@pytest.fixture
def flat_everywhere(monkeypatch):
    """Build every digit range flat, however short, to compare with the nested construction."""
    monkeypatch.setattr(digits, "FLAT_WIDTH", 0)
    monkeypatch.setattr(numbers, "FLAT_WIDTH", 0)


def _random_bound(rng: random.Random) -> Decimal:
    whole = str(rng.randrange(0, 10 ** rng.choice([1, 1, 3])))
    places = rng.randrange(0, 8)
    alphabet = rng.choice(["0123456789", "09", "0", "9", "05"])
    text = whole + ("." + "".join(rng.choice(alphabet) for _ in range(places)) if places else "")
    return Decimal(text) * rng.choice([1, 1, -1])


def _random_text(rng: random.Random) -> str:
    whole = str(rng.randrange(0, 10 ** rng.randrange(0, 4))) if rng.random() < 0.8 else "0"
    places = rng.randrange(0, 10)
    alphabet = rng.choice(["0123456789", "09", "0", "9"])
    frac = "".join(rng.choice(alphabet) for _ in range(places))
    return rng.choice(["", "-"]) + whole + ("." + frac if frac else "")


def _random_schema(rng: random.Random) -> dict:
    kind = rng.choice(["number", "number", "integer"])
    lo, hi = sorted([_random_bound(rng), _random_bound(rng)])
    if kind == "integer":
        lo, hi = int(lo), int(hi)
    schema: dict = {"type": kind}
    if rng.random() < 0.8:
        schema["exclusiveMinimum" if kind == "number" and rng.random() < 0.5 else "minimum"] = float(lo) if kind == "number" else lo
    if rng.random() < 0.8:
        schema["exclusiveMaximum" if kind == "number" and rng.random() < 0.5 else "maximum"] = float(hi) if kind == "number" else hi
    return schema


def test_flat_ranges_agree_with_exact_comparison(flat_everywhere) -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(120):
        schema = _random_schema(rng)
        try:
            g = Grammar.from_gbnf(json_schema_to_gbnf(schema))
        except Exception:                    # an empty range ("accepts no value"): nothing to match
            continue
        bounds = [Decimal(str(schema[k])) for k in schema if k != "type"]
        texts = [_random_text(rng) for _ in range(40)] + [format(b, "f") for b in bounds]
        for text in texts:
            if schema["type"] == "integer" and "." in text:
                continue
            assert g.matches(text) == _in_range(text, schema), (schema, text)
            checked += 1
    assert checked > 2000
