"""A small run of bench/mask_fuzz.py (random grammars: masks against token-by-token feeding,
``matches`` against an independent recogniser), and that the fuzz does catch a wrong mask."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import bench_module


@pytest.fixture(scope="module")
def fuzz():
    return bench_module("mask_fuzz")


def test_random_grammars_masks_and_matches_agree(fuzz, tmp_path, monkeypatch):
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    counts, found = fuzz.run(25, seed=3)
    assert counts["grammars"] - counts["refused"] >= 18 and counts["states"] > 300   # (GBNF as llama.cpp reads it refuses a few more of the random texts)
    assert found == [], found[:3]


def test_the_fuzz_catches_a_wrong_mask(fuzz, tmp_path, monkeypatch):
    from halter.grammar.token_matcher import TokenMatcher
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    right = TokenMatcher.allowed_mask

    def one_token_short(self):
        mask = right(self).copy()
        allowed = np.flatnonzero(mask)
        if len(allowed) > 1:
            mask[allowed[-1]] = False
        return mask
    monkeypatch.setattr(TokenMatcher, "allowed_mask", one_token_short)
    counts, found = fuzz.run(5, seed=3)
    assert any("mask differs" in line for line in found)


def test_the_recogniser_reads_the_grammar_tree(fuzz):
    rules = {"root": ("seq", [("rep", ("ref", "r1"), 1, None), ("lit", "!")]),
             "r1": ("alt", [("cls", ((97, 99),), False), ("seq", [("ref", "r1"), ("any",)])])}
    assert fuzz.recognise(rules, "ab!") and fuzz.recognise(rules, "a😀!")
    assert not fuzz.recognise(rules, "!") and not fuzz.recognise(rules, "da!")


# Rules that are nullable and recursive through a repetition, called twice in a row: every byte
# can end or re-enter each call, so the places a rule returns to pile up (exponentially, before
# returns to one place were merged into one context).
AMBIGUOUS_RECURSIONS = [
    {"root": ("seq", [("ref", "r2"), ("ref", "r2")]),
     "r2": ("alt", [("lit", "a"), ("lit", ""), ("seq", [("rep", ("ref", "root"), 0, None), ("lit", "a")])])},
    {"root": ("alt", [("seq", [("ref", "r2"), ("ref", "r2")]), ("seq", [("lit", "b"), ("ref", "root")])]),
     "r2": ("alt", [("lit", "a"), ("lit", ""), ("seq", [("rep", ("ref", "root"), 0, None), ("lit", "c")])])},
    {"root": ("alt", [("seq", [("ref", "root"), ("lit", "c")]), ("seq", [("ref", "r1"), ("ref", "r1"), ("lit", "b")]), ("lit", "")]),
     "r1": ("alt", [("rep", ("ref", "r1"), 1, 2), ("seq", [("ref", "root"), ("lit", "a")]), ("lit", "")])},
    {"root": ("seq", [("rep", ("ref", "r1"), 0, 2), ("ref", "r1")]),
     "r1": ("alt", [("seq", [("rep", ("ref", "root"), 1, None), ("lit", "b")]), ("lit", "a"), ("seq", [])])},
]


@pytest.mark.parametrize("rules", AMBIGUOUS_RECURSIONS)
def test_ambiguous_recursions_match_like_the_recogniser(fuzz, rules):
    import itertools
    import random

    from halter import Grammar
    text = "\n".join(f"{name} ::= {fuzz.render(body, random.Random(0), top=True)}" for name, body in rules.items())
    g = Grammar.from_gbnf(text)
    for n in range(7):
        for chars in itertools.product("abc", repeat=n):
            s = "".join(chars)
            assert g.matches(s) == fuzz.recognise(rules, s), (text, s)
    m, before = g.matcher(), len(g._space.ctx_returns)
    for i in range(1, 41):               # contexts grow with the input (~20 a byte), not doubling
        assert m.accept_text("a"), text
        assert len(g._space.ctx_returns) - before < 60 * i, (text, i)
    # the same with closures built from opaque nodes only (the grammar's own space gives them up here)
    from halter.grammar.parser_state import StateSpace
    space = StateSpace(g._automata, template_budget=None)
    node, before = space.initial, len(space.ctx_returns)
    for i in range(1, 41):
        node = space.step_byte(node, ord("a"))
        assert node.id != 0 and len(space.ctx_returns) - before < 60 * i, (text, i)
    assert space.templates
