"""Code-point DFAs (char_automaton.py): they agree with Python's ``re`` on random small patterns,
obey the set laws, and their grammars (automaton_grammar.py) accept exactly their languages."""
from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halter.grammar import Grammar
from halter.schemas.automaton_grammar import dfa_to_expr
from halter.schemas.char_automaton import (AutomatonTooLarge, from_expr, length_range_dfa, literal_set,
                                           minimize)
from halter.schemas.json_text import JsonText, cat
from halter.schemas.regex import regex_to_expr
from halter.schemas.rules import Rules, tidy_rules
from halter.grammar.ast import Literal

ALPHABET = "ab\u00e9\U0001F600"
TEXTS = st.text(alphabet=ALPHABET + "x\n", max_size=7)


@st.composite
def pattern(draw, depth=0):
    """A random ECMAScript pattern over a tiny alphabet whose meaning Python's ``re`` shares."""
    kind = draw(st.sampled_from(["lit", "class", "dot", "seq", "alt", "rep"] if depth < 3 else ["lit", "class"]))
    if kind == "lit":
        return re.escape(draw(st.text(alphabet=ALPHABET, min_size=1, max_size=2)))
    if kind == "class":
        chars = "".join(sorted(draw(st.sets(st.sampled_from(ALPHABET), min_size=1, max_size=2))))
        return f"[{'^' if draw(st.booleans()) else ''}{chars}]"
    if kind == "dot":
        return "."
    if kind in ("seq", "alt"):
        a, b = draw(pattern(depth + 1)), draw(pattern(depth + 1))
        return f"(?:{a}{b})" if kind == "seq" else f"(?:{a}|{b})"
    op = draw(st.sampled_from(["*", "+", "?", "{1,2}", "{2}", "{0,3}"]))
    return f"(?:{draw(pattern(depth + 1))}){op}"


def dfa(p: str, anchored: bool):
    return minimize(from_expr(regex_to_expr(p, anchored=anchored)))


def py_matches(p: str, s: str, anchored: bool) -> bool:
    # ECMAScript ``.`` excludes \n \r U+2028 U+2029; only \n occurs in these texts, as in Python
    return bool(re.fullmatch(p, s) if anchored else re.search(p, s))


@settings(max_examples=120, deadline=None)
@given(p=pattern(), anchored=st.booleans(), texts=st.lists(TEXTS, min_size=1, max_size=10))
def test_dfa_agrees_with_re(p, anchored, texts):
    d = dfa(p, anchored)
    for s in texts:
        assert d.matches(s) == py_matches(p, s, anchored), (p, anchored, s)


@settings(max_examples=80, deadline=None)
@given(p=pattern(), q=pattern(), texts=st.lists(TEXTS, min_size=1, max_size=10))
def test_set_operations_follow_the_laws(p, q, texts):
    a, b = dfa(p, False), dfa(q, True)
    both, either, diff, not_a = a.intersect(b), a.union(b), a.minus(b), a.complement()
    for s in texts:
        x, y = a.matches(s), b.matches(s)
        assert both.matches(s) == (x and y)
        assert either.matches(s) == (x or y)
        assert diff.matches(s) == (x and not y)
        assert not_a.matches(s) == (not x)
    assert a.intersect(not_a).is_empty()
    assert not_a.complement().union(a).minus(a).is_empty()       # not not A = A
    assert minimize(both).matches("") == both.matches("")


def test_minimize_gives_the_smallest_automaton():
    assert len(dfa("(?:a|b)*abb", True)) == 4
    assert len(dfa("a", False).complement()) == 1      # "no a": one looping state
    assert dfa("a|b|[ab]", True).is_empty() is False
    assert dfa("[^\\s\\S]", True).is_empty()


def test_literal_sets_and_length_ranges():
    names = literal_set(["foo", "fo", "bar"])
    assert [names.matches(s) for s in ("foo", "fo", "f", "bar", "barr")] == [True, True, False, True, False]
    lengths = length_range_dfa(2, 3)
    assert [lengths.matches("\U0001F600" * n) for n in range(5)] == [False, False, True, True, False]
    assert length_range_dfa(1, None).matches("abcdef") and not length_range_dfa(1, None).matches("")


def test_state_limit_raises():
    # ".*a.{12}" needs 2^13 states: the subset construction must stop, not hang
    with pytest.raises(AutomatonTooLarge):
        from_expr(regex_to_expr("a.{12}", anchored=False), limit=500)


def _grammar(d) -> Grammar:
    rules = Rules()
    js = JsonText(rules)
    root = rules.reserve("root")
    body = dfa_to_expr(d, js, "s", Literal('"'))
    rules.define(root, cat(Literal('"'), body))
    return Grammar(tidy_rules(rules.rules))


@settings(max_examples=40, deadline=None)
@given(p=pattern(), q=pattern(), texts=st.lists(TEXTS, min_size=1, max_size=6))
def test_grammar_of_an_automaton_accepts_its_language_in_every_spelling(p, q, texts):
    d = dfa(p, False).minus(dfa(q, True))
    if d.is_empty():
        return
    g = _grammar(d)
    for s in texts:
        for text in (json.dumps(s), json.dumps(s, ensure_ascii=False)):
            assert g.matches(text) == d.matches(s), (p, q, text)


def test_long_chains_are_split_into_rules_up_to_a_limit():
    g = _grammar(dfa("a{100}", True))
    assert g.matches(json.dumps("a" * 100)) and not g.matches(json.dumps("a" * 99))
    with pytest.raises(AutomatonTooLarge):     # the engine would nest 200 inlined rules
        _grammar(dfa("a{200}", True))
