"""Property tests: on random regular grammars, ``matches`` agrees with Python's ``re``."""
from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from halter import Grammar

ALPHABET = "abé"


@st.composite
def regular(draw, depth=0):
    """A random expression as (gbnf, python regex) over a tiny alphabet."""
    kind = draw(st.sampled_from(["lit", "class", "seq", "alt", "rep"] if depth < 3 else ["lit", "class"]))
    if kind == "lit":
        s = draw(st.text(alphabet=ALPHABET, min_size=1, max_size=3))
        return f'"{s}"', re.escape(s)
    if kind == "class":
        chars = draw(st.sets(st.sampled_from(ALPHABET), min_size=1, max_size=2))
        neg = draw(st.booleans())
        body = "".join(sorted(chars))
        return f"[{'^' if neg else ''}{body}]", f"[{'^' if neg else ''}{re.escape(body)}]"
    if kind == "seq":
        a, b = draw(regular(depth + 1)), draw(regular(depth + 1))
        return f"({a[0]} {b[0]})", f"(?:{a[1]}{b[1]})"
    if kind == "alt":
        a, b = draw(regular(depth + 1)), draw(regular(depth + 1))
        return f"({a[0]} | {b[0]})", f"(?:{a[1]}|{b[1]})"
    inner = draw(regular(depth + 1))
    op = draw(st.sampled_from(["*", "+", "?", "{1,2}", "{2}", "{0,3}"]))
    return f"({inner[0]}){op}", f"(?:{inner[1]}){op}"


@settings(max_examples=150, deadline=None)
@given(expr=regular(), texts=st.lists(st.text(alphabet=ALPHABET + "x", max_size=6), min_size=1, max_size=8))
def test_matches_agrees_with_re(expr, texts):
    gbnf, pattern = expr
    g = Grammar.from_gbnf(f"root ::= {gbnf}")
    rx = re.compile(pattern, re.DOTALL)
    for t in texts:
        assert g.matches(t) == bool(rx.fullmatch(t)), (gbnf, pattern, t)


@settings(max_examples=60, deadline=None)
@given(expr=regular(), text=st.text(alphabet=ALPHABET, max_size=8))
def test_rule_split_grammar_agrees_with_re(expr, text):
    """The same language through a rule reference and a left-recursive wrapper."""
    gbnf, pattern = expr
    g = Grammar.from_gbnf(f"root ::= r\nr ::= {gbnf}")
    assert g.matches(text) == bool(re.fullmatch(pattern, text, re.DOTALL))
    star = Grammar.from_gbnf(f"root ::= root r | \"\"\nr ::= {gbnf}")
    assert star.matches(text) == bool(re.fullmatch(f"(?:{pattern})*", text, re.DOTALL))
