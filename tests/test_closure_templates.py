"""Closures built from opaque nodes (templates) give the same parser states as the Earley walk.

``StateSpace`` closes a kernel with real contexts by substituting the caller into the opaque node of
each position; ``StateSpace(..., templates=False)`` always runs the Earley walk. On random
context-free grammars (recursion on either side, nullable rules, tail calls, ambiguity) and on the
grammars that ship with llama.cpp, both must allow the same next bytes and agree on where the input
may end, after every prefix. A space whose templates make too many contexts switches to the walk.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from halter import Grammar
from halter.errors import GrammarError
from halter.grammar.parser_state import MAX_CHAIN, StateSpace
from halter.grammar.random_text import random_text
from tests.conftest import SHARED, shared_path

RULES = ["root", "r1", "r2", "r3"]


@st.composite
def element(draw, depth=0):
    kind = draw(st.sampled_from(["lit", "lit", "ref", "ref", "group"] if depth < 2 else ["lit", "ref"]))
    if kind == "lit":
        return '"' + draw(st.text(alphabet="abc", min_size=1, max_size=2)) + '"'
    if kind == "ref":
        return draw(st.sampled_from(RULES))
    inner = draw(alternatives(depth + 1))
    return f"({inner}){draw(st.sampled_from(['', '?', '*', '+']))}"


@st.composite
def alternatives(draw, depth=0):
    alts = draw(st.lists(st.lists(element(depth), min_size=0, max_size=3), min_size=1, max_size=3))
    return " | ".join(" ".join(seq) if seq else '""' for seq in alts)


@st.composite
def grammars(draw):
    return "\n".join(f"{name} ::= {draw(alternatives())}" for name in RULES)


def usable_grammar(gbnf: str) -> Grammar:
    """The grammar of a drawn text; drawings that make no valid grammar are discarded."""
    try:
        return Grammar.from_gbnf(gbnf)
    except GrammarError:
        assume(False)
        raise


def agree(grammar: Grammar, text: bytes) -> int:
    """Step both spaces through ``text``; assert they agree after every prefix; bytes read alive.

    The template space never gives up on templates (no budget), so that it is what is compared."""
    fast = StateSpace(grammar._automata, template_budget=None)
    slow = StateSpace(grammar._automata, templates=False)
    read = spaces_agree(fast, slow, text)
    assert fast.templates and not slow.templates
    return read


def spaces_agree(fast: StateSpace, slow: StateSpace, text: bytes) -> int:
    """Step two state spaces through ``text``: the same next bytes and the same "may end here"
    after every prefix; returns how many bytes were read before both died (or all of them)."""
    a, b = fast.initial, slow.initial
    for i, byte in enumerate(text):
        assert a.accepting == b.accepting, f"accepting differs after {text[:i]!r}"
        assert fast.live_bytes(a) == slow.live_bytes(b), f"next bytes differ after {text[:i]!r}"
        a, b = fast.step_byte(a, byte), slow.step_byte(b, byte)
        assert (a.id == 0) == (b.id == 0)
        if a.id == 0:
            return i
    assert a.accepting == b.accepting
    return len(text)


@settings(max_examples=120, deadline=None)
@given(gbnf=grammars(), texts=st.lists(st.text(alphabet="abc", max_size=8), min_size=1, max_size=6))
def test_templates_agree_with_the_earley_walk_on_random_grammars(gbnf, texts):
    g = usable_grammar(gbnf)
    for t in texts:
        agree(g, t.encode())


def test_long_chains_of_completions_fall_back_to_the_walk():
    # every level ends with an optional space: after "a"*n "b" the closure completes n levels at once
    g = Grammar.from_gbnf('root ::= s\ns ::= "a" s w | "b"\nw ::= " "?')
    n = 3 * MAX_CHAIN
    text = b"a" * n + b"b" + b" " * n
    assert agree(g, text) == len(text)
    m = g.matcher()
    assert m.accept_text(text.decode()) and m.is_accepting()
    assert not g.matcher().accept_text("a" * n + "b" + " " * (n + 1))


@pytest.mark.parametrize("name", ["json", "arithmetic", "c", "list", "chess"])
def test_templates_agree_on_shipped_grammars(name):
    path = shared_path("grammars", f"{name}.gbnf")
    g = Grammar.from_gbnf(path.read_text())
    rng = random.Random(name)
    for _ in range(12):
        text = random_text(g.rules, "root", rng, max_depth=6).encode()
        assert agree(g, text) == len(text)
        cut = rng.randrange(len(text) + 1)
        agree(g, text[:cut] + bytes([rng.randrange(32, 127)]) + text[cut:])


@pytest.mark.parametrize("text", [b"xa!", b"xab!", b"xadc!", b"xabdc!", b"(xab)", b"(xadc)", b"xaadc!",
                                  b"xad!", b"(xab!", b"xa"])
def test_a_rule_called_last_and_not_last_in_one_closure_returns_to_both(text):
    # after "x", r2 is called last in r1 (it returns where r1 does, the caller unknown in the opaque
    # node) and, through r3, before "d": its context there mixes the unknown caller with real returns
    g = Grammar.from_gbnf('root ::= r1 "!" | "(" r1 ")" | r3 "?"\n'
                          'r1 ::= "x" (r2 | r3 "c")\nr3 ::= r2 "d" | "e" r3\nr2 ::= "a" | "a" "b" | "a" r2')
    agree(g, text)


# Left-recursive, nullable and ambiguous: copies of cyclic contexts made by substitution pile up
LEFT_RECURSIVE_AMBIGUOUS = 'root ::= "a" | r | ""\nr ::= (("b" | root | ""){1,3} (root "(" | root | "") ("c" | r)){1,2}'


def test_a_space_whose_templates_make_too_many_contexts_walks_instead():
    g = Grammar.from_gbnf(LEFT_RECURSIVE_AMBIGUOUS)
    text = b"b" * 40 + b"c(" + b"ab" * 10 + b"c"
    budgeted = StateSpace(g._automata)
    unbudgeted = StateSpace(g._automata, template_budget=None)
    slow = StateSpace(g._automata, templates=False)
    assert spaces_agree(budgeted, slow, text) == len(text)
    assert not budgeted.templates and budgeted._tpl_closures < 200
    # the walk interns a rule's context by meaning: ~20 contexts a byte here, templates ~1,000 by byte 40
    assert len(budgeted.ctx_returns) < 5_000
    node = unbudgeted.initial
    for byte in text[:25]:
        node = unbudgeted.step_byte(node, byte)
    assert unbudgeted.templates and len(unbudgeted.ctx_returns) > 10_000
    m = g.matcher()
    assert m.accept_bytes(text) and m.is_accepting() and not m.accept_text(")")


@pytest.mark.parametrize("name", ["json", "arithmetic", "c"])
def test_shipped_grammars_keep_their_templates(name):
    g = Grammar.from_gbnf(shared_path("grammars", f"{name}.gbnf").read_text())
    rng = random.Random(name)
    for _ in range(12):
        assert g.matcher().accept_text(random_text(g.rules, "root", rng, max_depth=6))
    assert g._space.templates and g._space._tpl_closures > 20


def test_shortcut_closures_of_opaque_positions_are_the_earley_walks():
    """A position with an unknown caller is closed without the walk where it calls nothing (inside
    a literal, or where its rule may end: the node escapes) or makes the same calls as a position
    closed before (none of them nullable): it must be the node the walk makes, for every position
    of schema grammars with counted strings and key complements and of a code grammar."""
    from halter.grammar.contexts import OPAQUE_ID
    from halter.grammar.earley import earley_closure
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 40},
                                               "b": {"type": "array", "items": {"type": "integer"}, "maxItems": 9}}}
    keys = {"type": "object", "properties": {k: {"type": "string", "maxLength": 300}
                                             for k in ("email", "emails", "name", "notes", "number")}}
    grammars = [Grammar.from_json_schema(schema), Grammar.from_json_schema(keys)]
    c_gbnf = SHARED / "grammars" / "c.gbnf"
    if c_gbnf.exists():                          # (the schema alone where ../shared is absent)
        grammars.append(Grammar.from_gbnf(c_gbnf.read_text()))
    checked = 0
    for g in grammars:
        space, a = g._space, g._space.a
        for d in range(a.n_positions):
            assert space.closure([(d, OPAQUE_ID)]) is earley_closure(space, [(d, OPAQUE_ID)]), d
            checked += bool(a.calls[d]) and any(space._call_rest.get(a.calls[d]) or ())
    assert checked > 100
