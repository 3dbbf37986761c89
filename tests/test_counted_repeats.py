"""Bounded repeats whose body is called as a rule per count (``halter/grammar/repeats.py``): the count
must stay exact, at the minimum and the maximum, for characters of one byte and of several (a
multi-byte UTF-8 character or an escape is one count), and for tokens that cross the repeat's exit.
Masks are checked in full against feeding each token alone, on a vocabulary of all short strings
over the grammar's alphabet (partial UTF-8 characters included).
"""
from __future__ import annotations

import numpy as np
import pytest

from halter import Grammar
from halter.grammar.compiled import CompiledGrammar
from tests.test_mask_escapes import alphabet_vocab, check_walks

E = "\u00e9"                    # é: two UTF-8 bytes, one character
COUNTED = 'root ::= "<" c{3,9} ">"\nc ::= [a-b] | "' + E + '" | "\\\\" [ab]'


def _split(g: Grammar) -> bool:
    return any("--repeat-" in n for n in g._automata.rule_names)


def test_a_long_bounded_repeat_keeps_one_position_per_count():
    g = Grammar.from_gbnf(COUNTED)
    assert _split(g)
    whole = Grammar.from_gbnf('root ::= "<" c{3,9} ">"\nc ::= [a-b]')     # nothing to split
    assert g._automata.n_positions <= whole._automata.n_positions + 8


@pytest.mark.parametrize("unit", ["a", E, "\\b"])
def test_counts_are_exact_at_both_bounds(unit):
    g = Grammar.from_gbnf(COUNTED)
    for n in range(0, 12):
        assert g.matches("<" + unit * n + ">") == (3 <= n <= 9), (unit, n)


def test_mixed_characters_count_one_each():
    g = Grammar.from_gbnf(COUNTED)
    assert g.matches("<a" + E + "\\a>")
    assert g.matches("<" + (E + "a\\b") * 3 + ">")             # 9
    assert not g.matches("<" + (E + "a\\b") * 3 + "a>")        # 10
    assert not g.matches("<" + E + "\\>")                        # a lone backslash is no character


def _feed(cg, text: bytes):
    m = cg.matcher()
    for b in text:                     # one byte per token: every count is reached as a state
        assert m.accept_token(b), text
    return m


def _check_mask(cg, m) -> None:
    mask = m.allowed_mask()
    expected = np.array([m.copy().accept_token(t) for t in range(cg.vocab_size)])
    bad = np.flatnonzero(mask != expected)
    assert not len(bad), [(cg.vocab.token_bytes[t], bool(mask[t])) for t in bad[:10]]


@pytest.fixture(scope="module")
def counted_vocab():
    return alphabet_vocab(b"ab\\<>" + E.encode(), max_len=3)


@pytest.mark.parametrize("kernel", [True, False], ids=["compiled-walk", "numpy-walk"])
def test_masks_at_every_count_match_feeding_each_token(counted_vocab, kernel):
    """At 0..9 characters read (and mid-character, mid-escape) the mask allows exactly the tokens
    that can be read: none past the maximum, the closing ``>`` (alone or ending a token such as
    ``a>`` or ``é>``) only from the minimum on."""
    cg = CompiledGrammar(Grammar.from_gbnf(COUNTED), counted_vocab, cache=False)   # tables of its own
    cg.use_kernel = kernel
    for unit in (b"a", E.encode(), b"\\a"):
        for n in range(0, 10):
            prefix = b"<" + unit * n
            _check_mask(cg, _feed(cg, prefix))
            if n < 9:
                _check_mask(cg, _feed(cg, prefix + unit[:1]))  # inside a character (or just after one)
    allowed_gt = [n for n in range(10) if _feed(cg, b"<" + b"a" * n).copy().accept_token(ord(">"))]
    assert allowed_gt == list(range(3, 10))


def test_random_walks_over_counted_repeats_match_brute_force(counted_vocab):
    assert check_walks(Grammar.from_gbnf(COUNTED), counted_vocab, seeds=4, steps=20) == 80


def test_counted_json_strings_match_brute_force():
    """A schema string's bounds count characters (``é`` and ``\\n`` one each), and tokens may run
    past the closing quote into the rest of the object."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 10}},
              "required": ["s"], "additionalProperties": False}
    g = Grammar.from_json_schema(schema)
    assert _split(g)
    for n in range(0, 13):
        for unit in ("a", E, "\\n"):
            assert g.matches('{"s":"' + unit * n + '"}') == (2 <= n <= 10), (unit, n)
    vocab = alphabet_vocab(b'an"{}:s\\' + E.encode(), max_len=3)
    assert check_walks(g, vocab, seeds=3, steps=25) == 75
