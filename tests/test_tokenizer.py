"""Tokenizer: llama.cpp's own test vectors, BOS/EOS and special tokens, decoding, bad input."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from halter.engine.pretokenize import PRE_TYPES, Pretokenizer
from halter.engine.tokenizer import Tokenizer
from halter.errors import ModelLoadError
from halter.vocab.vocabulary import gpt2_byte_encoder
from tests.gguf_files import read_test_vectors, write_vocab_gguf

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VOCAB_DIR = SHARED / "vocab"
WITH_VECTORS = sorted(p.name[len("ggml-vocab-"):-len(".gguf.inp")]
                      for p in VOCAB_DIR.glob("ggml-vocab-*.gguf.inp")) if VOCAB_DIR.is_dir() else []


@lru_cache(maxsize=None)
def _load(name: str) -> Tokenizer:
    return Tokenizer.from_gguf(VOCAB_DIR / f"ggml-vocab-{name}.gguf")


def shared_tokenizer(name: str) -> Tokenizer:
    if not (VOCAB_DIR / f"ggml-vocab-{name}.gguf").is_file():
        pytest.skip(f"shared vocabulary {name} is absent")
    return _load(name)


def read_vectors(name: str) -> list[tuple[str, list[int]]]:
    return read_test_vectors(VOCAB_DIR, name)


@pytest.mark.parametrize("name", WITH_VECTORS or [pytest.param("none", marks=pytest.mark.skip(
    reason="../shared/vocab is absent"))])
def test_llama_cpp_vectors(name):
    tok = shared_tokenizer(name)
    vectors = read_vectors(name)
    assert len(vectors) > 30
    wrong = [(text, tok.encode(text, add_bos=False), ids) for text, ids in vectors
             if tok.encode(text, add_bos=False) != ids]
    assert not wrong, f"{len(wrong)} of {len(vectors)} differ, first: {wrong[0]!r}"


# ------------------------------------------------------------------ BOS / EOS / special tokens

def test_bos_follows_the_model():
    spm = shared_tokenizer("llama-spm")
    assert spm.add_bos_default and spm.encode("Hello") == [1, 15043]
    assert spm.encode("Hello", add_bos=False) == [15043]
    assert spm.encode("Hello", add_eos=True) == [1, 15043, 2]
    assert spm.encode("") == [1] and spm.encode("", add_bos=False) == []
    gpt2 = shared_tokenizer("gpt-2")
    assert not gpt2.add_bos_default and gpt2.encode("Hello") == [15496]
    assert gpt2.encode("Hello", add_bos=True) == [50256, 15496]
    deepseek = shared_tokenizer("deepseek-llm")    # add_bos_token = true in the file
    assert deepseek.encode("Hello")[0] == 100000 == deepseek.bos_id


def test_control_tokens_are_text_unless_parse_special():
    gpt2 = shared_tokenizer("gpt-2")
    assert gpt2.encode("a<|endoftext|>b", parse_special=True) == [64, 50256, 65]
    plain = gpt2.encode("a<|endoftext|>b")
    assert 50256 not in plain and gpt2.decode(plain) == "a<|endoftext|>b"
    spm = shared_tokenizer("llama-spm")
    assert spm.encode("<s>hi</s>", add_bos=False, parse_special=True)[:1] == [1]
    assert 1 not in spm.encode("<s>hi</s>", add_bos=False)


def test_user_defined_tokens_always_match():
    tok = shared_tokenizer("deepseek-llm")
    uid = tok.vocab.find_token("õ")
    assert uid in tok.encode("aõb", add_bos=False)
    neox = shared_tokenizer("gpt-neox")            # runs of spaces are user-defined there
    spaces = neox.vocab.find_token(" " * 8)
    assert spaces in neox.encode("x" + " " * 8 + "y")


def test_phi3_special_tokens_swallow_following_whitespace():
    tok = shared_tokenizer("phi-3")
    ids = tok.encode("<|user|>\nHi<|end|>\n<|assistant|>", parse_special=True)
    assert [tok.vocab.token_texts[i] for i in ids] == ["<s>", "<|user|>", "▁Hi", "<|end|>",
                                                        "<|assistant|>"]


# ------------------------------------------------------------------ decoding

def test_decode_spm_removes_only_the_added_space():
    tok = shared_tokenizer("llama-spm")
    ids = tok.encode("Hello  world")
    assert tok.decode(ids[1:]) == "Hello  world"
    assert tok.decode(ids) == "<s> Hello  world"          # control text shown unless skipped
    assert tok.decode(ids, skip_special=True) == " Hello  world"   # as llama_detokenize
    assert tok.decode([tok.vocab.find_token("<0xE6>")]) == "\ufffd"
    assert tok.decode_bytes([tok.vocab.find_token("<0xE6>")]) == b"\xe6"
    assert tok.token_to_piece(1) == b"" and tok.token_to_piece(1, special=True) == b"<s>"


@pytest.mark.parametrize("name", ["deepseek-llm", "deepseek-coder"])
def test_decode_inverts_encode_without_space_cleanup(name):
    tok = shared_tokenizer(name)
    for text, ids in read_vectors(name):
        assert tok.decode(ids) == text


def test_decode_cleans_spaces_where_the_model_does():
    tok = shared_tokenizer("gpt-2")
    assert tok.decode(tok.encode("Hello , world ! It 's ' fine")) == "Hello, world! It's'fine"
    assert tok.decode_bytes(tok.encode("naïve")) == "naïve".encode()


def test_bad_ids_and_text_are_rejected():
    tok = shared_tokenizer("gpt-2")
    with pytest.raises(ValueError, match="token id 50257 at position 1 is outside the vocabulary"):
        tok.decode([15496, 50257])
    with pytest.raises(TypeError, match="position 0"):
        tok.decode(["x"])
    with pytest.raises(TypeError, match="must be str"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="lone surrogate at index 2"):
        tok.encode("ab\ud800")


# ------------------------------------------------------------------ synthetic GGUF files

def _byte_level_tokens(extra: list[str]) -> list[str]:
    return [gpt2_byte_encoder()[b] for b in range(256)] + extra


def test_bpe_merges_apply_in_rank_order(tmp_path):
    tokens = _byte_level_tokens(["ab", "bc", "abc"])
    types = [1] * len(tokens)
    first = Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "a.gguf", tokens, types, model="gpt2", pre="gpt-2",
                                       merges=["a b", "b c", "ab c"]))
    assert [first.vocab.token_texts[i] for i in first.encode("abc")] == ["abc"]
    second = Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "b.gguf", tokens, types, model="gpt2", pre="gpt-2",
                                        merges=["b c", "a b", "ab c"]))
    assert [second.vocab.token_texts[i] for i in second.encode("abc")] == ["a", "bc"]
    # pre-tokenization keeps merges inside words: " abc" is its own word, so "Ġ" stays separate
    assert [second.vocab.token_texts[i] for i in second.encode("x abc")] == ["x", "Ġ", "a", "bc"]


def test_spm_prefers_the_highest_score_and_falls_back_to_bytes(tmp_path):
    tokens = ["<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "▁", "a", "b", "c", "ab", "bc", "▁a"]
    scores = [0, 0, 0, 0, 0, -1, -1, -1, -1, -5, -2, -3]
    types = [2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1]
    tok = Tokenizer.from_gguf(write_vocab_gguf(tmp_path / "s.gguf", tokens, types, model="llama",
                                     scores=[float(s) for s in scores]))
    texts = [tok.vocab.token_texts[i] for i in tok.encode("abc", add_bos=False)]
    assert texts == ["▁a", "bc"]          # "▁a" (-3) wins over "ab" (-5) after "bc" (-2)
    assert tok.encode("é", add_bos=False) == [5, 3, 4]   # no token for "é": its UTF-8 bytes
    assert tok.decode(tok.encode("abcé", add_bos=False)) == "abcé"


def test_unknown_pre_tokenizer_and_missing_merges_are_reported(tmp_path):
    tokens = _byte_level_tokens([])
    path = write_vocab_gguf(tmp_path / "p.gguf", tokens, [1] * 256, model="gpt2", pre="klingon", merges=["a b"])
    with pytest.raises(ModelLoadError, match="unsupported pre-tokenizer type 'klingon'") as err:
        Tokenizer.from_gguf(path)
    assert err.value.field == "tokenizer.ggml.pre"
    path = write_vocab_gguf(tmp_path / "m.gguf", tokens, [1] * 256, model="gpt2", pre="gpt-2")
    with pytest.raises(ModelLoadError) as err:
        Tokenizer.from_gguf(path)
    assert err.value.field == "tokenizer.ggml.merges" and str(path) in str(err.value)


def test_add_bos_without_a_bos_token_is_reported(tmp_path):
    # SentencePiece adds BOS by default; its default id (1) does not exist in a one-token vocabulary
    path = write_vocab_gguf(tmp_path / "b.gguf", ["a"], [1], model="llama", scores=[0.0])
    with pytest.raises(ModelLoadError, match="no BOS token") as err:
        Tokenizer.from_gguf(path)
    assert err.value.field == "tokenizer.ggml.add_bos_token"


# ------------------------------------------------------------------ pre-tokenizers

def test_gpt2_and_llama3_word_splits():
    gpt2 = Pretokenizer("gpt-2")
    assert gpt2.split("Hello world's  test\n\n 42") == ["Hello", " world", "'s", " ", " test", "\n\n",
                                                        " 42"]
    llama3 = Pretokenizer("llama-bpe")
    assert llama3.split("12345 Ok!!\n\n") == ["123", "45", " Ok", "!!\n\n"]
    assert llama3.split("I'LL go") == ["I", "'LL", " go"]


@pytest.mark.parametrize("pre", sorted(PRE_TYPES))
def test_every_pre_tokenizer_partitions_the_text(pre):
    text = "Hello, y'all! 3333 ¿Qué tal?\t\n 我想在apple工作 нещо  …\u3000end  "
    words = Pretokenizer(pre).split(text)
    assert "".join(words) == text and all(words)


_ALPHABET = list("aZ 9'sStTlLrReEvVdDmM\n\r\t.,!?-_$+<>~|`") + [
    "é", "中", "\u3000", "\u00a0", "١", "\u0301", "😀", "\x85", "\x0b", "ǅ", "\ue000", "\u0378"]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(_ALPHABET), max_size=14))
def test_hand_written_scanners_agree_with_their_regexes(text):
    """The GPT-2 and Llama-3 scanners split exactly as their regexes do through the regex path."""
    from halter.engine import pretokenize as p
    for expr, scan in ((p._GPT2, p._gpt2_pass), (p._LLAMA3, p._llama3_pass)):
        pattern = p._python_regex(p._collapse_regex(expr))
        collapsed = "".join(map(p._collapse_char, text))
        by_regex = p._regex_pass(pattern, collapsed, [(0, len(text))])
        by_scan = scan(text, [p.char_flags(c) for c in text], [(0, len(text))])
        assert by_scan == by_regex
