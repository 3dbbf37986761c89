"""String formats: regex (ECMAScript syntax), leap seconds with offsets, idn-email, uri-template,
and one warning per dropped keyword and place."""
from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import warnings
from datetime import date, time

import jsonschema
import pytest

from halter.errors import UnsupportedSchemaError
from halter.grammar import Grammar
from halter.grammar.random_text import random_text
from halter.schemas import SchemaWarning, json_schema_to_gbnf, schema_to_rules
from halter.schemas.format_datetime import LEAP_OFFSET_MINUTES

from tests.conftest import shared_path

_GRAMMARS: dict[str, Grammar] = {}


def grammar(fmt: str) -> Grammar:
    if fmt not in _GRAMMARS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SchemaWarning)
            _GRAMMARS[fmt] = Grammar.from_json_schema({"type": "string", "format": fmt})
    return _GRAMMARS[fmt]


def accepts(fmt: str, value: str) -> bool:
    """The grammar's verdict, which must not depend on how the JSON string is spelled."""
    g = grammar(fmt)
    verdicts = {g.matches(json.dumps(value)), g.matches(json.dumps(value, ensure_ascii=False))}
    assert len(verdicts) == 1, value
    return verdicts.pop()


# -- regex ------------------------------------------------------------------------------------

VALID_REGEXES = [
    "", "abc", "([abc])+\\s+$", "^a|b$", "a|", "(?:)", "(?<name>x)\\k<name>", "(?<=a+)b", "(?<!a)b",
    "(?=a)a", "(?!a)b", "[]", "[^]", "\\cA", "[a-z\\d-]", "[-a]", "[\\]\\\\]", "a{2}", "a{2,}?",
    "a{2,5}", "a*?b+?c??", "\\u{10FFFF}", "\\u0041\\x41\\0", "\\p{L}+\\P{Lu}", "\\p{Script=Greek}",
    "(a)\\1", "\\bword\\B", "^5\\-.*", "\\/path", "[\\b]", "é+", "(?i:abc)", "((a|b)c)+", "\\.\\*",
    "(((((deep)))))",
]
INVALID_REGEXES = [
    "^(abc]", "\\a", "(?P<name>x)", "(?P<n>a)(?P=n)", "(?#comment)a", "(?i)abc", "(?ims)abc",
    "(", ")", "a)", "(a", "[", "[a", "a**", "*a", "+", "?", "a{", "a}", "]", "{1}", "\\",
    "a\\", "\\u{110000}", "\\u12", "\\xZ1", "\\q", "\\cé", "(?<>x)", "(?<1a>x)", "x{2}{3}",
    "((a)", "(a))", "^*", "(?<a)", "\\k", "\\p{}", "(?:a",
]


@pytest.mark.parametrize("pattern", VALID_REGEXES)
def test_valid_ecmascript_regexes_are_accepted(pattern):
    assert accepts("regex", pattern)


@pytest.mark.parametrize("pattern", INVALID_REGEXES)
def test_malformed_or_non_ecmascript_regexes_are_rejected(pattern):
    assert not accepts("regex", pattern)


def _node_verdicts(patterns: list[str]) -> list[tuple[bool, bool]] | None:
    """(valid with the u flag, valid without it) per pattern, from node; None without node."""
    node = shutil.which("node")
    if node is None:
        return None
    js = ("const ps = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
          "const ok = (p, f) => { try { new RegExp(p, f); return true } catch (e) { return false } };"
          "console.log(JSON.stringify(ps.map(p => [ok(p, 'u'), ok(p, '')])));")
    out = subprocess.run([node, "-e", js], input=json.dumps(patterns), capture_output=True, text=True,
                         timeout=60)
    return json.loads(out.stdout) if out.returncode == 0 else None


def test_hand_written_regexes_agree_with_javascript():
    verdicts = _node_verdicts(VALID_REGEXES + INVALID_REGEXES)
    if verdicts is None:
        pytest.skip("node is not available")
    for p, (u_mode, _) in zip(VALID_REGEXES, verdicts):
        # documented: a non-u identity escape; ES2025 modifiers (newer than some JavaScript engines)
        assert u_mode or p in ("^5\\-.*", "(?i:abc)"), p
    for p, (u_mode, _) in zip(INVALID_REGEXES, verdicts[len(VALID_REGEXES):]):
        assert not u_mode, p


def _real_patterns() -> list[str]:
    found: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "pattern" and isinstance(v, str):
                    found.add(v)
                elif k == "patternProperties" and isinstance(v, dict):
                    found.update(v)
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    with open(shared_path("schema", "jsonschemabench_dev.jsonl")) as f:
        for line in f:
            walk(json.loads(line)["schema"])
    return sorted(found)


def test_every_pattern_of_the_real_schemas_is_a_valid_regex():
    """Real users' patterns: accepted unless both Python's re and JavaScript reject them."""
    patterns = _real_patterns()
    verdicts = _node_verdicts(patterns) or [(True, True)] * len(patterns)
    for p, (u_mode, plain) in zip(patterns, verdicts):
        try:
            re.compile(p)
            python_ok = True
        except re.error:
            python_ok = False
        if python_ok or u_mode or plain:
            assert accepts("regex", p), p


_SUPERSET = re.compile(r"out of order|Invalid named capture referenced|Invalid named reference|"
                       r"Invalid property name|Invalid escape|Invalid decimal escape|Duplicate capture group name|"
                       r"Invalid class escape|Invalid capture group name|Invalid Unicode escape")


def test_random_regexes_from_the_grammar_are_valid_javascript():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not available")
    rules = schema_to_rules({"type": "string", "format": "regex"})
    rng = random.Random(7)
    samples = [json.loads(random_text(rules, "root", rng)) for _ in range(300)]
    # ES2025 modifier groups: newer than node 20, and repeated flags are a documented superset
    samples = [p for p in samples if not re.search(r"\(\?[ims-]", p)]
    js = ("const ps = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
          "console.log(JSON.stringify(ps.map(p => { try { new RegExp(p, 'u'); return '' }"
          " catch (e) { try { new RegExp(p); return '' } catch (f) { return e.message } } })));")
    out = subprocess.run([node, "-e", js], input=json.dumps(samples), capture_output=True, text=True, timeout=60)
    errors = [(p, e) for p, e in zip(samples, json.loads(out.stdout)) if e and not _SUPERSET.search(e)]
    assert not errors, errors[:5]


# -- time and date-time: leap seconds ---------------------------------------------------------

def _utc_minutes(hh: int, mm: int, sign: str, oh: int, om: int) -> int:
    off = oh * 60 + om
    return (hh * 60 + mm - (off if sign == "+" else -off)) % 1440


def time_is_valid(text: str) -> bool:
    """An independent RFC 3339 ``full-time`` check (leap seconds at 23:59:60 UTC)."""
    m = re.fullmatch(r"(\d\d):(\d\d):(\d\d)(\.\d+)?([Zz]|([+-])(\d\d):(\d\d))", text, re.ASCII)
    if not m:
        return False
    hh, mm, ss = int(m[1]), int(m[2]), int(m[3])
    sign, oh, om = (m[6], int(m[7]), int(m[8])) if m[6] else ("+", 0, 0)
    if hh > 23 or mm > 59 or ss > 60 or oh > 23 or om > 59:
        return False
    if ss == 60:
        return _utc_minutes(hh, mm, sign, oh, om) == 23 * 60 + 59
    time(hh, mm, ss)
    return True


@pytest.mark.parametrize("value", ["01:29:60+01:30", "23:29:60+23:30", "15:59:60-08:00", "00:29:60-23:30",
                                   "23:59:60Z", "23:59:60+00:00", "23:59:60-00:00", "05:44:60+05:45",
                                   "15:59:60.123-08:00", "00:59:60+01:00", "23:59:60z"])
def test_leap_seconds_that_are_23_59_60_utc(value):
    assert time_is_valid(value)
    assert accepts("time", value)
    assert accepts("date-time", "1998-12-31T" + value)


@pytest.mark.parametrize("value", ["23:59:60+01:00", "23:59:60+00:30", "23:59:60-01:00", "23:59:60-00:30",
                                   "22:59:60Z", "23:58:60Z", "22:59:60+00:00", "23:59:61Z", "24:59:60+01:00",
                                   "01:30:60+01:30", "15:59:60+08:00"])
def test_leap_seconds_at_other_utc_times_are_rejected(value):
    assert not time_is_valid(value)
    assert not accepts("time", value)
    assert not accepts("date-time", "1998-12-31T" + value)


def test_every_quarter_hour_offset_has_exactly_its_leap_second():
    g = grammar("time")
    for sign in "+-":
        for oh in range(24):
            for om in LEAP_OFFSET_MINUTES:
                local = (23 * 60 + 59 + (oh * 60 + om) * (1 if sign == "+" else -1)) % 1440
                hh, mm = divmod(local, 60)
                offset = f"{sign}{oh:02d}:{om:02d}"
                assert g.matches(f'"{hh:02d}:{mm:02d}:60{offset}"'), offset
                hh2, mm2 = divmod((local + 1) % 1440, 60)
                assert not g.matches(f'"{hh2:02d}:{mm2:02d}:60{offset}"'), offset


def test_leap_seconds_with_other_offsets_are_a_documented_gap():
    assert time_is_valid("00:19:60+00:20") and not accepts("time", "00:19:60+00:20")


@pytest.mark.parametrize("fmt", ["time", "date-time"])
def test_random_times_from_the_grammar_are_valid(fmt):
    rules = schema_to_rules({"type": "string", "format": fmt})
    rng = random.Random(3)
    for _ in range(200):
        text = json.loads(random_text(rules, "root", rng))
        if fmt == "date-time":
            day, text = text[:10], text[11:]
            year = int(day[:4]) or 2000      # year 0000 (a leap year) is valid RFC 3339, not Python
            date(year, int(day[5:7]), int(day[8:10]))
        assert time_is_valid(text), text


def test_time_grammar_stays_small():
    """Leap seconds cost ~900 states at most; all 1,440 local times would be ~11,000."""
    size = len(json_schema_to_gbnf({"type": "string", "format": "date-time"}))
    assert size < 60_000


# -- idn-email, uri-template ------------------------------------------------------------------

@pytest.mark.parametrize("value,valid", [
    ("실례@실례.테스트", True), ("joe.bloggs@example.com", True), ("δοκιμή@example.com", True),
    ('"δοκιμή"@example.com', True), ("user@cafe\u0301.com", True), ("cafe\u0301@example.com", True),
    ("\u0085@example.com", True), ("\uffff@example.com", True), ("a" * 64 + "@example.com", True),
    ("\U0001d54f@example.com", True), ("user@[127.0.0.1]", True),
    ("2962", False), ("user\uff20example.com", False), ("@example.com", False), ("user@", False),
    ("a..b@example.com", False), ("user@-example.com", False), ("us er@example.com", False),
])
def test_idn_email(value, valid):
    assert accepts("idn-email", value) is valid
    if valid:      # jsonschema's own check is looser (an '@' anywhere): it must accept ours
        assert jsonschema.Draft202012Validator.FORMAT_CHECKER.conforms(value, "idn-email")


def test_idn_email_is_a_superset_so_strict_mode_refuses_it():
    with pytest.raises(UnsupportedSchemaError, match="idn-email"):
        json_schema_to_gbnf({"type": "string", "format": "idn-email"}, strict=True)


@pytest.mark.parametrize("value,valid", [
    ("a'b", True), ("http://example.com/{term:1}/{term}", True), ("{+var}", True), ("", True),
    ("a%41b", True), ("(period='{period}')", True),
    ("{}", False), ("a b", False), ("foo}bar", False), ("{a,}", False), ("a<b", False),
])
def test_uri_template_literals_follow_rfc6570_erratum_6937(value, valid):
    assert accepts("uri-template", value) is valid


# -- warnings ---------------------------------------------------------------------------------

def test_each_dropped_keyword_is_warned_once_per_place():
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$defs": {"P": {"type": "string", "format": "idn-hostname"}},
              "properties": {k: {"allOf": [{"$ref": "#/$defs/P"}, {"minLength": 1}]} for k in "abcd"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Grammar.from_json_schema(schema)
    messages = [str(w.message) for w in caught if issubclass(w.category, SchemaWarning)]
    assert messages == ["'format' at #/$defs/P ignored: format 'idn-hostname' is only checked as a superset"]
