"""Regex -> GBNF: the grammar matches exactly what ECMAScript/Python full-matching accepts."""
from __future__ import annotations

import json
import random
import re

import pytest

from halter.errors import GrammarError, SchemaError, UnsupportedSchemaError
from halter.grammar import Grammar
from halter.schemas import RegexError, UnsupportedRegexError, regex_to_gbnf
from halter.schemas.regex import regex_to_expr
from halter.grammar.random_text import random_text

# (pattern, strings to try); the expected answer comes from Python's re, whose semantics agree
# with ECMAScript on these patterns
PATTERNS = [
    (r"[a-c]+x?", ["a", "abcx", "x", "", "abcxx", "d"]),
    (r"\d{3}-\d{2,4}", ["123-45", "123-4567", "12-45", "123-45678", "abc-12"]),
    (r"(?:ab|cd)*e", ["e", "abe", "abcdabe", "ace", "ab"]),
    (r"(?P<y>\d{4})-(?<m>0[1-9]|1[0-2])", ["2024-01", "2024-13", "24-01"]),
    (r"[^\s,]+,\w*", ["a,b_1", "a b,c", ",x", "é,"]),
    (r"\u00e9\x41\.", ["éA.", "éAx", "eA."]),
    (r"a{2}b{1,}c{,3}", ["aab", "aabbb", "ab", "aabc{,3}"]),
    (r"x+?y??z*?", ["xz", "xxyzz", "y"]),
    (r"[\]\-]+|\\", ["]-]", "\\", "a"]),
    (r"^abc$", ["abc", "abcd"]),
]


@pytest.mark.parametrize("pattern,samples", PATTERNS, ids=[p for p, _ in PATTERNS])
def test_regex_grammar_matches_like_fullmatch(pattern, samples):
    g = Grammar.from_gbnf(regex_to_gbnf(pattern))
    py = pattern.replace("(?<m>", "(?P<m>").replace("{,3}", r"\{,3\}")
    for s in samples:
        assert g.matches(s) == bool(re.fullmatch(py, s)), s


@pytest.mark.parametrize("pattern,samples", PATTERNS, ids=[p for p, _ in PATTERNS])
def test_random_strings_of_the_regex_grammar_match(pattern, samples):
    rules = {"root": regex_to_expr(pattern)}
    py = pattern.replace("(?<m>", "(?P<m>").replace("{,3}", r"\{,3\}")
    rng = random.Random(7)
    for _ in range(30):
        s = random_text(rules, "root", rng)
        assert re.fullmatch(py, s), s


def test_unanchored_patterns_match_anywhere():
    g = Grammar.from_gbnf(regex_to_gbnf("b+c", anchored=False))
    assert g.matches("abbcd") and g.matches("bc") and not g.matches("acb")
    g = Grammar.from_gbnf(regex_to_gbnf("^ab|cd$", anchored=False))
    assert g.matches("abzz") and g.matches("zzcd") and not g.matches("zabz")


def test_dot_excludes_line_terminators():
    g = Grammar.from_gbnf(regex_to_gbnf("a.c"))
    assert g.matches("abc") and g.matches("aéc")
    assert not g.matches("a\nc") and not g.matches("a\u2028c")


# anchors anywhere: ^ holds at offset 0 and $ at the end, wherever they stand (Python's re agrees
# with ECMAScript on texts without a newline, which is what is drawn here)
INNER_ANCHORS = [r"a^b", r"(a|^)b", r"a$[0-9]*", r"(?:^)?x", r"(^a|b)+x", r"x(^|,)a", r"(,|^)a", r"(a$)+",
                 r"(^a)*b", r"(a|$)(b|$)", r"^(a|b$)*$", r"(^|a)(b|$)", r"((^|,)a)*(x|$)", r"(^a){2}", r"(a|^){0,2}b",
                 r"(?:$|a)+b", r"(?:^){3}a", r"b(?:a|$){2,}"]


@pytest.mark.parametrize("pattern", INNER_ANCHORS)
def test_anchors_anywhere_mean_what_python_re_means(pattern):
    import itertools
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            search = Grammar.from_json_schema({"type": "string", "pattern": pattern})
        except SchemaError as e:                   # nothing matches: the schema accepts no value
            assert "accepts no value" in str(e)
            search = None
    whole = Grammar.from_gbnf(regex_to_gbnf(pattern)) if search is not None else None
    for n in range(5):
        for chars in itertools.product("abx,", repeat=n):
            text = "".join(chars)
            found = re.search(pattern, text) is not None
            if search is None:
                assert not found, (pattern, text)
                continue
            assert search.matches(json.dumps(text)) == found, (pattern, text)
            assert whole.matches(text) == (re.fullmatch(pattern, text) is not None), (pattern, text)


@pytest.mark.parametrize("pattern,message", [
    (r"(a)\1", "backreferences"),
    (r"a(?=b)", "lookaround"),
    (r"a(?<!b)", "lookaround"),
    (r"\bword", "word boundaries"),
    (r"\p{Script=Greek}", "Unicode property"),
    (r"(?i)abc", "inline flags"),
    ("(?:^){17}a", "more than 16 copies"),          # a repeated anchor is spelled as its copies
    (r"\ud83d\u{de00}", "lone surrogate"),
    pytest.param("(?:" * 300 + "a" + ")" * 300, "nested more than", id="deep-nesting"),  # no RecursionError
])
def test_unsupported_constructs_raise(pattern, message):
    with pytest.raises(UnsupportedRegexError, match=message) as err:
        regex_to_gbnf(pattern)
    assert isinstance(err.value, UnsupportedSchemaError)


@pytest.mark.parametrize("pattern,message", [
    ("(ab", "missing '\\)'"), ("ab)", "unbalanced"), ("[z-a]", "out of order"), ("a**", "nothing to repeat"),
    ("*a", "nothing to repeat"), ("a{3,2}", "out of order"), ("\\", "backslash"), ("[ab", "unterminated"),
    # \u{...} takes hex digits only (Python's int() would also read "-1", "0x41", "4_1", " 41")
    (r"\u{-1}", "bad"), (r"[\u{-1}]", "bad"), (r"\u{0x41}", "bad"), (r"\u{4_1}", "bad"), (r"\u{ 41}", "bad"),
    ("\\\u00b2", "unknown escape"),               # a superscript two is no backreference
])
def test_malformed_regex_raises_with_position(pattern, message):
    with pytest.raises(RegexError, match=message) as err:
        regex_to_gbnf(pattern)
    assert isinstance(err.value, SchemaError)
    assert 0 <= err.value.position <= len(pattern)


def test_schema_pattern_errors_carry_the_json_pointer():
    from halter.schemas import json_schema_to_gbnf
    with pytest.raises(UnsupportedSchemaError) as err:
        json_schema_to_gbnf({"properties": {"p": {"type": "string", "pattern": "(a)\\1"}}}, strict=True)
    assert err.value.pointer == "#/properties/p" and err.value.keyword == "pattern"


@pytest.mark.parametrize("pattern,yes,no", [
    (r"^\p{L}+$", ["abc", "Ωé", "日本"], ["a1", "", "a b"]),
    (r"^\p{Letter}\p{Nd}$", ["a1", "é٣"], ["11", "aa"]),
    (r"^\p{Lu}\p{Lowercase_Letter}$", ["Ab", "Éé"], ["ab", "AB"]),
    (r"^\P{L}$", ["1", " ", "😀"], ["a", "Ω"]),
    (r"^[\p{digit}x]+$", ["12x", "x"], ["a"]),
    (r"^\p{gc=Zs}\p{General_Category=punct}$", [" !", "\u3000."], ["a!", "  "]),
    (r"^\p{ASCII}\p{Any}\p{Assigned}$", ["a😀b"], ["éab"]),
])
def test_unicode_property_escapes(pattern, yes, no):
    g = Grammar.from_gbnf(regex_to_gbnf(pattern))
    for s in yes:
        assert g.matches(s), s
    for s in no:
        assert not g.matches(s), s


def test_unknown_unicode_property_is_malformed():
    with pytest.raises(RegexError, match="unknown Unicode property") as err:
        regex_to_gbnf(r"\p{letter}")
    assert not isinstance(err.value, UnsupportedRegexError)
    with pytest.raises(RegexError, match="followed by"):
        regex_to_gbnf(r"\pL")


def test_a_regex_whose_automaton_explodes_is_built_with_a_rule_per_group():
    # "an a 16 characters from the end": one DFA for the whole pattern needs 2^16 states (past the
    # engine's 50,000), so from_regex builds (a|b) as a rule of its own and lets the parser track it
    pattern = r"(a|b)*a(a|b){15}"
    assert Grammar.from_gbnf(regex_to_gbnf(pattern)).matches("b" + "a" * 16)   # (the GBNF rule is split)
    g = Grammar.from_regex(pattern)
    assert "group-" in regex_to_gbnf(pattern, split_groups=True)
    rng = random.Random(4)
    for _ in range(300):
        text = "".join(rng.choice("ab") for _ in range(rng.randint(14, 24)))
        assert g.matches(text) == (re.fullmatch(pattern, text) is not None), text


def test_quantifier_counts_are_ascii_digits():
    # str.isdigit() takes "²" and Arabic-Indic digits; as counts they made int() fail or matched
    # "a{١}" as "a"
    g = Grammar.from_regex("a{\u0661}")
    assert g.matches("a{\u0661}") and not g.matches("a")
    assert Grammar.from_regex("a{\u00b2}").matches("a{\u00b2}")
    assert Grammar.from_regex("a{1,2}").matches("aa")


@pytest.mark.parametrize("pattern,alphabet", [
    ("a.{0,12}b", "abx"),               # unanchored: ".*a.{0,12}b" needs 2^13 DFA states
    ("(a|b)*a(a|b){15}", "ab"),         # a schema's pattern retried with rules (RuleTooComplex)
], ids=["unanchored-window", "nested-repeats"])
def test_schema_patterns_too_large_for_one_automaton_are_spelled_with_rules(pattern, alphabet):
    g = Grammar.from_json_schema({"type": "string", "pattern": pattern}, strict=True)
    rng = random.Random(7)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(300)]
    texts += ["a" + "x" * 12 + "b", "a" + "x" * 13 + "b", "xxab", "ba"]
    for text in texts:
        expected = re.search(pattern, text) is not None
        assert g.matches(json.dumps(text)) == expected, text
    assert any(re.search(pattern, t) for t in texts) and not all(re.search(pattern, t) for t in texts)


def test_a_regex_matching_nothing_says_so():
    with pytest.raises(GrammarError, match="the regex 'a\\[\\]b' matches no string"):
        Grammar.from_regex("a[]b")
    with pytest.raises(SchemaError, match="accepts no value"):
        Grammar.from_json_schema({"type": "string", "pattern": "[]"})
