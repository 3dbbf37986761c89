"""Rules too large for one automaton: accepted as llama.cpp accepts them, with the same language.

``x ::= [ab]* "a" [ab]{16}`` needs a 2^17-state DFA; halter then runs that rule with its repeats
as rules of their own (``halter.grammar.split_rules``) instead of refusing it.
"""
from __future__ import annotations

import random
import re

import pytest

from halter import Grammar
from halter.errors import GrammarError
from halter.grammar import automaton, split_rules
from tests.test_token_masks import random_walk_check, synthetic_vocab

HARD = 'root ::= x\n\n  x ::= [ab]* "a" [ab]{16}'


def test_a_rule_too_large_for_one_automaton_keeps_its_language() -> None:
    g = Grammar.from_gbnf(HARD)
    assert str(g) == 'root ::= x\nx ::= [ab]* "a" [ab]{16}\n'      # the user's rules, as written
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(400):
        n = rng.randint(0, 30)
        s = "".join(rng.choice("ab") for _ in range(n))
        if rng.random() < 0.5 and n > 17:
            s = s[: n - 17] + "a" + s[n - 16:]
        want = re.fullmatch("[ab]*a[ab]{16}", s) is not None
        assert g.matches(s) == want, s
        seen[want] += 1
    assert seen[True] > 50 and seen[False] > 50


def test_its_token_masks_agree_with_feeding_each_token() -> None:
    cg = Grammar.from_gbnf(HARD).compile(synthetic_vocab(), cache=False)
    for seed in range(3):
        assert random_walk_check(cg, seed, steps=40, sample=None) > 0


def test_long_literals_and_wide_alternations_are_split_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(automaton, "MAX_DFA_STATES", 300)
    monkeypatch.setattr(split_rules, "LITERAL_CHUNK", 100)
    monkeypatch.setattr(split_rules, "ALT_CHUNK", 16)
    words = [f"w{i:03d}x" for i in range(200)]
    g = Grammar.from_gbnf("root ::= " + " | ".join(f'"{w}"' for w in words))
    assert all(g.matches(w) for w in words[::7]) and not g.matches("w200x") and not g.matches("w00")
    long = "abc" * 2000
    g = Grammar.from_gbnf(f'root ::= "<" "{long}" ">"')
    assert g.matches(f"<{long}>") and not g.matches(f"<{long[:-1]}>")


def test_a_rule_that_splitting_cannot_shrink_is_refused_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(automaton, "MAX_DFA_STATES", 5)
    with pytest.raises(GrammarError, match="rule 'x' is too complex") as info:
        Grammar.from_gbnf('root ::= x\nx ::= "abcdefgh"')
    assert (info.value.line, info.value.column) == (2, 1)
