"""GBNF parsing: every construct, normalized printing, and the catalogue of error messages."""
from __future__ import annotations

import pytest

from halter import Grammar, GrammarError
from halter.grammar.ast import CharClass, Literal, Repeat, RuleRef, TokenRef
from halter.grammar.gbnf_parser import parse_gbnf

# (grammar text, expected normalized GBNF)
grammar__normalized = [
    ('root ::= "a" | "b"', 'root ::= "a" | "b"\n'),
    ('root ::= ("a" "b")* [c-e]+ .? x{2} x{2,} x{2,5} x{0,3}\nx ::= "x"',
     'root ::= ("a" "b")* [c-e]+ .? x{2} x{2,} x{2,5} x{0,3}\nx ::= "x"\n'),
    ('root ::= "a"+? "b"*+ "c"{2}{3}', 'root ::= ("a"+)? ("b"*)+ ("c"{2}){3}\n'),   # stacked: nested
    ('root ::= (("a")?)?', 'root ::= ("a"?)?\n'),
    ('root ::= "a"\r\nb ::= "b"\r\n', 'root ::= "a"\nb ::= "b"\n'),
    ('root ::= [a^] [^^]', 'root ::= [a^] [^^]\n'),
    ('root ::= [^"\\\\\\n]', 'root ::= [^"\\\\\\n]\n'),
    ('# comment\nroot ::= "a" # trailing\n  # more\n', 'root ::= "a"\n'),
    ('root ::= "a" |\n  "b"', 'root ::= "a" | "b"\n'),
    ('root ::=\n  "a"', 'root ::= "a"\n'),
    ('root ::= (\n  "a"\n  | "b"\n)', 'root ::= "a" | "b"\n'),
    ('root ::= "\\x41\\u00e9\\U0001F600\\t\\r\\n\\"\\\\"', 'root ::= "Aé😀\\t\\r\\n\\"\\\\"\n'),
    ('root ::= <[12]> !<[3]> <think> !<eot>', 'root ::= <[12]> !<[3]> <think> !<eot>\n'),
    ('root ::= ""', 'root ::= ""\n'),
    ('root ::= "é漢" [à-ÿ]', 'root ::= "é漢" [à-ÿ]\n'),
    ('root ::= [a\\-z]', 'root ::= [a\\-z]\n'),
]


@pytest.mark.parametrize("text,expected", grammar__normalized)
def test_printing_gives_normalized_gbnf(text, expected):
    g = Grammar.from_gbnf(text)
    assert str(g) == expected
    assert str(Grammar.from_gbnf(str(g))) == expected       # printing is a fixed point


def test_syntax_tree_of_constructs():
    rs = parse_gbnf('root ::= "ab" [^a-c] x* <[5]>\nx ::= "x"')
    body = rs.rules["root"]
    assert body.items[0] == Literal("ab")
    assert body.items[1] == CharClass(((ord("a"), ord("c")),), negated=True)
    assert body.items[2] == Repeat(RuleRef("x"), 0, None)
    assert body.items[3] == TokenRef(token_id=5)
    assert rs.positions["x"] == (2, 1)


# (bad grammar, message fragment, line, column)
bad_grammar__message__line__column = [
    ("", "empty grammar", 1, 1),
    ("# only a comment\n", "empty grammar", 1, 1),
    ('root ::= "abc', "unterminated string literal", 1, 10),
    ("root ::= [abc", "unterminated character class", 1, 10),
    ("root ::= foo", "undefined rule 'foo' (used in rule 'root')", 1, 10),
    ('root ::= x\nx ::= "a" y', "undefined rule 'y' (used in rule 'x')", 2, 11),
    ('start ::= "a"', "missing root rule", 1, 1),
    ('root ::= "\\q"', "bad escape '\\q'", 1, 11),
    ('root ::= "\\\'"', "bad escape", 1, 11),
    ('root ::= [\\^]', "bad escape", 1, 11),
    ('root ::= "\\/"', "bad escape", 1, 11),
    ('root ::= "\\0"', "bad escape", 1, 11),
    ('root ::= "a"{,3}', "'{,n}' is not GBNF", 1, 13),
    ('root ::= my_rule\nmy_rule ::= "a"', "cannot contain '_'", 1, 12),
    ('root ::= "a"{2001}', "above llama.cpp's limit", 1, 13),
    ('root ::= "a"{50}{50}', "too large for llama.cpp", 1, 17),
    ('root ::= ""*', "matches only the empty string", 1, 12),
    ('root ::= "\\x4"', "expected 2 hex digits", 1, 11),
    ('root ::= [\\u12]', "expected 4 hex digits", 1, 11),
    ('root ::= "a"{3,1}', "reversed repetition bounds", 1, 13),
    ('root ::= "a"{x}', "bad repetition bounds", 1, 13),
    ('root ::= "a"{,}', "bad repetition bounds", 1, 13),
    ('root ::= "a"\n| "b"', "'|' at the start of a line", 2, 1),
    ('root ::= ("a"', "unclosed '('", 1, 14),
    ('root ::= "a")', "unbalanced ')'", 1, 13),
    ('root "a"', "expected '::='", 1, 6),
    ("root ::= @", "unexpected character '@'", 1, 10),
    ("root ::= *", "has nothing to repeat", 1, 10),
    ('root ::= <[x]>', "bad token id", 1, 10),
    ('root ::= root "a"', "can never match", 1, 1),
]


@pytest.mark.parametrize("text,message,line,column", bad_grammar__message__line__column)
def test_errors_name_the_problem_and_where(text, message, line, column):
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf(text)
    err = info.value
    assert isinstance(err, ValueError)
    assert message in str(err)
    assert (err.line, err.column) == (line, column)


def test_error_context_shows_a_caret():
    with pytest.raises(GrammarError) as info:
        Grammar.from_gbnf('root ::= "a"\nfoo ::= "b" @')
    assert info.value.context.splitlines()[1].index("^") == info.value.context.splitlines()[0].index("@")


def test_non_string_input_is_a_type_error():
    with pytest.raises(TypeError):
        Grammar.from_gbnf(b'root ::= "a"')


def test_custom_root():
    g = Grammar.from_gbnf('a ::= "x" b\nb ::= "y"', root="a")
    assert g.matches("xy") and not g.matches("y")


def test_token_refs_cannot_be_matched_by_text():
    g = Grammar.from_gbnf("root ::= <[5]> | \"a\"")
    with pytest.raises(GrammarError, match="token references"):
        g.matcher()


def test_caret_context_shows_the_right_line_with_odd_line_breaks():
    # \u2028 and form feeds do not end GBNF lines; a lone CR does
    for text, line in (('root ::= "\u2028" @', 1), ('root ::= "\f" "a"\nx ::= @', 2), ('root ::= "a"\rx ::= @', 2)):
        with pytest.raises(GrammarError) as info:
            Grammar.from_gbnf(text)
        err = info.value
        assert err.line == line
        src, caret = err.context.splitlines()
        assert "@" in src and caret.index("^") == src.index("@")
