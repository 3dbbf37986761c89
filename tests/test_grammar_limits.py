"""Grammar input at and just over halter's limits: long rule chains and deep nesting build, match
and print back without exhausting Python's stack; past ``nesting_depth`` a ``LimitError`` names
the place; highly ambiguous grammars stop at the matching budget (``Limits.match_work``) with a
``LimitError`` while ordinary grammars stay far below it."""
from __future__ import annotations

import json
import warnings

import pytest

import halter.limits
from halter.errors import HalterError, LimitError
from halter.grammar import Grammar
from halter.grammar.contexts import WORK


def _chain(n: int, body: str, last: str = '"b"') -> str:
    """``root ::= r0``, ``r{i} ::= body(r{i+1})`` for i < n - 1, ``r{n-1} ::= last``."""
    lines = ["root ::= r0"] + [f"r{i} ::= " + body.format(next=f"r{i + 1}", i=i) for i in range(n - 1)]
    return "\n".join(lines + [f"r{n - 1} ::= {last}"])


CHAINS = {   # shape -> (rule body, a text it matches for n rules)
    "left": ('{next} "a"', lambda n: "b" + "a" * (n - 1)),
    "right": ('"a" {next}', lambda n: "a" * (n - 1) + "b"),
    "tail alternation": ('{next} | "a{i}"', lambda n: "b"),
    "optional": ('{next}? "a"', lambda n: "b" + "a" * (n - 1)),
    "grouped": ("(({next}))", lambda n: "b"),
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(CHAINS))
def test_chains_of_3000_rules_build_match_and_print_back(shape: str) -> None:
    body, text = CHAINS[shape]
    n = 3000
    g = Grammar.from_gbnf(_chain(n, body))
    assert g.matches(text(n))
    assert not g.matches(text(n) + "c")
    again = Grammar.from_gbnf(str(g))
    assert again.matches(text(n))
    assert str(again) == str(g)


def test_nested_repetitions_around_rule_calls_stay_linear() -> None:
    """``r ::= (("x" next)?)+`` chained: the inlining plan counts the two copies ``+`` emits, so
    expanding one rule into the next cannot double the automaton at every level."""
    g = Grammar.from_gbnf(_chain(24, '(("x" {next})?)+'))
    assert g._automata.n_positions < 2000
    assert g.matches("x" * 23 + "b")
    assert g.matches("xx")


@pytest.mark.parametrize("closer", [")+", "){2}", "){1,2}"])
def test_nested_doubling_repetitions_build_linearly(closer: str) -> None:
    """``+``, ``{2}`` and ``{1,2}`` each emit two copies of their body: 40 of them nested inside one
    rule would be 2^40 NFA states unrolled. The builder counts every copy and calls the levels
    below as a rule once unrolling grows large, so the automaton stays linear in the nesting."""
    g = Grammar.from_gbnf("root ::= " + "(" * 40 + '"a"' + closer * 40)
    assert g._automata.n_positions < 10_000
    assert not g.matches("") and not g.matches("b") and not g.matches("ab")
    if closer == "){2}":                       # exactly 2^40 a's: only prefixes can be checked
        m = g.matcher()
        assert m.accept_bytes(b"a" * 5000) and not m.is_accepting()
    else:        # (``{1,2}`` nested is ambiguous: parser work grows with the text, so a short one)
        assert g.matches("a") and g.matches("a" * (777 if closer == ")+" else 12))
    deep12 = Grammar.from_gbnf("root ::= " + "(" * 12 + '"a"' + "){2}" * 12)
    assert deep12.matches("a" * 4096)
    assert not deep12.matches("a" * 4095) and not deep12.matches("a" * 4097)


@pytest.mark.parametrize("closer", [")", ")*", ")?"])
def test_nesting_at_the_limit_and_just_over(closer: str) -> None:
    depth = halter.limits.LIMITS.nesting_depth
    g = Grammar.from_gbnf("root ::= " + "(" * depth + '"a"' + closer * depth)
    assert g.matches("a")
    assert Grammar.from_gbnf(str(g)).matches("a") == g.matches("a")
    with pytest.raises(LimitError) as err:
        Grammar.from_gbnf("root ::= " + "(" * (depth + 1) + '"a"' + closer * (depth + 1))
    assert err.value.limit == "nesting_depth"
    assert "line 1" in str(err.value)


AMBIGUOUS = 'root ::= s\ns ::= s s s | s s | "a" | ""'


def test_highly_ambiguous_grammar_hits_the_matching_budget() -> None:
    g = Grammar.from_gbnf(AMBIGUOUS)
    with pytest.raises(LimitError) as err:
        g.matches("a" * 400)
    assert isinstance(err.value, HalterError)
    assert err.value.limit == "match_work"
    assert "HALTER_LIMIT_MATCH_WORK" in str(err.value)
    m = g.matcher()                         # the matcher is unchanged by the refused call
    with pytest.raises(LimitError):
        m.accept_text("a" * 400)
    assert m.accept_text("aa") and m.is_accepting()


def test_the_matching_budget_can_be_raised() -> None:
    old = halter.limits.LIMITS.match_work
    halter.limits.set(match_work=10 ** 9)
    try:
        assert Grammar.from_gbnf(AMBIGUOUS).matches("a" * 120)
    finally:
        halter.limits.set(match_work=old)


def test_ordinary_grammars_stay_far_below_the_matching_budget() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Grammar.from_json_schema({"type": "object", "properties": {
            "a": {"type": "array", "items": {"type": "number"}}, "b": {"type": "string"},
            "c": {"anyOf": [{"type": "integer"}, {"type": "object"}]}}})
    doc = json.dumps({"a": [1, 2.5, -3e4] * 20, "b": "hello " * 50, "c": {"x": [1, {"y": None}]}}).encode()
    before = WORK.n
    assert g.matches(doc)
    assert (WORK.n - before) / len(doc) < halter.limits.LIMITS.match_work / 20
    chain = Grammar.from_gbnf(_chain(500, '{next} "a"'))
    before = WORK.n
    assert chain.matches("b" + "a" * 499)
    assert (WORK.n - before) / 500 < halter.limits.LIMITS.match_work / 20

