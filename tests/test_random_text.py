"""random_text: walks a grammar, ends even on recursive rules, and only produces its strings."""
from __future__ import annotations

import random

import pytest

from halter.grammar import Grammar
from halter.grammar.ast import Literal, RuleRef, Seq
from halter.grammar.random_text import random_text

GBNF = r'''
root ::= value
value ::= "[" ws (value ("," ws value)*)? "]" | [a-z]+ | "\"" [^"]* "\""
ws ::= " "?
'''


def test_samples_are_accepted_and_varied():
    g = Grammar.from_gbnf(GBNF)
    rng = random.Random(3)
    seen = set()
    for _ in range(60):
        text = random_text(g.rules, "root", rng, max_depth=6)
        assert g.matches(text), text
        seen.add(text)
    assert len(seen) > 20


def test_deep_recursion_terminates_with_shortest_completions():
    g = Grammar.from_gbnf('root ::= "(" root ")" | "(" root root ")" | "x"')
    text = random_text(g.rules, "root", random.Random(0), max_depth=3)
    assert g.matches(text) and len(text) < 200


def test_grammar_without_finite_string_is_an_error():
    rules = {"root": Seq((Literal("a"), RuleRef("root")))}
    with pytest.raises(ValueError, match="no finite string"):
        random_text(rules, "root", random.Random(0))


def test_walks_end_where_a_recursive_option_ties_the_empty_one():
    # past max_depth the walk takes the shortest options; "(root root root){1,}" is as short as
    # "" (both can be empty), and taking it recursed for ever (RecursionError)
    g = Grammar.from_gbnf('root ::= ")" | (root root root){1,} | ""')
    for seed in range(20):
        text = random_text(dict(g.rules), "root", random.Random(seed), max_depth=3)
        assert g.matches(text), text
