"""Token masks where rules end inside tokens: every allowed-token set checked in full against feeding
each token alone, on a vocabulary of all short strings over the grammars' own alphabet.

These grammars make escapes (a rule that ends mid-token, so the rest of the token is read by the
callers) go up several levels of the stack at once, through nullable rules, doubling chains like
the ones counted strings become, left recursion and rules that may end without reading anything:
the cases where the per-position walks are combined with the caller's contexts at run time.
"""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from halter import Grammar, Vocabulary
from halter.schemas import json_schema_to_gbnf

GRAMMARS = {
    # a counted string as schema grammars spell it: nullable doubling rules
    "doubling": 'root ::= "<" o3 ">"\no3 ::= o2 o2\no2 ::= o1 o1\no1 ::= o0 o0\no0 ::= c?\nc ::= [ab] | "\\\\" [ab]',
    # a rule that may end without reading, returning through several callers
    "nullable-chain": 'root ::= "<" r ">" r ">"\nr ::= s s\ns ::= t?\nt ::= "ab" | "a" | "b"',
    # left recursion with an optional tail: contexts refer to themselves
    "left-optional": 'root ::= x "."\nx ::= x "b"? "a" | x "," | "a"',
    "left-nullable": 'root ::= "<" x ">"\nx ::= x y | "a"\ny ::= "b"?',
    # one rule called from many places, like ws
    "many-callers": 'root ::= "<" w "a" w "b" w (">" | "," w root)\nw ::= " "{0,2}',
    "nested": 'root ::= v\nv ::= "<" (v ("," v)*)? ">" w | "a" w\nw ::= " "?',
    # a rule reached both from another item's closure and from elsewhere (its context merges
    # both): its escapes are not all brought by the other item
    "shared-callee": 'root ::= "<" s ">" | "<" t\nt ::= s "," | "." t\ns ::= "a" s | "b"',
}


def alphabet_vocab(alphabet: bytes, max_len: int = 3) -> Vocabulary:
    pieces = [bytes([b]) for b in range(256)]
    seen = set(pieces)
    for n in range(2, max_len + 1):
        for combo in itertools.product(alphabet, repeat=n):
            b = bytes(combo)
            if b not in seen:
                seen.add(b)
                pieces.append(b)
    pieces.append(b"</s>")
    return Vocabulary.from_token_bytes(pieces, eog_ids=[len(pieces) - 1])


def check_walks(g: Grammar, vocab: Vocabulary, seeds: int, steps: int) -> int:
    cg = g.compile(vocab, cache=False)
    checked = 0
    for seed in range(seeds):
        rng = random.Random(seed)
        m = cg.matcher()
        for _ in range(steps):
            mask = m.allowed_mask()
            expected = np.array([m.copy().accept_token(t) for t in range(vocab.size)])
            bad = np.flatnonzero(mask != expected)
            assert not len(bad), [(vocab.token_bytes[t], bool(mask[t])) for t in bad[:10]]
            checked += 1
            text = [t for t in np.flatnonzero(mask) if not cg.eog_mask[t]]
            if not text or (m.is_accepting() and rng.random() < 0.1):
                m = cg.matcher()                   # start another text
                continue
            assert m.accept_token(int(rng.choice(text)))
    return checked


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_escape_masks_match_brute_force(name):
    g = Grammar.from_gbnf(GRAMMARS[name])
    alphabet = bytes(sorted(set(b for b in GRAMMARS[name].encode() if 32 <= b < 127) & set(b'ab<>., \\"')))
    assert check_walks(g, alphabet_vocab(alphabet), seeds=4, steps=25) == 100


def test_counted_string_schema_masks_match_brute_force():
    """maxLength strings become nullable doubling rules; every boundary inside a token is an escape."""
    g = Grammar.from_json_schema({"type": "object", "properties": {"s": {"type": "string", "maxLength": 6},
                                                                    "t": {"type": "string", "minLength": 2}},
                                  "required": ["s"], "additionalProperties": False})
    vocab = alphabet_vocab(b'ab"{}:, s', max_len=3)
    assert check_walks(g, vocab, seeds=3, steps=20) == 60


@pytest.mark.parametrize("fmt", ["ipv4", "date", "email"])
def test_format_rules_end_only_after_their_closing_quote(fmt):
    """A format is one shared rule that includes the closing quote, so tokens inside the string stay
    in the rule (precomputed) instead of ending it after every character (resolved at run time)."""
    schema = {"type": "array", "items": {"type": "string", "format": fmt}}
    gbnf = json_schema_to_gbnf(schema)
    rule = next(line for line in gbnf.splitlines() if line.startswith(f"format-{fmt} ::= "))
    assert rule.endswith('"\\""'), rule
    g = Grammar.from_gbnf(gbnf)
    cg = g.compile(alphabet_vocab(b'0123.-:@a"[], ', max_len=3), cache=False)
    a, trie = cg.space.a, cg.trie
    for d in range(a.n_positions):       # where the rule is not inlined into its callers
        if a.rule_names[a.rule_of[d]] == f"format-{fmt}":
            for node in cg.esc_nodes[cg.esc_start[d]:cg.esc_start[d + 1]].tolist():
                assert trie.byte[node] == ord('"'), (d, node)
    check_walks(g, cg.vocab, seeds=2, steps=15)


CYCLIC = ['root ::= r2 | [\\n-😀]\nr2 ::= [b] | r3\nr3 ::= root*\n',
          'root ::= x | [a-z]\nx ::= root* "," | root*',
          'root ::= a b\na ::= b* | "é"\nb ::= a* | "(" root ")"']


@pytest.mark.parametrize("gbnf", CYCLIC, ids=range(len(CYCLIC)))
def test_cyclic_grammars_masks_are_right_and_each_part_is_computed_once(gbnf, monkeypatch):
    """Rules that derive themselves without reading (``root => x => root*``) make the escape
    walk meet its own open parts; those were then recomputed along every path (1.9M calls and
    seconds for one mask of a 4-character token). Each part is now computed once per mask."""
    from halter.grammar import state_masks
    from tests.test_token_masks import random_walk_check
    calls = [0]
    original = state_masks.MaskAssembler._ctx_bits

    def counting(self, n_id, ctx):
        calls[0] += 1
        return original(self, n_id, ctx)
    monkeypatch.setattr(state_masks.MaskAssembler, "_ctx_bits", counting)
    pieces = [bytes([i]) for i in range(256)] + [
        "😀漢\né".encode(), "0aéb漢,".encode(), "éé(".encode(), b"a,b,", b"((", "é)é)".encode(), b"zz,"]
    vocab = Vocabulary.from_token_bytes(pieces + [b"</s>"], eog_ids=[len(pieces)])
    cg = Grammar.from_gbnf(gbnf).compile(vocab, cache=False, progress=False)
    checked = sum(random_walk_check(cg, seed, steps=10, sample=None) for seed in range(4))
    assert checked > 10
    assert calls[0] < 20_000, calls[0]
