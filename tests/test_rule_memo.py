"""Rule automata reused across grammars (``grammar/rule_memo.py``) give the automata a fresh build gives."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from halter import Grammar
from halter.grammar import rule_memo
from halter.grammar.automaton import build_automata
from tests.conftest import shared_path

SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "string"}}},
    {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
     "required": ["n"]},
    {"type": "object", "patternProperties": {"^x-": {"type": "number"}}, "additionalProperties": {"type": "boolean"}},
    {"enum": ["caf\u00e9", "a\"b", "\u00e9t\u00e9", 3, None]},
    {"type": "string", "maxLength": 40, "pattern": "^[a-z\u00e9]+$"},
    {"type": "array", "items": {"type": "object", "additionalProperties": True}, "maxItems": 12},
    {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 300}, "e": {"format": "email"}}},
    {"anyOf": [{"type": "object"}, {"type": "array", "items": {"$ref": "#"}}]},
    True,
]


def _same(a, b) -> None:
    assert a.rule_names == b.rule_names
    assert a.start == b.start and a.rule_of == b.rule_of and a.accepting == b.accepting
    assert np.array_equal(a.next_array, b.next_array)
    assert a.calls == b.calls and a.tokens == b.tokens and a.class_of == b.class_of
    assert a.nullable == b.nullable


def _schemas():
    out = list(SCHEMAS)
    try:
        rows = shared_path("schema", "jsonschemabench_dev.jsonl").read_text().splitlines()
    except pytest.skip.Exception:
        return out
    return out + [json.loads(row)["schema"] for row in rows[:60:2]]


def test_grammars_built_from_kept_rule_automata_equal_fresh_builds(monkeypatch):
    schemas = _schemas()
    grammars = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for s in schemas:                  # (every schema twice: the second build reuses the first's rules)
            for _ in range(2):
                try:
                    grammars.append(Grammar.from_json_schema(s))
                except Exception:   # noqa: BLE001 - a schema halter refuses is refused either way
                    pass
    hits = []
    real = rule_memo.lookup

    def counting(key):
        entry = real(key)
        hits.append(entry is not None)
        return entry
    monkeypatch.setattr(rule_memo, "lookup", counting)
    for g in grammars:
        kept = build_automata(g.rules, g.root)
        monkeypatch.setattr(rule_memo, "enabled", False)
        fresh = build_automata(g.rules, g.root)
        monkeypatch.setattr(rule_memo, "enabled", True)
        _same(kept, fresh)
        _same(kept, g.automata)
    assert sum(hits) >= 2 * len(grammars)          # the JSON helpers of most grammars came from the memo


def test_canonical_bodies_are_one_object():
    from halter.grammar.ast import Literal, Repeat
    a = rule_memo.canonical(Repeat(Literal("ab"), 0, 3))
    b = rule_memo.canonical(Repeat(Literal("ab"), 0, 3))
    assert a is b
