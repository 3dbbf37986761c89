"""Which rules the grammar compiler expands in place, and that expanding never changes the language."""
from __future__ import annotations

import re

from halter import Grammar
from halter.grammar.nfa import NfaBuilder

WS_GRAMMAR = r'''
root ::= "{" ws "a" ws ":" ws "1" ws "}"
ws ::= ([\t ] ws-blank | ws-nl)?
ws-blank ::= [\t ]{0,3}
ws-nl ::= "\r"? "\n" [\t ]{0,64}
'''


def _inlined(text: str) -> set[str]:
    builder = NfaBuilder(dict(Grammar.from_gbnf(text).rules))
    builder.plan_inlining("root")
    return builder.inline


def test_tiny_rule_calling_a_big_leaf_is_expanded_and_its_callees_stay_rules():
    """``ws`` is read inside its callers (a single space never leaves ``root``); the indentation
    branch, too big to copy at every use, stays one shared rule, and so does ``ws-blank``, which
    would make ``ws`` more than tiny."""
    inline = _inlined(WS_GRAMMAR)
    assert "ws" in inline
    assert "ws-nl" not in inline and "ws-blank" not in inline
    rule_names = Grammar.from_gbnf(WS_GRAMMAR)._automata.rule_names
    assert "ws" not in rule_names and "ws-nl" in rule_names


def test_expanding_ws_keeps_the_language():
    g = Grammar.from_gbnf(WS_GRAMMAR)
    ws = r"(?:[\t ]{1,4}|\r?\n[\t ]{0,64})?"
    pattern = re.compile(r"\{" + ws + "a" + ws + ":" + ws + "1" + ws + r"\}")
    samples = ["{a:1}", "{ a : 1 }", "{\ta:    1}", "{a:     1}", "{\n  a:1}", "{\r\n" + " " * 64 + "a:1}",
               "{\n" + " " * 65 + "a:1}", "{a:1 \n}", "{\n\na:1}", "{ \ta:1\t}", "{a :1}  "]
    for text in samples:
        assert g.matches(text) == bool(pattern.fullmatch(text)), repr(text)


def test_small_leaves_are_still_expanded_and_callers_of_big_rules_only_when_tiny():
    inline = _inlined(r'''
root ::= item ("," item)* ";" other
item ::= digit digit | long
other ::= "a longer literal prefix" digit | long
digit ::= [0-9]
long ::= "x" [a-z]{0,200}
''')
    assert "digit" in inline              # a small leaf
    assert "long" not in inline           # used twice and big
    assert "item" in inline               # tiny, its callees leaves
    assert "other" not in inline          # calls a big rule and is more than tiny


def test_a_rule_that_explodes_once_its_callees_are_expanded_is_built_without_expanding():
    # x is a tiny leaf, so it is normally expanded into root; here that makes root's automaton
    # "an a 16 characters from the end" (2^16 states, past the limit). The rules as written are
    # small, so the grammar must build: without expansion, the parser tracks x.
    g = Grammar.from_gbnf('root ::= x* "a" ' + "x " * 15 + '\nx ::= "a" | "b"\n')
    assert g.matches("b" + "a" + "b" * 15) and g.matches("a" * 16)
    assert not g.matches("a" + "b" * 16)


def test_wide_classes_are_not_copied_into_every_caller_past_the_budget():
    # \p{L} is ~2,200 UTF-8 states; 40 nested copies per rule over ~60 rules made a 25 s build.
    # Past the budget the class rule stays a rule (its callers call it); the language is the same.
    from halter.schemas import schema_to_rules
    schema = {"type": "string", "pattern": "\\p{L}{10}", "maxLength": 40}
    rules = dict(schema_to_rules(schema))
    builder = NfaBuilder(rules)
    builder.plan_inlining("root")
    wide = [n for n in rules if builder.size(rules[n]) < 20 and builder._size(rules[n], lambda r: 1, {}, True) > 1000]
    assert wide and not set(wide) & builder.inline, wide
    g = Grammar.from_json_schema(schema)
    for text, ok in [('"Größenwahnsinn"', True), ('"12 Größenwahnsinn über"', True), ('"Größenwahn"', True),
                     ('"Größenwah"', False), ('"ab cd ef gh ij kl"', False), ('"' + "ä" * 41 + '"', False),
                     ('"' + "ä" * 40 + '"', True), ('"x1y2z3Straßenbahnen"', True)]:
        assert g.matches(text) == ok, text


def test_a_few_copies_of_a_wide_class_are_still_expanded():
    # under the budget the class rules are expanded as before, so a string body stays inside
    # its caller's automaton (cheap masks, as for plain JSON strings)
    from halter.schemas import schema_to_rules
    rules = dict(schema_to_rules({"type": "string", "pattern": "\\p{L}", "maxLength": 10}))
    builder = NfaBuilder(rules)
    builder.plan_inlining("root")
    wide = [n for n in rules if builder.size(rules[n]) < 20 and builder._size(rules[n], lambda r: 1, {}, True) > 1000]
    assert wide and set(wide) <= builder.inline, wide
