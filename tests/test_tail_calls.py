"""Tail calls: a rule called as its caller's last step returns where the caller does.

Loops written as right recursion (``more ::= "," item more | "}"``, how JSON-Schema objects and most
hand-written GBNF lists are spelled) must neither grow the parser's stack by a level per round nor
change the language.
"""
from __future__ import annotations

import itertools
import re

import pytest

from halter import Grammar

RIGHT_RECURSIVE_LIST = r'''
root ::= "{" ws (item more | "}")
more ::= "," ws item more | "}"
item ::= "a" | "bb" | "[" ws (item more-in | "]")
more-in ::= "," ws item more-in | "]"
ws ::= " "?
'''


def test_right_recursion_keeps_a_bounded_state_space():
    g = Grammar.from_gbnf(RIGHT_RECURSIVE_LIST)
    m = g.matcher()
    assert m.accept_text("{a")
    for _ in range(10):
        assert m.accept_text(", bb,a")
    n_states = len(g._space.nodes)
    for _ in range(300):                    # 600 more members: no new parser state after warm-up
        assert m.accept_text(", bb,a")
    assert len(g._space.nodes) == n_states
    assert not m.is_accepting()
    assert m.accept_text("}") and m.is_accepting()


def test_right_recursion_language_is_unchanged():
    g = Grammar.from_gbnf(RIGHT_RECURSIVE_LIST)
    ok = ["{}", "{a}", "{ a,bb}", "{a, []}", "{[a,[bb]], a}", "{[[[a]]]}", "{[ ]}"]
    bad = ["{", "{a", "{a,}", "{,a}", "{a bb}", "{[a}", "{[a]]}", "{a}}", "{b}", "{[,]}"]
    for text in ok:
        assert g.matches(text), text
    for text in bad:
        assert not g.matches(text), text


# tail calls mixed with ordinary calls of the same rule, nullable tails, mutual tail recursion
MIXED = {
    'root ::= r "!" | r\nr ::= "a" r | "b"': r"a*b!?",
    'root ::= x\nx ::= "a" y | ""\ny ::= "b" x': r"(?:ab)*",
    'root ::= x "c" | x\nx ::= "a" x?': r"a+c?",
    'root ::= "(" x ")" x\nx ::= "a" x | e\ne ::= "b"?': r"\(a*b?\)a*b?",
    'root ::= x x\nx ::= "a" | "b" x': r"(?:b*a){2}",
}


@pytest.mark.parametrize("gbnf", sorted(MIXED))
def test_tail_calls_agree_with_re_on_all_short_strings(gbnf):
    g = Grammar.from_gbnf(gbnf)
    pattern = re.compile(MIXED[gbnf])
    for n in range(7):
        for chars in itertools.product("abc!()", repeat=n):
            text = "".join(chars)
            assert g.matches(text) == bool(pattern.fullmatch(text)), (gbnf, text)
