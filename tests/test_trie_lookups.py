"""The token trie's per-vocabulary lookups that the ``uniqueItems`` check reads: tokens holding a
byte, and tokens spelling a beginning of a text, against plain scans of the vocabulary."""
from __future__ import annotations

import numpy as np
import pytest

from halter import Vocabulary
from halter.grammar.trie import TokenTrie
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def vocab_and_trie():
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    text = np.ones(vocab.size, dtype=bool)
    text[[i for i in vocab.special_ids | set(vocab.eog_ids) if i < vocab.size]] = False
    return vocab, text, TokenTrie(vocab.token_bytes, text)


def _ids(bits: np.ndarray, n: int) -> set[int]:
    ids = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
    return set(ids[ids < n].tolist())


@pytest.mark.parametrize("b", [ord(","), ord('"'), ord("]"), ord("}"), ord("\\"), 0xE2, ord("a")])
def test_tokens_with_a_byte_are_the_text_tokens_that_contain_it(vocab_and_trie, b):
    vocab, text, trie = vocab_and_trie
    want = {i for i, t in enumerate(vocab.token_bytes) if text[i] and bytes([b]) in t}
    assert _ids(trie.tokens_with_byte(b), vocab.size) == want
    assert trie.tokens_with_byte(b) is trie.tokens_with_byte(b)        # made once per byte


@pytest.mark.parametrize("data", [b'"name": "Ana"}', b"], [1, 2]]", b"\xe2\x82\xac 12", b"", b"\x00zz"])
def test_prefix_tokens_are_the_lowest_ids_spelling_a_beginning(vocab_and_trie, data):
    vocab, text, trie = vocab_and_trie
    first: dict[bytes, int] = {}
    for i, t in enumerate(vocab.token_bytes):
        if t and text[i]:
            first.setdefault(bytes(t), i)
    want = [(k, first[data[:k]]) for k in range(1, len(data) + 1) if data[:k] in first]
    assert trie.prefix_tokens(data) == want
