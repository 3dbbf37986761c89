"""Printing is a fixed point: ``Grammar.from_gbnf(str(g))`` reads back the same language and
prints the same text, for syntax trees GBNF text cannot spell directly too (nested repetitions,
counts above llama.cpp's 2000, empty items under a repetition)."""
from __future__ import annotations

import warnings

from hypothesis import given, settings
from hypothesis import strategies as st

from halter import Grammar
from halter.errors import GrammarError
from halter.grammar.ast import Alt, CharClass, Literal, Repeat, Seq
from halter.grammar.gbnf_format import format_grammar

leaf = st.one_of(st.sampled_from([Literal("a"), Literal("b"), Literal(""), Literal("^]"),
                                  CharClass(((ord("a"), ord("b")),)), CharClass(((ord("^"), ord("^")),)),
                                  CharClass((), True), CharClass(((ord("a"), ord("a")),), True)]))


def _tree(children):
    return st.one_of(
        st.tuples(children, children).map(lambda t: Seq(t)),
        st.tuples(children, children).map(lambda t: Alt(t)),
        st.tuples(children, st.sampled_from([(0, 1), (0, None), (1, None), (2, 2), (0, 3), (1, 2)])).map(lambda t: Repeat(t[0], *t[1])))


exprs = st.recursive(leaf, _tree, max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(expr=exprs, texts=st.lists(st.text(alphabet="ab^]", max_size=6), min_size=1, max_size=6))
def test_printing_is_a_fixed_point(expr, texts):
    try:
        g = Grammar({"root": expr})
    except GrammarError:            # (a tree that can never match)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = Grammar.from_gbnf(str(g))          # (a tree not written by the reader: normalised once)
        text = str(again)
        assert str(Grammar.from_gbnf(text)) == text
    for t in texts:
        assert again.matches(t) == g.matches(t), (text, t)


def test_nested_optional_keeps_its_parentheses():
    g = Grammar.from_gbnf('root ::= (("a")?)?')
    assert str(g) == 'root ::= ("a"?)?\n'
    assert str(Grammar.from_gbnf(str(g))) == str(g)


def test_counts_above_llama_cpp_limit_print_as_auxiliary_rules():
    text = format_grammar({"root": Repeat(Literal("a"), 4500, 9000)})
    assert "{4500" not in text and "{0,4500}" not in text
    g = Grammar.from_gbnf(text)
    assert [g.matches("a" * n) for n in (4499, 4500, 9000, 9001)] == [False, True, True, False]
