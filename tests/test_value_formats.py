"""``Completion.value`` validates JSON outputs with ``jsonschema`` including ``format``: every format
jsonschema can check must really be checked (the checkers need the packages of
``jsonschema[format-nongpl]``, which halter depends on), for the drafts that define it."""
from __future__ import annotations

import json

import pytest

from halter import constraints
from halter.completion import Completion, Usage
from halter.errors import SchemaError

pytestmark = pytest.mark.filterwarnings("ignore:.*only checked as a superset")

# format -> (a valid value, an invalid value that only a real checker catches)
FORMATS = {
    "date-time": ("2024-02-29T12:00:00Z", "2024-02-30T25:00:00Z"),
    "date": ("2024-02-29", "2023-02-29"),
    "time": ("12:00:00Z", "25:61:00Z"),
    "duration": ("P1DT2H", "P1H"),
    "email": ("a@example.com", "no-at-sign"),
    "idn-email": ("ü@example.com", "no-at-sign"),
    "hostname": ("example.com", "-bad-.com"),
    "idn-hostname": ("bücher.example", "a" * 64 + ".com"),
    "ipv4": ("192.168.0.1", "256.1.1.1"),
    "ipv6": ("::1", "1:::2"),
    "uri": ("https://example.com/a?b#c", "not a uri"),
    "uri-reference": ("../a/b", "\\\\bad ref"),
    "iri": ("https://bücher.example/ü", "no scheme"),
    "iri-reference": ("../ü", "\\\\bad"),
    "uri-template": ("https://example.com/{id}", "https://example.com/{id"),
    "json-pointer": ("/a/b~0", "a/b"),
    "relative-json-pointer": ("1/a", "/a"),
    "uuid": ("12345678-1234-5678-1234-567812345678", "12345678-1234-5678-1234"),
    "regex": ("[a-z]+", "[a-z"),
}


def _value(schema: dict, value: str):
    parse = constraints.resolve(json_schema=schema).parse
    c = Completion(text=json.dumps(value), complete=True, finish_reason="stop", tokens=[],
                   usage=Usage(0, 0), seed=None, timings=None, _parse=parse)
    return c.value


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_value_checks_the_format(fmt: str) -> None:
    good, bad = FORMATS[fmt]
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string", "format": fmt}
    assert _value(schema, good) == good
    with pytest.raises(SchemaError, match="format|is not a"):
        _value(schema, bad)


@pytest.mark.parametrize("draft,fmts", [
    ("http://json-schema.org/draft-04/schema#", ["date-time", "email", "hostname", "ipv4", "ipv6", "uri"]),
    ("http://json-schema.org/draft-07/schema#", ["date", "time", "iri", "uri-template", "json-pointer",
                                                   "idn-hostname", "uri-reference"]),
])
def test_older_drafts_check_their_formats(draft: str, fmts: list[str]) -> None:
    for fmt in fmts:
        good, bad = FORMATS[fmt]
        schema = {"$schema": draft, "type": "string", "format": fmt}
        assert _value(schema, good) == good
        with pytest.raises(SchemaError):
            _value(schema, bad)
