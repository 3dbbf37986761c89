"""``uniqueItems`` over open item sets, enforced by the check that runs beside a schema grammar.

Checked against python-jsonschema on hand-written instances (default and compact serialisation),
through both matchers (rollback, copies, token masks against feeding each token alone) and in
generation on a tiny random model.
"""
from __future__ import annotations

import json
import warnings

import jsonschema
import numpy as np
import pytest

from halter import Grammar, UnsupportedSchemaError, Vocabulary
from halter.schemas import SchemaWarning, json_schema_to_gbnf
from tests.schema_checks import random_texts

ANY_ITEMS = {"type": "array", "uniqueItems": True}
CASES = [
    (ANY_ITEMS, [[], [1, 2], [1, "1"], [1, True], [0, False], [None, 0], [[1, 2], [2, 1]], [{"a": 1}, {"a": 2}],
                 ["a", "A"], [1, 12], [True, False], [{"a": [1]}, {"a": [1, 1]}]],
                [[1, 1], [1, 1.0], [100, 1e2], [0, -0.0], ["a", "b", "a"], ["\u00e9", "\u00e9"], [None, None],
                 [True, True], [[1, 2], [1, 2]], [{"a": 1, "b": 2}, {"b": 2, "a": 1}], [{}, {}], [[], []],
                 [1, 2, 3, 2]]),
    ({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "groups": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}},
        "free": {"type": "array"}}},
     [{"tags": ["x", "y"], "free": [1, 1]}, {"groups": [[1, 2], [1, 2], [2]]}, {"tags": []}],
     [{"tags": ["x", "x"]}, {"groups": [[1], [2, 2]]}, {"free": [], "tags": ["a", "b", "c", "b"]}]),
    # the value's own type picks the branch: Optional[set[str]]
    ({"anyOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": True}, {"type": "null"}]},
     [None, ["a", "b"]], [["a", "a"]]),
    # through $ref, allOf and prefixItems
    ({"$defs": {"s": {"type": "array", "uniqueItems": True}},
      "type": "array", "prefixItems": [{"$ref": "#/$defs/s"}, {"allOf": [{"$ref": "#/$defs/s"}]}]},
     [[[1, 2], [3, 4], [5, 5]]], [[[1, 1]], [[1, 2], ["x", "x"]]]),
    # patternProperties and additionalProperties pick the items' schema by key
    ({"type": "object", "patternProperties": {"^u_": {"type": "array", "uniqueItems": True}},
      "additionalProperties": {"type": "array"}},
     [{"u_a": [1, 2], "b": [1, 1]}, {"x_u_": [3, 3]}], [{"u_a": [2, 2]}, {"b": [], "u_": ["q", "q"]}]),
]


def _texts(value) -> set[str]:
    return {json.dumps(value), json.dumps(value, separators=(",", ":")), json.dumps(value, ensure_ascii=False)}


@pytest.mark.parametrize("schema,valid,invalid", CASES)
def test_grammar_with_check_agrees_with_jsonschema(schema, valid, invalid):
    g = Grammar.from_json_schema(schema, strict=True)
    assert g.text_check is not None
    for value in valid:
        jsonschema.validate(value, schema)
        for text in _texts(value):
            assert g.matches(text), text
    for value in invalid:
        assert not jsonschema.Draft202012Validator(schema).is_valid(value)
        for text in _texts(value):
            assert not g.matches(text), text


def test_regular_cases_need_no_check_and_text_output_cannot_carry_one():
    assert Grammar.from_json_schema({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True}).text_check is None
    assert Grammar.from_json_schema({"type": "array", "items": {"type": "string"}}).text_check is None
    with pytest.raises(UnsupportedSchemaError):      # GBNF text has nowhere to put the check
        json_schema_to_gbnf(ANY_ITEMS, strict=True)


def test_pydantic_set_is_enforced_in_strict_mode():
    pydantic = pytest.importorskip("pydantic")

    class Tagged(pydantic.BaseModel):
        tags: set[str]
        maybe: set[int] | None = None

    g = Grammar.from_pydantic(Tagged, strict=True)
    assert g.matches('{"tags": ["a", "b"], "maybe": [1, 2]}') and g.matches('{"tags": [], "maybe": null}')
    assert not g.matches('{"tags": ["a", "a"]}') and not g.matches('{"tags": [], "maybe": [3, 3]}')


def test_overlapping_branches_warn_and_still_never_reject_a_valid_instance():
    either = {"anyOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                        {"type": "array", "items": {"type": "string"}, "maxItems": 3}]}
    with pytest.raises(UnsupportedSchemaError):
        Grammar.from_json_schema(either, strict=True)
    with pytest.warns(SchemaWarning, match="cannot always tell"):
        g = Grammar.from_json_schema(either)
    assert g.matches('["a", "a"]') and g.matches('["a", "b", "c", "d"]')   # valid through one branch
    both = {"anyOf": [{"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                      {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaWarning)
        g = Grammar.from_json_schema(both)
    assert g.matches('["a", "b"]') and g.matches("[1, 2]")
    assert not g.matches('["a", "a"]') and not g.matches("[2, 2]")       # every branch requires it


def test_char_matcher_refuses_the_completing_byte_and_rolls_back():
    m = Grammar.from_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True}).matcher()
    assert m.accept_text('["ab", "a')
    assert m.first_failure(b'b"]') == 1              # the closing quote completes a duplicate
    assert not m.accept_text('b"')
    assert m.accept_text("b") and not m.accept_text('"')
    assert m.accept_text("b")                        # "abb" is new
    assert m.accept_text('"')
    c = m.copy()
    m.rollback(3)                                    # back to '["ab", "a'
    assert not m.accept_text('b"') and m.accept_text('c"]') and m.is_accepting()
    assert not c.accept_text(', "abb"') and c.accept_text(', "x"]') and c.is_accepting()
    m.reset()
    assert m.accept_text('["ab", "ab0"]')


def _vocab() -> Vocabulary:
    pieces = [bytes([b]) for b in range(256)]
    pieces += [b'"a"', b'"a",', b'"a"]', b'a"', b'a",', b'a"]', b'", "', b'"]', b'1,', b"1]", b"1.0]", b"[1",
               b"true", b"true]", b"e]", b"e,", b"[]", b"[],", b"]]", b'{"', b'":', b"}", b"},", b"}]", b"1}"]
    pieces += [b"</s>"]
    return Vocabulary.from_token_bytes(pieces, eog_ids=[len(pieces) - 1])


@pytest.mark.parametrize("text", ['["a", "b", "a', '[1, 1.5, true, [], {"x": 1}, "a", ', '[[1], [1'])
def test_token_masks_equal_feeding_each_token_alone(text):
    g = Grammar.from_json_schema(ANY_ITEMS)
    vocab = _vocab()
    m = g.compile(vocab, cache=False).matcher()
    plain = Grammar(g.rules, "root").compile(vocab, cache=False).matcher()     # no check
    removed = 0
    for ch in text.encode():                         # write the text one byte-token at a time
        mask = m.allowed_mask()
        alone = np.array([m.copy().accept_token(t) for t in range(vocab.size)])
        assert not (mask & ~alone).any()
        for t in np.flatnonzero(alone & ~mask):      # taken alone, but a dead end: nothing can follow
            after = m.copy()
            assert after.accept_token(int(t)) and not after.allowed_mask().any()
        assert all(m.is_allowed(t) == mask[t] for t in range(vocab.size))
        assert not (mask & ~plain.allowed_mask()).any()
        removed += int((plain.allowed_mask() & ~mask).sum())
        assert m.accept_token(ch) and plain.accept_token(ch)
    assert removed > 0                               # the check removed tokens the grammar allowed


def test_token_matcher_refuses_duplicates_and_rolls_back():
    vocab = _vocab()
    cg = Grammar.from_json_schema(ANY_ITEMS).compile(vocab, cache=False)
    tid = {bytes(vocab.token_bytes[i]): i for i in range(vocab.size)}
    m = cg.matcher()
    assert m.accept_token(tid[b"["]) and m.accept_token(tid[b'"a",'])
    assert not m.is_allowed(tid[b'"a"]']) and not m.accept_token(tid[b'"a"]'])
    assert m.accept_token(tid[b'"']) and not m.accept_token(tid[b'a"]'])
    assert m.accept_token(tid[b"b"]) and m.accept_token(tid[b'"]']) and m.is_accepting()
    m.rollback(3)                                    # back to '["a",'
    assert not m.accept_token(tid[b'"a"]']) and m.accept_token(tid[b'"a"']) is False
    assert m.accept_token(tid[b'"']) and m.accept_token(tid[b"c"]) and m.accept_token(tid[b'"]'])
    m.reset()
    assert all(m.accept_token(tid[bytes([c])]) for c in b"[1, 1.0")
    assert not m.is_allowed(tid[b"]"]) and not m.is_allowed(tid[b","]) and not m.is_allowed(tid[b"e]"])
    assert m.accept_token(tid[b"1"]) and m.accept_token(tid[b"]"])       # 1.01 is new
    m.reset()
    assert m.accept_token(tid[b"[1"]) and m.accept_token(tid[b","]) and not m.accept_token(tid[b"1]"])


@pytest.mark.parametrize("schema,valid,invalid", CASES)
def test_random_instances_of_the_grammar_are_judged_like_jsonschema(schema, valid, invalid):
    """Texts drawn from the rules alone may repeat items; with the check the grammar accepts
    exactly those python-jsonschema finds valid."""
    g = Grammar.from_json_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = []
    for text in random_texts(schema, 60, seed=11):
        verdict = validator.is_valid(json.loads(text))
        assert g.matches(text) == verdict, text
        verdicts.append(verdict)
    assert any(verdicts)


def test_masks_avoid_dead_ends_of_bounded_items():
    """``["US", "U`` under ``^[A-Z]{2}$``: "S" would leave a duplicate that cannot be closed."""
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "string", "pattern": "^[A-Z]{2}$"},
                                  "uniqueItems": True})
    pieces = [bytes([b]) for b in range(256)] + [b"US", b'"US"', b' "U', b"</s>"]
    vocab = Vocabulary.from_token_bytes(pieces, eog_ids=[len(pieces) - 1])
    tid = {p: i for i, p in enumerate(pieces)}
    m = g.compile(vocab, cache=False).matcher()
    assert m.accept_token(tid[b"["]) and m.accept_token(tid[b'"US"']) and m.accept_token(tid[b","])
    mask = m.allowed_mask()
    assert mask[tid[b' "U']] and mask[ord('"')] and not mask[tid[b'"US"']]
    assert m.accept_token(tid[b' "U'])
    mask = m.allowed_mask()
    assert not mask[ord("S")] and not m.is_allowed(ord("S")) and mask[ord("A")] and not mask[tid[b"US"]]
    # every "U?" written: "U" itself has no way out
    m = g.compile(vocab).matcher()
    assert m.accept_bytes(b"[" + b",".join(b'"U%c"' % c for c in range(65, 91)) + b',"')
    mask = m.allowed_mask()
    assert not mask[ord("U")] and mask[ord("V")]
    assert m.accept_token(ord("U")) and not m.allowed_mask().any()      # taken anyway: a dead end


def test_forced_bytes_stop_before_a_refused_byte():
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "string", "pattern": "^ab$"},
                                  "uniqueItems": True, "maxItems": 2}, whitespace="compact")
    m = g.compile(_vocab(), cache=False).matcher()
    assert m.accept_bytes(b'["a') and m.forced_bytes() == b'b"'
    assert m.accept_bytes(b'b",') and m.forced_bytes() == b'"ab'          # not the refused quote
