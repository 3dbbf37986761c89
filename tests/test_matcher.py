"""The character matcher: constructs, Unicode and split UTF-8, left recursion, ambiguity, atomicity."""
from __future__ import annotations

import pytest

from halter import Grammar

# (grammar, inputs that match, inputs that do not)
grammar__accepted__rejected = [
    ('root ::= "abc"', ["abc"], ["", "ab", "abcd", "abd"]),
    ('root ::= "a" | "bc"', ["a", "bc"], ["b", "abc", ""]),
    ('root ::= [a-c]+', ["a", "abcabc"], ["", "d", "abd"]),
    ('root ::= [^a-c]', ["d", "é", "\n"], ["a", "", "dd"]),
    ("root ::= .", ["a", "漢", "😀"], ["", "ab"]),
    ('root ::= "x"*', ["", "x", "xxxx"], ["y"]),
    ('root ::= "x"?', ["", "x"], ["xx"]),
    ('root ::= "x"{3}', ["xxx"], ["xx", "xxxx"]),
    ('root ::= "x"{2,}', ["xx", "xxxxx"], ["x"]),
    ('root ::= "x"{1,3}', ["x", "xxx"], ["", "xxxx"]),
    ('root ::= "x"{0,2}', ["", "xx"], ["xxx"]),
    ('root ::= ("ab" | "c")+ "!"', ["ab!", "cabc!"], ["a!", "!"]),
    ('root ::= a b\na ::= "x" | ""\nb ::= "y"+', ["y", "xyy"], ["x", "xx"]),
    ('root ::= "é漢😀"', ["é漢😀"], ["e漢😀", "é漢"]),
    ('root ::= [à-ÿ]+', ["àéÿ"], ["a", "Ā"]),
    ('root ::= [😀-😂]', ["😁"], ["😃"]),
    ('root ::= "\\u00e9" [\\x41-\\x43]', ["éB"], ["éD"]),
    ('root ::= "(" root ")" | ""', ["", "()", "((()))"], ["(", "())"]),
    ('root ::= "[" (root ("," root)*)? "]"', ["[]", "[[],[[]]]"], ["[,]", "[[]"]),
]


@pytest.mark.parametrize("grammar,accepted,rejected", grammar__accepted__rejected)
def test_matches(grammar, accepted, rejected):
    g = Grammar.from_gbnf(grammar)
    for text in accepted:
        assert g.matches(text), text
    for text in rejected:
        assert not g.matches(text), text


def test_left_recursion_works():
    g = Grammar.from_gbnf('root ::= expr\nexpr ::= expr "+" term | expr "-" term | term\nterm ::= [0-9]+')
    assert g.matches("1+22-3")
    assert not g.matches("1+")
    indirect = Grammar.from_gbnf('root ::= a\na ::= b "x" | "y"\nb ::= a "z"')
    assert indirect.matches("y") and indirect.matches("yzx") and indirect.matches("yzxzx")
    assert not indirect.matches("yz")


def test_nullable_repetition_terminates():
    g = Grammar.from_gbnf('root ::= (x?)* "!"\nx ::= "a" | ""')
    assert g.matches("aaa!") and g.matches("!") and not g.matches("a")
    g2 = Grammar.from_gbnf('root ::= ("a"? "b"?)*')
    assert g2.matches("") and g2.matches("abba")


def test_ambiguous_grammars_keep_small_states():
    g = Grammar.from_gbnf('root ::= ("a" | "a" | "aa")*')
    assert g.matches("a" * 5000)
    assert len(g._space.nodes) < 20
    g2 = Grammar.from_gbnf("root ::= item*\nitem ::= " + " ".join(["x?"] * 50) + '\nx ::= "a"')
    assert g2.matches("a" * 3000)
    assert len(g2._space.nodes) < 500          # bounded by the grammar, not the input
    g3 = Grammar.from_gbnf("root ::= " + " ".join(["x?"] * 50) + '\nx ::= "a"')
    assert g3.matches("a" * 50) and not g3.matches("a" * 51)


def test_bytes_split_inside_a_character():
    g = Grammar.from_gbnf('root ::= "é" [漢字]')
    m = g.matcher()
    data = "é漢".encode()
    for b in data:
        assert m.accept_bytes(bytes([b]))
    assert m.is_accepting()


def test_invalid_utf8_is_rejected():
    g = Grammar.from_gbnf("root ::= .*")
    m = g.matcher()
    assert not m.accept_bytes(b"\xff")
    assert not m.accept_bytes(b"\xc3\x28")        # a lead byte followed by a non-continuation
    assert not m.accept_bytes(b"\xed\xa0\x80")    # a UTF-8-encoded surrogate
    assert not m.accept_bytes(b"\xc0\xaf")        # an overlong encoding
    assert m.accept_bytes("ok 😀".encode())


def test_accept_is_atomic_and_rollback_copy_reset():
    g = Grammar.from_gbnf('root ::= "abc" "def"')
    m = g.matcher()
    assert m.accept_text("ab")
    before = m.state_id
    assert not m.accept_text("cx")                 # 'c' would fit, 'x' not: nothing consumed
    assert m.state_id == before
    c = m.copy()
    assert m.accept_text("cdef") and m.is_accepting()
    assert not c.is_accepting() and c.accept_text("c")
    m.rollback(1)
    assert m.state_id == before and not m.is_accepting()
    m.reset()
    assert m.accept_text("abcdef") and m.is_accepting()
    with pytest.raises(ValueError):
        m.rollback(5)


def test_is_accepting_versus_can_continue():
    g = Grammar.from_gbnf('root ::= "a" "b"?')
    m = g.matcher()
    assert not m.is_accepting() and m.can_continue()
    m.accept_text("a")
    assert m.is_accepting() and m.can_continue()
    m.accept_text("b")
    assert m.is_accepting() and not m.can_continue()


def test_equal_states_share_one_canonical_id():
    g = Grammar.from_gbnf('root ::= ("x" | "y")*')
    a, b = g.matcher(), g.matcher()
    a.accept_text("xyx")
    b.accept_text("y")
    assert a.state_id == b.state_id


def test_matcher_names_say_what_they_match():
    """``grammar.matcher()`` is the character matcher, ``TextMatcher``; ``compile(vocab).matcher()`` the
    token matcher (XGrammar's ``GrammarMatcher``); the old name of the character matcher still imports,
    with a DeprecationWarning."""
    import halter
    from halter.grammar import TextMatcher
    g = Grammar.from_gbnf('root ::= "ab"')
    assert isinstance(g.matcher(), TextMatcher) and halter.TextMatcher is TextMatcher
    assert isinstance(g.compile(halter.Vocabulary.from_token_bytes([b"a", b"b"])).matcher(), halter.TokenMatcher)
    with pytest.warns(DeprecationWarning, match="TextMatcher"):
        assert halter.GrammarMatcher is TextMatcher
    with pytest.warns(DeprecationWarning, match="TokenMatcher"):
        from halter.grammar import GrammarMatcher
    assert GrammarMatcher is TextMatcher
    assert "GrammarMatcher" not in halter.__all__
