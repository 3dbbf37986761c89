"""Merging equivalent positions across rules changes no answer, only how much is computed.

``build_automata`` merges positions that no input can tell apart (``quotient.py``). The grammar
with merged positions must accept exactly what the unmerged one does: the same next bytes and the
same "may end here" after every prefix (random grammars, the shipped grammars, schema grammars),
and the same token masks on a real vocabulary. And it must merge what users' schemas repeat.
"""
from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halter import Grammar, Vocabulary
from halter.grammar.automaton import build_automata
from halter.grammar.quotient import _is_bisimulation, equivalence_classes
from halter.grammar.random_text import random_text
from tests.conftest import shared_path
from tests.test_closure_templates import grammars, spaces_agree, usable_grammar


def unmerged(g: Grammar) -> Grammar:
    return Grammar(g.rules, g.root, _automata=build_automata(g.rules, g.root, merge=False))


def agree(g: Grammar, h: Grammar, text: bytes) -> int:
    """Step both grammars' states through ``text``; assert they agree after every prefix."""
    return spaces_agree(g._space, h._space, text)


def test_rules_with_the_same_body_share_their_positions():
    # recursive rules, so that none is inlined into root
    g = Grammar.from_gbnf('root ::= a "," b "," c\na ::= "x" [0-9]* | "(" a ")"\nb ::= "x" [0-9]* | "(" b ")"\n'
                          'c ::= "x" [0-9]* | "[" c "]"')
    merged, plain = g._automata, build_automata(g.rules, "root", merge=False)
    names = merged.rule_names
    start = dict(zip(names, merged.start))
    assert start["a"] == start["b"] != start["c"]      # c nests in brackets: its start differs
    # b's positions are a's; c's after "x" (the digits loop, the end) are a's too
    assert plain.n_positions - merged.n_positions >= 6
    assert g.matcher().accept_text("((x1)),x,[[x22]]")
    assert not g.matcher().accept_text("((x1)),[x],[[x22]]")


def test_property_rules_of_a_schema_share_their_tails():
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in ("alpha", "beta", "gamma", "delta")},
              "required": ["alpha", "beta", "gamma", "delta"], "additionalProperties": False}
    g = Grammar.from_json_schema(schema)
    plain = build_automata(g.rules, g.root, merge=False)
    # each key's rule ends in  ws ":" ws string ws : one copy of that tail for all four
    assert plain.n_positions - g._automata.n_positions >= 3 * 4
    doc = json.dumps({"alpha": "a", "beta": "b", "gamma": "c", "delta": "d"})
    assert agree(g, unmerged(g), doc.encode()) == len(doc)
    assert not g.matcher().accept_text(doc.replace('"beta"', '"betta"'))


@settings(max_examples=120, deadline=None)
@given(gbnf=grammars(), texts=st.lists(st.text(alphabet="abc", max_size=8), min_size=1, max_size=6))
def test_merged_and_unmerged_agree_on_random_grammars(gbnf, texts):
    g = usable_grammar(gbnf)
    h = unmerged(g)
    for t in texts:
        agree(g, h, t.encode())


@pytest.mark.parametrize("name", ["json", "arithmetic", "c", "list", "chess"])
def test_merged_and_unmerged_agree_on_shipped_grammars(name):
    g = Grammar.from_gbnf(shared_path("grammars", f"{name}.gbnf").read_text())
    h = unmerged(g)
    rng = random.Random(name)
    for _ in range(10):
        text = random_text(g.rules, "root", rng, max_depth=6).encode()
        assert agree(g, h, text) == len(text)
        cut = rng.randrange(len(text) + 1)
        agree(g, h, text[:cut] + bytes([rng.randrange(32, 127)]) + text[cut:])


def test_merged_and_unmerged_agree_on_real_world_schemas():
    rows = [json.loads(line) for line in shared_path("schema", "jsonschemabench_dev.jsonl").open()]
    checked = 0
    for row in rows[::20]:
        if len(json.dumps(row["schema"])) > 3000:         # the big ones take seconds to build twice
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                g = Grammar.from_json_schema(row["schema"])
        except Exception:  # noqa: BLE001 - schemas the converter refuses are not this test's subject
            continue
        h = unmerged(g)
        for t in row["tests"]:
            text = json.dumps(t["data"]).encode()
            n = agree(g, h, text)
            checked += n == len(text)
    assert checked >= 10


def test_token_masks_are_the_same_merged_or_not():
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"},
                                               "tags": {"type": "array", "items": {"type": "string"}},
                                               "owner": {"type": "object", "properties": {
                                                   "name": {"type": "string"}, "mail": {"type": "string"}}}}}
    g = Grammar.from_json_schema(schema)
    cg, ch = g.compile(vocab, cache=False), unmerged(g).compile(vocab, cache=False)
    assert len(cg.acc_bits) < len(ch.acc_bits)
    doc = json.dumps({"id": 7, "name": "Ann \"A\"", "tags": ["x", "yz"], "owner": {"name": "B", "mail": "b@c"},
                      "extra": {"k": [1.5, None]}}).encode()
    tb = vocab.token_bytes
    m, n, pos = cg.matcher(), ch.matcher(), 0
    while pos < len(doc):
        mask = m.allowed_mask()
        assert np.array_equal(mask, n.allowed_mask()), doc[:pos]
        best = max((t for t in np.flatnonzero(mask) if doc.startswith(tb[t], pos)), key=lambda t: len(tb[t]))
        assert m.accept_token(int(best)) and n.accept_token(int(best))
        pos += len(tb[best])
    assert np.array_equal(m.allowed_mask(), n.allowed_mask()) and m.is_accepting()


def test_a_partition_that_merges_different_positions_is_refused():
    g = Grammar.from_gbnf('root ::= "a" x | "b" y\nx ::= "1" | "(" x ")"\ny ::= "2" | "(" y ")"')
    a = build_automata(g.rules, "root", merge=False)
    n = a.n_positions
    assert equivalence_classes(a) is None or len(set(equivalence_classes(a).tolist())) < n
    flat = np.asarray(a.next_array, dtype=np.int64)
    x, y = a.start[a.rule_names.index("x")], a.start[a.rule_names.index("y")]
    wrong = np.arange(n)
    wrong[y] = x                                   # x reads "1", y reads "2": not the same position
    assert not _is_bisimulation(a, wrong, flat)
    right = np.arange(n)
    assert _is_bisimulation(a, right, flat)


def test_rules_with_token_references_merge_and_keep_their_masks():
    from tests.test_token_masks import synthetic_vocab
    vocab = synthetic_vocab()
    bos = len(vocab) - 3
    # a and b read the same (a control token, then text); c differs only in which token it refuses
    g = Grammar.from_gbnf(f'root ::= a "," b "," c\na ::= <[{bos}]> [0-9]+ | "(" a ")"\n'
                          f'b ::= <[{bos}]> [0-9]+ | "(" b ")"\nc ::= !<[{ord("x")}]> [0-9]+ | "(" c ")"')
    start = dict(zip(g._automata.rule_names, g._automata.start))
    assert start["a"] == start["b"] != start["c"]
    cg, ch = g.compile(vocab, cache=False), unmerged(g).compile(vocab, cache=False)
    rng = random.Random(3)
    for _ in range(20):
        m, n = cg.matcher(), ch.matcher()
        for _step in range(12):
            mask = m.allowed_mask()
            assert np.array_equal(mask, n.allowed_mask())
            ids = [t for t in np.flatnonzero(mask).tolist() if not cg.eog_mask[t]]
            if not ids:
                break
            t = rng.choice(ids)
            assert m.accept_token(t) and n.accept_token(t)
