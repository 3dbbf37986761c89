"""``target="pydantic"``: every text the grammar accepts is one Pydantic's ``model_validate_json`` takes.

A Pydantic model's JSON Schema says less than the model: JSON Schema allows lone surrogate escapes,
year 0000 and leap seconds, and reads Pydantic's own formats (``ipv4network``, ``base64``...) as
annotations, all of which Pydantic refuses or checks. ``from_pydantic``, ``from_type`` and
``generate(output_type=...)`` build with this target; plain JSON Schema keeps the spec's meaning.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import ipaddress
import json
import random
import uuid
import warnings
from typing import Annotated, Literal, Optional, Union

import pytest

from halter.grammar import Grammar
from halter.grammar.random_text import random_text
from halter.schemas import json_schema_to_gbnf

pydantic = pytest.importorskip("pydantic")
from pydantic import (AnyUrl, AwareDatetime, Base64Bytes, BaseModel, Field, HttpUrl, IPvAnyAddress, IPvAnyInterface,  # noqa: E402
                      FiniteFloat, IPvAnyNetwork, NaiveDatetime, NegativeFloat, PositiveFloat, StrictInt, condecimal,
                      confloat)


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    bark: str = Field(pattern=r"^wo+f$")


class Record(BaseModel):
    pet: Annotated[Union[Cat, Dog], Field(discriminator="kind")]
    size: Size
    born: dt.date
    seen: Optional[dt.datetime] = None
    at: dt.time
    took: dt.timedelta
    id: uuid.UUID
    host: IPvAnyAddress
    iface: IPvAnyInterface
    net: IPvAnyNetwork
    net4: ipaddress.IPv4Network
    blob: Base64Bytes
    home: HttpUrl
    link: AnyUrl
    local: NaiveDatetime
    price: condecimal(max_digits=6, decimal_places=2)
    amount: decimal.Decimal
    ratio: FiniteFloat
    count: StrictInt
    tags: set[str] = set()
    notes: dict[str, int] = {}
    pair: tuple[int, str]
    next: Optional["Record"] = None


@pytest.fixture(scope="module")
def record_grammar() -> Grammar:
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # every field is enforced, HttpUrl's 2,083 characters too
        return Grammar.from_pydantic(Record)


def test_every_drawn_instance_validates_with_pydantic(record_grammar: Grammar) -> None:
    rng = random.Random(7)
    for _ in range(60):
        text = random_text(record_grammar.rules, record_grammar.root, rng)
        Record.model_validate_json(text)          # raises on any instance Pydantic refuses


def test_pydantic_dumps_are_accepted(record_grammar: Grammar) -> None:
    r = Record(pet=Dog(kind="dog", bark="wooof"), size=Size.LARGE, born=dt.date(2001, 2, 3),
               seen=dt.datetime(2020, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
               at=dt.time(23, 59, 59, tzinfo=dt.timezone.utc), took=dt.timedelta(days=1, seconds=5),
               id=uuid.UUID(int=12345), host="::1", iface="10.1.2.3/8", net="2001:db8::/32",
               net4="192.168.4.0/22", blob=base64.b64encode(b"\x00\xffhalter"), home="https://example.com/a?b#c",
               link="ftp://user@[::1]:2121/x", local=dt.datetime(1999, 12, 31, 23, 59, 59),
               price=decimal.Decimal("1234.50"), amount=decimal.Decimal("-0.001"), ratio=1e300, count=7, tags={"a", "é"}, notes={"k": -3}, pair=(1, "x"))
    assert record_grammar.matches(r.model_dump_json())
    assert record_grammar.matches(r.model_dump_json(indent=2))


@pytest.mark.parametrize("schema, text", [
    ({"type": "string"}, '"\\ud800"'),                          # lone high surrogate
    ({"type": "string"}, '"\\udc00x"'),                         # lone low surrogate
    ({"type": "object"}, '{"\\ud83d": 1}'),                      # ... in an extra key
    ({"type": "string", "format": "date"}, '"0000-02-29"'),     # year 0
    ({"type": "string", "format": "date-time"}, '"1998-12-31T23:59:60Z"'),   # leap second
    ({"type": "string", "format": "time"}, '"15:59:60-08:00"'),
])
def test_what_pydantic_refuses_only_the_pydantic_target_rejects(schema, text) -> None:
    assert Grammar.from_gbnf(json_schema_to_gbnf(schema)).matches(text)           # RFC 8259 / 3339
    assert not Grammar.from_gbnf(json_schema_to_gbnf(schema, target="pydantic")).matches(text)
    with pytest.raises(pydantic.ValidationError):
        pydantic.TypeAdapter({"date": dt.date, "date-time": dt.datetime, "time": dt.time}
                             .get(schema.get("format"), dict if schema["type"] == "object" else str)
                             ).validate_json(text)


def test_surrogate_pairs_and_other_escapes_stay_accepted() -> None:
    g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "object"}, target="pydantic"))
    for text in ['{"\\ud83d\\ude00": "\\u00e9\\n\\"\\/"}', json.dumps({"k": "😀 ü"}), json.dumps({"k": "😀"}, ensure_ascii=False)]:
        assert g.matches(text), text


def test_pydantic_formats_are_enforced_only_for_pydantic() -> None:
    fmt = {"type": "string", "format": "ipv4network"}
    plain, py = (Grammar.from_gbnf(json_schema_to_gbnf(fmt, target=t)) for t in ("json-schema", "pydantic"))
    assert plain.matches('"not a network"')                     # an unknown format is an annotation
    assert not py.matches('"not a network"')
    assert py.matches('"192.168.4.0/22"') and py.matches('"10.0.0.7"')
    assert not py.matches('"192.168.5.0/22"')                    # host bits set


def test_ipv4_networks_agree_with_ipaddress() -> None:
    g = Grammar.from_gbnf(json_schema_to_gbnf({"type": "string", "format": "ipv4network"}, target="pydantic"))
    rng = random.Random(3)
    for _ in range(400):
        addr = ".".join(str(rng.choice([0, 0, 128, 192, 255, rng.randrange(256)])) for _ in range(4))
        text = f"{addr}/{rng.randrange(33)}"
        try:
            ipaddress.IPv4Network(text)
            valid = True
        except ValueError:
            valid = False
        assert g.matches(json.dumps(text)) == valid, text


def test_from_type_uses_the_pydantic_target() -> None:
    g = Grammar.from_type(list[dt.datetime])
    assert g.matches('["2020-01-01T00:00:00Z"]')
    assert not g.matches('["2016-12-31T23:59:60Z"]')


def test_unknown_target_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="target must be one of"):
        json_schema_to_gbnf({"type": "string"}, target="marshmallow")


@pytest.mark.parametrize("url, http_ok, any_ok", [
    ("https://example.com/a/b?c=d#e", True, True),
    ("HTTP://A.B:8080", True, True),
    ("http://[2001:db8::1]:443/", True, True),
    ("http://u:p@a.example/", False, True),   # valid, but HttpUrl's capped form leaves user@ out
    ("ftp://files.example.org/x", False, True),
    ("http://10.0.0.1/", True, True),
    ("http://1.2.3.999/", False, False),      # the last label is numeric: parsed as a bad IPv4
    ("http://a.0x1f/", False, False),
    ("http://xn--a.example/", False, False),  # punycode that does not decode
    ("http://example.com:65536/", False, False),
    ("x://[v1.a]/", False, False),            # IPvFuture: RFC 3986 has it, WHATWG does not
])
def test_urls_follow_the_whatwg_parser(url, http_ok, any_ok) -> None:
    class Links(BaseModel):
        http: HttpUrl
        any: AnyUrl

    g = Grammar.from_pydantic(Links)
    for field, ok in (("http", http_ok), ("any", any_ok)):
        text = json.dumps({"http": "http://x.org", "any": "http://x.org", field: url})
        assert g.matches(text) is ok, (field, url)
        if ok:
            Links.model_validate_json(text)


def test_naive_aware_and_plain_datetimes_are_told_apart() -> None:
    class Times(BaseModel):
        naive: NaiveDatetime
        aware: AwareDatetime
        plain: dt.datetime          # Pydantic takes both, and datetime.now() dumps without an offset
        clock: dt.time

    g = Grammar.from_pydantic(Times)
    for plain, clock in [("2020-01-02T03:04:05", "03:04:05"), ("2020-01-02T03:04:05.5-01:30", "03:04:05Z")]:
        text = json.dumps({"naive": "2020-01-02T03:04:05.6", "aware": "2020-01-02T03:04:05+01:00",
                           "plain": plain, "clock": clock})
        assert g.matches(text), text
        Times.model_validate_json(text)
    assert not g.matches('{"naive": "2020-01-02T03:04:05Z", "aware": "2020-01-02T03:04:05Z", '
                         '"plain": "2020-01-02T03:04:05Z", "clock": "03:04:05"}')
    assert not g.matches('{"naive": "2020-01-02T03:04:05", "aware": "2020-01-02T03:04:05", '
                         '"plain": "2020-01-02T03:04:05Z", "clock": "03:04:05"}')


# Values whose JSON (as Pydantic dumps it) a grammar of their type must accept: the everyday ones
# first (naive datetimes and times, negative and fractional timedeltas, which the JSON Schema
# formats alone do not allow), then edges.
DUMPED_VALUES = [
    (dt.datetime, [dt.datetime(2020, 1, 2, 3, 4, 5), dt.datetime(2020, 1, 2, 3, 4, 5, 123456),
                   dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
                   dt.datetime(2020, 1, 2, tzinfo=dt.timezone.utc),
                   dt.datetime(2020, 1, 2, tzinfo=dt.timezone(-dt.timedelta(hours=9, minutes=30)))]),
    (NaiveDatetime, [dt.datetime(2020, 2, 29, 12)]),
    (AwareDatetime, [dt.datetime(2020, 2, 29, 12, tzinfo=dt.timezone(dt.timedelta(hours=14)))]),
    (dt.time, [dt.time(3, 4, 5), dt.time(0, 0), dt.time(23, 59, 59, 1), dt.time(12, tzinfo=dt.timezone.utc)]),
    (dt.date, [dt.date(1, 1, 1), dt.date(2024, 2, 29)]),
    (dt.timedelta, [dt.timedelta(0), dt.timedelta(seconds=-5), dt.timedelta(microseconds=1),
                    dt.timedelta(days=400, hours=3, minutes=2, seconds=1, microseconds=500000),
                    -dt.timedelta(days=2, microseconds=1), dt.timedelta(weeks=3),
                    dt.timedelta(days=729_999_999, seconds=86_399, microseconds=999_999),
                    -dt.timedelta(days=729_999_999)]),
    (decimal.Decimal, [decimal.Decimal("1.50"), decimal.Decimal("-0.001"), decimal.Decimal("1E+5")]),
    (uuid.UUID, [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]),
    (bytes, [b"", b"ab\x00c\x7f"]),
    (float, [0.1, -1e-7, 1e300, 5e-324, 1.7976931348623157e308]),
    (int, [0, -(10**30)]),
    (str, ["", "h\u00e9llo\n\"\u2028\U0001f600\x7f\x00"]),
    (dict[str, list[Optional[float]]], [{"a": [1.5, None]}, {}]),
    (tuple[int, str], [(1, "a")]),
]


@pytest.mark.parametrize("tp, values", DUMPED_VALUES, ids=lambda v: getattr(v, "__name__", None) or str(v)[:20])
def test_dumps_of_values_of_a_type_are_accepted(tp, values) -> None:
    g = Grammar.from_type(tp)
    adapter = pydantic.TypeAdapter(tp)
    for value in values:
        text = adapter.dump_json(value).decode()
        assert g.matches(text), text
        assert g.matches(json.dumps(json.loads(text))), text         # as json.dumps writes it: \uXXXX escapes, spaces


@pytest.mark.parametrize("tp, good, bad", [
    # a text that rounds onto a strict bound is not past it (the double Pydantic compares is 1.0)
    (confloat(lt=1), ["0.9999999999999999", "-5", "0.5"], ["0.99999999999999999999", "1"]),
    (confloat(gt=0.1), ["0.10000000000000002", "0.2", "7"], ["0.1", "0.10000000000000001"]),
    # and what rounds to zero is not above or below it
    (PositiveFloat, ["1e-300", "0.5", "2e+300", "1.7976931348623157e308"], ["1e-400", "0", "-1e-5"]),
    (NegativeFloat, ["-1e-300", "-3"], ["-1e-400", "-0.0", "-2e-324"]),
    (confloat(gt=0, lt=1), ["0.5", "0." + "0" * 300 + "1", "1e-05", "9.999999999999999e-1", "5e-324"],
     ["0." + "0" * 400 + "1", "0.99999999999999999999", "1e-400", "9.9999999999999999999e-1", "1e0"]),
    # and bounded numbers do not overflow either
    (confloat(gt=0.5, allow_inf_nan=False), ["1" + "0" * 300, "0.75"], ["1" + "0" * 400, "0.5"]),
])
def test_bounds_hold_for_the_double_pydantic_reads(tp, good, bad) -> None:
    g, adapter = _check_texts(tp, good, bad)
    for text in bad:                     # refused because Pydantic refuses them, not a subset
        with pytest.raises(pydantic.ValidationError):
            adapter.validate_json(text)
    rng = random.Random(11)
    for _ in range(200):
        adapter.validate_json(random_text(g.rules, g.root, rng))


def test_multiples_are_kept_on_unbounded_pydantic_numbers() -> None:
    """The digit cap against overflow made the ``multipleOf`` automaton too large: it was dropped."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = Grammar.from_type(confloat(multiple_of=0.5))
    assert g.matches("2.5") and g.matches("-3") and not g.matches("0.3")


def test_numbers_up_to_the_largest_double_are_accepted() -> None:
    """``1.f e308``: accepted exactly when it parses to a finite double, for f of up to 16 digits
    (every repr); longer ones only when finite."""
    g = Grammar.from_type(FiniteFloat)
    rng = random.Random(3)
    top = "7976931348623158"
    texts = ["1e308", "1.7976931348623157e+308", "1.7976931348623158e308", "1.7976931348623159e308",
             "1.79769313486231580793e308", "1.797693134862315807937e308", "1.8e308", "2e308", "-1.79e+308"]
    for _ in range(400):
        k = rng.randrange(1, 22)
        cut = rng.randrange(0, min(k, 16) + 1)
        f = top[:cut] + "".join(rng.choice("0123456789") for _ in range(k - cut))
        texts.append(f"1.{f}e308")
    exact = 0
    for text in texts:
        finite = abs(float(text)) != float("inf")
        if g.matches(text):
            assert finite, text
        elif len(text.split("e")[0].lstrip("-")) <= 18:        # "1." and up to 16 digits: exact
            assert not finite, text
            exact += 1
    assert exact > 50


@pytest.mark.parametrize("text, ok", [
    ("-PT5S", True), ("+P1W", True), ("P1Y35DT3H2M1.5S", True), ("PT0.0000001S", True),
    ("P1999999Y999999M999999W99999999DT999999H999999M99999999." + "9" * 40 + "S", True),   # the most it allows
    ("-P1999999Y999999M999999W99999999DT999999H999999M99999999.9S", True),
    ("P", False), ("PT", False), ("P1DT", False),     # no component: Pydantic refuses the first two
    ("P2000000Y", False), ("PT1000000H", False),      # past the caps (P2739727Y overflows)
    ("P1D2Y", False), ("p1d", False), ("P1.5D", False),   # out of order, lower case, fraction off seconds
])
def test_timedeltas_are_what_pydantic_dumps_and_parses(text, ok) -> None:
    g = Grammar.from_type(dt.timedelta)
    assert g.matches(json.dumps(text)) == ok, text
    if ok:
        pydantic.TypeAdapter(dt.timedelta).validate_json(json.dumps(text))


@pytest.mark.parametrize("tp, good, bad", [
    (condecimal(max_digits=5, decimal_places=2), ["999.99", "-0.5", "1.500", '"012.30"', "12"],
     ["1000", "1.505", "0.001", '"1.505"', '"1000"']),
    (condecimal(max_digits=3), ["999", '"-12"'], ["1000", "1.5"]),
    (condecimal(ge=0, decimal_places=1), ["0", "2.5"], ["-0.5", "2.55", '"2.5"']),   # bounds: numbers only
    (decimal.Decimal, ["1e300", '"+1.5"', '"5."', '"1e5"', '"-2.5E-999999999999999"'],
     ["1e400", '"."', '"1e' + "9" * 19 + '"', '"1e"', '"NaN"']),
    (condecimal(max_digits=5, decimal_places=2), ["1"], ['"1e2"']),     # limits: no exponent
    (FiniteFloat, ["1e99", "-1.5e-99", "9" * 200], ["1e400", "1" + "0" * 200]),
    (StrictInt, ["3", "-0"], ["3.0", "3e0"]),
])
def test_numbers_stay_in_what_pydantic_parses(tp, good, bad) -> None:
    _check_texts(tp, good, bad)


def _check_texts(tp, good, bad):
    """``tp``'s grammar accepts ``good`` (which Pydantic validates) and refuses ``bad``."""
    g, adapter = Grammar.from_type(tp), pydantic.TypeAdapter(tp)
    for text in good:
        assert g.matches(text), text
        adapter.validate_json(text)
    for text in bad:
        assert not g.matches(text), text
    return g, adapter


def test_emails_are_ones_email_validator_takes() -> None:
    pytest.importorskip("email_validator")

    class Contact(BaseModel):
        email: pydantic.EmailStr

    g = Grammar.from_pydantic(Contact)
    for address, ok in [("a.b+c@mail.example.com", True), ("x@y.io", True),
                        ('"quoted local"@x.com', False),     # RFC 5322 has it; EmailStr refuses it
                        ("a@[192.0.2.1]", False), ("a@localhost", False), ("a@host.local", False),
                        ("a@xn--x.com", False), ("a@x-.com", False)]:
        assert g.matches(json.dumps({"email": address})) is ok, address
    rng = random.Random(5)
    for _ in range(100):
        Contact.model_validate_json(random_text(g.rules, g.root, rng))


def test_json_fields_hold_escaped_json_of_their_type() -> None:
    class Inner(BaseModel):
        a: int
        b: list[str]

    class Wrapped(BaseModel):
        payload: pydantic.Json[Inner]
        nums: pydantic.Json[list[int]]
        anything: pydantic.Json

    g = Grammar.from_pydantic(Wrapped)
    good = {"payload": json.dumps({"a": 1, "b": ['say "hi"', "é\n"]}), "nums": "[1, 2]", "anything": "null"}
    assert g.matches(json.dumps(good)) and g.matches(json.dumps(good, ensure_ascii=False))
    for field, content in [("payload", '{"a": "1", "b": []}'), ("nums", "[1, 2.5]"), ("anything", "{")]:
        assert not g.matches(json.dumps({**good, field: content})), (field, content)
    # JSON Schema reads contentSchema as an annotation: any string
    assert Grammar.from_json_schema(Wrapped.model_json_schema()).matches(json.dumps({**good, "nums": "{"}))
    rng = random.Random(11)
    for _ in range(60):
        Wrapped.model_validate_json(random_text(g.rules, g.root, rng))


def test_http_urls_fit_their_length_limit() -> None:
    from halter.schemas.formats_pydantic import PYDANTIC_FORMATS
    from halter.schemas.regex import regex_to_expr
    from halter.schemas.strings import length_range
    assert length_range(regex_to_expr(PYDANTIC_FORMATS["x-halter-http-url"]))[1] <= 2083
    assert length_range(regex_to_expr(PYDANTIC_FORMATS["uri"]))[1] is None      # AnyUrl: no limit


def test_model_grammars_have_only_the_models_fields_unless_it_allows_extra() -> None:
    class Closed(BaseModel):
        a: int

    class Open(BaseModel, extra="allow"):
        a: int

    assert Grammar.from_pydantic(Closed).matches('{"a": 1}')
    assert not Grammar.from_pydantic(Closed).matches('{"a": 1, "b": 2}')
    assert Grammar.from_pydantic(Closed, closed_objects=False).matches('{"a": 1, "b": 2}')
    assert Grammar.from_pydantic(Open).matches('{"a": 1, "b": 2}')
    assert not Grammar.from_type(list[Closed]).matches('[{"a": 1, "b": 2}]')


def test_byte_sizes_have_units_pydantic_knows() -> None:
    g = Grammar.from_type(pydantic.ByteSize)
    ta = pydantic.TypeAdapter(pydantic.ByteSize)
    for text in ['"1.5 KiB"', '"10mb"', '"3 GIBIT"', '"7"', "4096"]:
        assert g.matches(text), text
        ta.validate_json(text)
    for text in ['"5 kbx"', '"5 parsecs"', "-1"]:
        assert not g.matches(text), text
        with pytest.raises(pydantic.ValidationError):
            ta.validate_json(text)
