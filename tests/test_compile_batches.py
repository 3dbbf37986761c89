"""Compile-time walks: a batch of positions merges equal (trie node, state) pairs and still gives each
position exactly the tokens and escape points it would get walked alone."""
from __future__ import annotations

import numpy as np
import pytest

from halter import Grammar
from halter.grammar.trie_walk import BATCH, owners_to_rows, walk_trie_batch
from halter.schemas import json_schema_to_gbnf
from tests.test_token_masks import synthetic_vocab

# many known keys: every prefix of a key is a position of the key complement, and they all fall
# into the same free-string state after a byte or two (what the merge is for)
SCHEMA = {"type": "object", "properties": {k: {"type": ["string", "integer"]} for k in
                                           ["alpha", "alps", "beta", "bet", "gamma", "zz", "abz"]}}


@pytest.fixture(scope="module")
def compiled():
    g = Grammar.from_gbnf(json_schema_to_gbnf(SCHEMA))
    return g.compile(synthetic_vocab(), cache=False, progress=False)


def test_each_position_gets_what_it_reads_alone(compiled):
    cg = compiled
    space, trie = cg.space, cg.trie
    positions = [d for d in range(space.a.n_positions) if space.a.has_bytes[d]]
    assert len(positions) > BATCH           # the tables came from several batches
    for d in positions:
        (rows, owners), (esc, esc_owners) = walk_trie_batch(cg.table, trie, [space.opaque_node(d)])
        assert (owners == 1).all() and (esc_owners == 1).all()
        alone = np.zeros(cg.n_words * 32, dtype=bool)
        alone[trie.tokens_of_rows(rows)[0]] = True
        expected = np.packbits(alone, bitorder="little").view("<u4")
        assert (cg.acc_bits[d] == expected).all(), d
        got_esc = cg.esc_nodes[cg.esc_start[d]:cg.esc_start[d + 1]]
        assert got_esc.tolist() == sorted(set(esc.tolist())), d


def test_merged_pairs_carry_every_owner(compiled):
    cg = compiled
    space = cg.space
    starts = [space.opaque_node(d) for d in range(space.a.n_positions) if space.a.has_bytes[d]][:BATCH]
    (rows, owners), _ = walk_trie_batch(cg.table, cg.trie, starts)
    assert len(rows) and any(bin(int(m)).count("1") > 1 for m in owners)   # some pairs were shared
    with pytest.raises(ValueError):
        walk_trie_batch(cg.table, cg.trie, starts + starts[:1] * (BATCH + 1 - len(starts)))


@pytest.mark.parametrize("n_tokens,n_owners", [(32, 1), (96, 7), (256, 64), (32000, 41)])
def test_owners_to_rows_is_a_bit_transpose(n_tokens, n_owners):
    rng = np.random.default_rng(n_tokens + n_owners)
    masks = rng.integers(0, 2**63, size=n_tokens, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, size=n_tokens, dtype=np.uint64)
    rows = owners_to_rows(masks, n_owners)
    assert rows.shape == (n_owners, n_tokens // 32) and rows.dtype == np.uint32
    for j in range(n_owners):
        want = ((masks >> np.uint64(j)) & np.uint64(1)).astype(bool)
        got = np.unpackbits(rows[j].view(np.uint8), bitorder="little").astype(bool)
        assert (got == want).all(), j
