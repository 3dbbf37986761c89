"""Left recursion through empty prefixes: found on syntax trees, and warned about in JSON Schemas,
whose ``$ref`` cycles that read nothing JSON Schema leaves undefined."""
from __future__ import annotations

import warnings

import jsonschema
import pytest

from halter import Grammar
from halter.errors import SchemaWarning
from halter.grammar.gbnf_parser import parse_gbnf
from halter.grammar.left_recursion import left_recursive_rules, nullable_rules


def _rules(text: str) -> dict:
    return parse_gbnf(text).rules


@pytest.mark.parametrize("text, cycles", [
    ('root ::= a\na ::= a "x" | "y"', [["a"]]),
    ('root ::= a\na ::= "x"? a "y" | "z"', [["a"]]),                   # through an optional prefix
    ('root ::= a\na ::= b "x" | "y"\nb ::= e a\ne ::= "" | "q"', [["a", "b"]]),  # through an empty rule
    ('root ::= a\na ::= "x" a | "y"', []),                               # reads "x" first
    ('root ::= a\na ::= ("x" | "") "w" a | "y"', []),                    # "w" is always read first
    ('root ::= root', [["root"]]),
])
def test_cycles_that_read_nothing_are_found(text: str, cycles: list) -> None:
    assert left_recursive_rules(_rules(text)) == cycles


def test_nullable_rules() -> None:
    rules = _rules('root ::= a b\na ::= "x"*\nb ::= a a | "y"\nc ::= "z" a')
    assert nullable_rules(rules) == {"root", "a", "b"}


def test_a_chain_of_thousands_of_rules() -> None:
    n = 3000
    text = "root ::= r0\n" + "".join(f'r{i} ::= r{i + 1} | "x"\n' for i in range(n)) + f"r{n} ::= r0\n"
    cycles = left_recursive_rules(_rules(text))
    assert len(cycles) == 1 and len(cycles[0]) == n + 1


def _convert(schema: dict) -> tuple[Grammar, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = Grammar.from_json_schema(schema, whitespace="compact")
    return g, [str(w.message) for w in caught if issubclass(w.category, SchemaWarning)]


def _jsonschema_recurses(schema: dict, instance: object) -> bool:
    try:
        jsonschema.Draft202012Validator(schema).is_valid(instance)
    except RecursionError:
        return True
    return False


@pytest.mark.parametrize("schema, accepted, refused, where", [
    ({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "integer"}]}}, "$ref": "#/$defs/a"},
     ["1"], ['"s"', "null"], "#/$defs/a"),
    ({"$defs": {"d": {"$ref": "#/$defs/d"}}, "anyOf": [{"$ref": "#/$defs/d"}, {"type": "null"}]},
     ["null"], ["1"], "#/$defs/d"),
    ({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "integer"}]},
                "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "string"}]}}, "$ref": "#/$defs/a"},
     ["1", '"s"'], ["null"], "#/$defs/b"),
    ({"anyOf": [{"$ref": "#"}, {"type": "boolean"}]}, ["true"], ["1"], "#"),
])
def test_a_ref_cycle_that_reads_nothing_is_warned_about(schema, accepted, refused, where) -> None:
    g, said = _convert(schema)
    assert len(said) == 1 and where in said[0] and "undefined" in said[0]
    assert all(g.matches(t) for t in accepted) and not any(g.matches(t) for t in refused)
    assert _jsonschema_recurses(schema, 1)          # what "undefined" means in practice
    _, again = _convert(schema)                     # a cache hit warns again
    assert again == said


@pytest.mark.parametrize("schema", [
    {"properties": {"x": {"$ref": "#"}}},                                          # reads "{" first
    {"$defs": {"t": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "$ref": "#/$defs/t"},
    {"$defs": {"n": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}]}},
     "$ref": "#/$defs/n"},
])
def test_recursion_through_values_is_not_warned_about(schema) -> None:
    assert _convert(schema)[1] == []


def _nullable_map(e, empty_rules: set[str]) -> dict[int, bool]:
    """The reference: ``id(sub-expression) -> whether it can match ""`` for every sub-expression,
    bottom up."""
    from halter.grammar.ast import Alt, Literal, Repeat, RuleRef, Seq, children
    out: dict[int, bool] = {}
    stack = [e]
    while stack:
        x = stack[-1]
        if id(x) in out:
            stack.pop()
            continue
        kids = children(x)
        pending = [k for k in kids if id(k) not in out]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if isinstance(x, Literal):
            out[id(x)] = x.text == ""
        elif isinstance(x, RuleRef):
            out[id(x)] = x.name in empty_rules
        elif isinstance(x, Seq):
            out[id(x)] = all(out[id(k)] for k in kids)
        elif isinstance(x, Alt):
            out[id(x)] = any(out[id(k)] for k in kids)
        elif isinstance(x, Repeat):
            out[id(x)] = x.min == 0 or out[id(x.expr)]
        else:
            out[id(x)] = False
    return out


def test_the_short_circuit_nullability_agrees_with_the_full_map():
    import random

    from halter.grammar.ast import Alt, CharClass, Literal, Repeat, RuleRef, Seq
    from halter.grammar.left_recursion import _nullable
    rnd = random.Random(3)
    names = ["a", "b", "c", "d"]

    def gen(d):
        if d == 0 or rnd.random() < 0.3:
            return rnd.choice([Literal(""), Literal("x"), RuleRef(rnd.choice(names)), CharClass(((97, 98),)),
                               Repeat(Literal("y"), rnd.randint(0, 2), 3)])
        k = rnd.random()
        if k < 0.4:
            return Seq(tuple(gen(d - 1) for _ in range(rnd.randint(1, 4))))
        if k < 0.8:
            return Alt(tuple(gen(d - 1) for _ in range(rnd.randint(1, 4))))
        return Repeat(gen(d - 1), rnd.randint(0, 2), rnd.choice([None, 3]))
    answers = set()
    for _ in range(3000):
        e, empty = gen(rnd.randint(0, 6)), set(rnd.sample(names, rnd.randint(0, 4)))
        assert _nullable(e, empty) == _nullable_map(e, empty)[id(e)]
        answers.add(_nullable(e, empty))
    assert answers == {True, False}
    # one memo over many expressions built from shared parts (as over one grammar's rules)
    parts = [gen(rnd.randint(0, 4)) for _ in range(40)]
    empty = {"a", "c"}
    memo: dict[int, bool] = {}
    kept = []                                      # (the memo is by identity: all stay alive, as rules do)
    for _ in range(500):
        e = Seq(tuple(rnd.choice(parts) for _ in range(rnd.randint(1, 3)))) if rnd.random() < 0.5 \
            else Alt(tuple(rnd.choice(parts) for _ in range(rnd.randint(1, 3))))
        kept.append(e)
        assert _nullable(e, empty, memo) == _nullable_map(e, empty)[id(e)]
    shared = Seq((Literal(""),))                   # one object under two parents
    assert _nullable(Alt((Seq((shared, Literal("x"))), shared)), set())
