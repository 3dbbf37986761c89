"""``target="pydantic"``: every text the grammar accepts is one Pydantic's ``model_validate_json`` takes.

A Pydantic model's JSON Schema says less than the model: JSON Schema allows lone surrogate escapes,
year 0000 and leap seconds, and reads Pydantic's own formats (``ipv4network``, ``base64``...) as
annotations, all of which Pydantic refuses or checks. ``from_pydantic``, ``from_type`` and
``generate(output_type=...)`` build with this target; plain JSON Schema keeps the spec's meaning.
"""
from __future__ import annotations

import base64
import datetime as dt
import enum
import ipaddress
import json
import random
import uuid
from typing import Annotated, Literal, Optional, Union

import pytest

from halter.grammar import Grammar
from halter.grammar.random_text import random_text
from halter.schemas import json_schema_to_gbnf

pydantic = pytest.importorskip("pydantic")
from pydantic import BaseModel, Base64Bytes, Field, IPvAnyAddress, IPvAnyInterface, IPvAnyNetwork  # noqa: E402


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
    tags: set[str] = set()
    notes: dict[str, int] = {}
    pair: tuple[int, str]
    next: Optional["Record"] = None


@pytest.fixture(scope="module")
def record_grammar() -> Grammar:
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
               net4="192.168.4.0/22", blob=base64.b64encode(b"\x00\xffhalter"), tags={"a", "é"}, notes={"k": -3}, pair=(1, "x"))
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
