"""The compiled trie walk (numba) gives every position exactly the tables of the numpy walk."""
from __future__ import annotations

import numpy as np
import pytest

from halter import Grammar, Vocabulary
from halter.grammar import trie_kernel
from tests.conftest import shared_path
from tests.test_token_masks import GRAMMARS, random_walk_check, synthetic_vocab

pytestmark = pytest.mark.skipif(not trie_kernel.available(), reason="numba not installed")

SCHEMA = {"type": "object", "required": ["name"],
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "tags": {"type": "array", "items": {"enum": ["alpha", "beta"]}, "maxItems": 3},
                         "n": {"type": "integer", "minimum": 0}, "when": {"type": "string", "format": "date"}}}


def _both(grammar: Grammar, vocab: Vocabulary):
    fast, slow = grammar.compile(vocab, cache=False), grammar.compile(vocab, cache=False)
    slow.use_kernel = False
    return fast, slow


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_kernel_tables_equal_numpy_tables_on_synthetic_vocab(name):
    fast, slow = _both(Grammar.from_gbnf(GRAMMARS[name]), synthetic_vocab())
    assert (fast.acc_bits == slow.acc_bits).all()
    assert (fast.esc_start == slow.esc_start).all() and (fast.esc_nodes == slow.esc_nodes).all()
    assert random_walk_check(fast, 1, steps=20, sample=None) > 0


@pytest.mark.parametrize("vocab_name", ["llama-spm", "gpt-2"])
def test_kernel_tables_equal_numpy_tables_on_real_vocab(vocab_name):
    vocab = Vocabulary.from_gguf(shared_path("vocab", f"ggml-vocab-{vocab_name}.gguf"))
    fast, slow = _both(Grammar.from_json_schema(SCHEMA), vocab)
    a = fast.space.a
    positions = [d for d in range(a.n_positions) if a.has_bytes[d]]
    sample = positions[::max(1, len(positions) // 60)]       # a spread of positions, both walks
    fast.ensure_positions(sample)
    slow.ensure_positions(sample)
    for d in sample:
        assert (fast.pos_acc[d] == slow.pos_acc[d]).all(), d
        assert fast.pos_esc[d].tolist() == slow.pos_esc[d].tolist(), d
    assert random_walk_check(fast, 2, steps=12, sample=300) > 0


def test_masks_with_and_without_the_kernel_are_equal_on_real_vocab():
    """Escape walks (tokens that end a rule and go on in the caller) take the kernel too."""
    import json
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    fast = Grammar.from_json_schema(SCHEMA).compile(vocab, cache=False)
    slow = Grammar.from_json_schema(SCHEMA).compile(vocab, cache=False)
    slow.use_kernel = False
    tb = vocab.token_bytes
    data = json.dumps({"name": 'Jo "x" ok', "tags": ["beta", "alpha"], "n": 42, "when": "2024-02-29",
                       "other": {"k": [1.5, None, "é"]}}, ensure_ascii=False).encode()
    m, n, pos = fast.matcher(), slow.matcher(), 0
    while pos < len(data):
        mask = m.allowed_mask()
        assert (mask == n.allowed_mask()).all(), data[:pos]
        best = max((t for t in np.flatnonzero(mask) if data.startswith(tb[t], pos)), key=lambda t: len(tb[t]))
        assert m.accept_token(int(best)) and n.accept_token(int(best))
        pos += len(tb[best])
    assert (m.allowed_mask() == n.allowed_mask()).all() and m.is_accepting()


def test_positions_reading_few_bytes_walk_in_python_to_the_kernels_tables():
    """A position whose opaque node reads a few bytes (a key's next byte) is walked depth-first in
    Python (``NarrowWalker.walk_whole``) rather than by the kernel: the same tables, every such
    position of a schema with keys, enums and counted strings and of llama.cpp's JSON grammar."""
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    schema = dict(SCHEMA, additionalProperties=True)
    grammars = [Grammar.from_json_schema(schema), Grammar.from_gbnf(shared_path("grammars", "json.gbnf").read_text())]
    narrow_positions = 0
    for g in grammars:
        cg = g.compile(vocab, cache=False)
        kernel, opaque = cg.kernel(), cg.space.opaque_node
        a = cg.space.a
        for d in range(a.n_positions):
            if not a.has_bytes[d]:
                continue
            got = cg._masks.narrow_position_tables(opaque(d))
            if got is None:
                continue
            narrow_positions += 1
            bits, esc = kernel.walk_position(opaque(d))
            assert (got[0] == bits).all(), d
            assert got[1].tolist() == esc.tolist(), d
    assert narrow_positions > 50


def test_a_few_bytes_before_a_wide_subtree_are_left_to_the_kernel():
    """Before a word (``"s" [a-z]*``: a thousand tokens start with ``s``) the Python walk would
    visit every one of them: such a position declines (the kernel walks it), and its mask is exact."""
    import re
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-deepseek-llm.gguf"))
    cg = Grammar.from_gbnf('root ::= "x" "s" [a-z]* "."').compile(vocab, cache=False)
    m = cg.matcher()
    assert m.accept_token(vocab.token_bytes.index(b"x"))
    (d, _), = m._node.scan                            # the position before the word
    assert cg._masks.narrow_position_tables(cg.space.opaque_node(d)) is None
    allowed = {vocab.token_bytes[t] for t in np.flatnonzero(m.allowed_mask())}
    assert allowed == {t for t in vocab.token_bytes if re.fullmatch(rb"s[a-z]*\.?", t)}
