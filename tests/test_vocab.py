"""Vocabulary: token bytes, special and end-of-generation ids, GGUF errors."""
from __future__ import annotations

import pickle
from functools import lru_cache
from pathlib import Path

import gguf
import numpy as np
import pytest

from halter.errors import ModelLoadError
from halter.gguf import read_gguf_metadata
from halter.vocab.vocabulary import Vocabulary, gpt2_byte_encoder
from tests.gguf_files import read_test_vectors, write_vocab_gguf

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
VOCAB_DIR = SHARED / "vocab"


@lru_cache(maxsize=None)
def _load(name: str) -> Vocabulary:
    return Vocabulary.from_gguf(VOCAB_DIR / f"ggml-vocab-{name}.gguf")


def shared_vocab(name: str) -> Vocabulary:
    path = VOCAB_DIR / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.skip(f"shared vocabulary {path} is absent")
    return _load(name)


def read_vectors(name: str) -> list[tuple[str, list[int]]]:
    return read_test_vectors(VOCAB_DIR, name)


# ------------------------------------------------------------------ real vocabularies

def test_spm_bytes_space_marker_and_specials():
    v = shared_vocab("llama-spm")
    assert v.model == "llama" and len(v) == v.size == 32000
    assert v.token_bytes[v.find_token("<0x0A>")] == b"\n"
    assert v.token_bytes[v.find_token("<0xFF>")] == b"\xff"
    assert v.token_bytes[v.find_token("▁the")] == b" the"
    assert v.token_bytes[v.find_token("▁")] == b" "
    assert (v.bos_id, v.eos_id, v.unk_id) == (1, 2, 0)
    assert v.eog_ids == frozenset({2})
    assert {0, 1, 2} <= v.special_ids
    assert v.token_bytes[0] == v.token_bytes[1] == v.token_bytes[2] == b""
    assert v.token_texts[1] == "<s>" and v.find_token("<s>") == 1
    assert v.find_token("definitely not a token") is None
    # every byte value has its own token, so any output is reachable
    assert {b for b in v.token_bytes if len(b) == 1} >= {bytes([i]) for i in range(256)}


def test_gpt2_byte_level_mapping():
    v = shared_vocab("gpt-2")
    assert v.model == "gpt2"
    assert v.token_bytes[v.find_token("Ġ")] == b" "
    assert v.token_bytes[v.find_token("Ġthe")] == b" the"
    assert v.token_bytes[v.find_token("Ċ")] == b"\n"
    enc = gpt2_byte_encoder()
    for byte in (0x00, 0x20, 0x7F, 0xAD, 0xFF):
        assert v.token_bytes[v.find_token(enc[byte])] == bytes([byte])
    eot = v.find_token("<|endoftext|>")
    assert eot == v.eos_id == v.bos_id == 50256
    assert v.eog_ids == frozenset({eot}) and eot in v.special_ids and v.token_bytes[eot] == b""


def test_deepseek_special_and_user_defined_tokens():
    v = shared_vocab("deepseek-llm")
    assert (v.bos_id, v.eos_id) == (100000, 100001)
    assert v.eog_ids == frozenset({100001})
    assert v.token_texts[100001] == "<｜end▁of▁sentence｜>"
    assert v.token_bytes[100000] == v.token_bytes[100001] == b""
    # user-defined tokens keep their text as UTF-8 (llama.cpp token_to_piece), not byte-decoded
    uid = v.find_token("õ")
    assert v.token_types[uid] == 4 and v.token_bytes[uid] == "õ".encode()


def test_eog_by_text_and_promotion_to_control():
    phi = shared_vocab("phi-3")
    ends = {phi.find_token(t) for t in ("</s>", "<|endoftext|>", "<|end|>")}
    assert phi.eog_ids == frozenset(ends)
    # '</s>' is user-defined in the file; llama.cpp makes it a control token (no text)
    assert phi.token_bytes[phi.find_token("</s>")] == b"" and phi.token_types[2] == 3
    assert phi.token_bytes[phi.find_token("<|user|>")] == b""
    star = shared_vocab("starcoder")
    assert star.eog_ids == frozenset({0, star.find_token("<fim_pad>")})


@pytest.mark.parametrize("name", ["llama-spm", "phi-3", "gpt-2", "deepseek-llm", "deepseek-coder",
                                  "falcon", "mpt", "refact", "starcoder"])
def test_known_tokenizations_concatenate_to_the_text(name):
    v = shared_vocab(name)
    for text, ids in read_vectors(name):
        got = b"".join(v.token_bytes[i] for i in ids)
        expected = text.encode()
        if v.model == "llama" and text:
            expected = b" " + expected   # SentencePiece's added space prefix
        assert got == expected, (name, text)


def test_token_types_and_fingerprint_are_stable_and_read_only():
    v = shared_vocab("llama-spm")
    assert v.token_types.dtype == np.int8 and not v.token_types.flags.writeable
    with pytest.raises(ValueError):
        v.token_types[0] = 1
    with pytest.raises(AttributeError):
        v.eos_id = 5
    again = Vocabulary.from_gguf(VOCAB_DIR / "ggml-vocab-llama-spm.gguf")
    assert again.fingerprint() == v.fingerprint() and again == v
    assert v.fingerprint() != shared_vocab("phi-3").fingerprint()
    assert "size=32000" in repr(v)
    copy = pickle.loads(pickle.dumps(v))
    assert copy == v and copy.eos_id == v.eos_id and copy.special_ids == v.special_ids


def test_gguf_metadata_reader_reads_values():
    meta = read_gguf_metadata(VOCAB_DIR / "ggml-vocab-gpt-2.gguf") if VOCAB_DIR.is_dir() else None
    if meta is None:
        pytest.skip("shared vocabularies are absent")
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert len(meta["tokenizer.ggml.tokens"]) == 50257
    assert meta["tokenizer.ggml.merges"][0] == b"\xc4\xa0 t"      # "Ġ t"


# ------------------------------------------------------------------ synthetic vocabularies

def test_from_token_bytes_does_not_mutate_and_blanks_specials():
    pieces = [b"a", b"b", b"<end>", b"ab"]
    v = Vocabulary.from_token_bytes(pieces, eog_ids=[2], special_ids=[2], eos_id=2)
    assert pieces == [b"a", b"b", b"<end>", b"ab"]
    assert v.token_bytes == (b"a", b"b", b"", b"ab") and v.token_texts[2] == "<end>"
    assert v.special_ids == frozenset({2}) and v.eog_ids == frozenset({2}) and v.eos_id == 2
    assert v.find_token("ab") == 3 and v.bos_id is None
    other = Vocabulary.from_token_bytes(pieces, eog_ids=[3])
    assert other.fingerprint() != v.fingerprint()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        Vocabulary.from_token_bytes(pieces, eog_ids=[9])


def test_synthetic_spm_gguf(tmp_path):
    tokens = ["<unk>", "<s>", "</s>", "<0x41>", "▁hi", "<|im_end|>", "<tool>", "▁<x>▁", "<junk>"]
    types = [2, 3, 3, 6, 1, 1, 4, 4, 5]
    path = write_vocab_gguf(tmp_path / "spm.gguf", tokens, types, scores=[0.0] * len(tokens))
    v = Vocabulary.from_gguf(path)
    assert v.token_bytes[3] == b"A" and v.token_bytes[4] == b" hi"
    assert v.token_bytes[6] == b"<tool>" and v.token_bytes[7] == "▁<x>▁".encode()   # user-defined: raw text
    assert v.token_bytes[8] == b"" and 8 in v.special_ids                            # unused
    # '<|im_end|>' is found by text: it becomes the EOT, a control token, and an end of generation
    assert v.eot_id == 5 and v.token_types[5] == 3 and v.token_bytes[5] == b""
    assert v.eog_ids == frozenset({2, 5}) and (v.bos_id, v.eos_id, v.unk_id) == (1, 2, 0)
    assert v.scores is not None and len(v.scores) == len(tokens)


def test_synthetic_gpt_oss_style_end_token_is_not_eog(tmp_path):
    tokens = ["a", "<|return|>", "<|call|>", "<|end|>", "<|start|>", "<|endoftext|>"]
    path = write_vocab_gguf(tmp_path / "oss.gguf", tokens, [1, 3, 3, 3, 3, 3], model="gpt2",
                      eos_token_id=5)
    v = Vocabulary.from_gguf(path)
    assert v.eog_ids == frozenset({1, 2, 5})
    assert v.token_bytes[3] == b"<|end|>" and v.token_bytes[4] == b"<|start|>"
    assert v.bos_id is None   # the BPE default (11) is outside this vocabulary


def test_missing_token_list_names_the_field(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), arch="llama")
    w.add_tokenizer_model("llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(ModelLoadError) as err:
        Vocabulary.from_gguf(tmp_path / "m.gguf")
    assert err.value.field == "tokenizer.ggml.tokens" and str(tmp_path / "m.gguf") in str(err.value)


def test_missing_or_unknown_model_names_the_field(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "nomodel.gguf"), arch="llama")
    w.add_token_list(["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="tokenizer.ggml.model") as err:
        Vocabulary.from_gguf(tmp_path / "nomodel.gguf")
    assert err.value.field == "tokenizer.ggml.model"
    path = write_vocab_gguf(tmp_path / "t5.gguf", ["a"], model="t5")
    with pytest.raises(ModelLoadError, match="unsupported tokenizer model 't5'"):
        Vocabulary.from_gguf(path)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_bytes(b"hello, this is not a model file at all")
    with pytest.raises(ModelLoadError, match="not a GGUF file") as err:
        Vocabulary.from_gguf(bad)
    assert err.value.path == str(bad) and err.value.field == "magic"
    with pytest.raises(ModelLoadError, match="cannot read file"):
        Vocabulary.from_gguf(tmp_path / "missing.gguf")
    (tmp_path / "tiny.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match="too short"):
        Vocabulary.from_gguf(tmp_path / "tiny.gguf")


def test_truncated_file_names_the_field_being_read(tmp_path):
    tokens = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(50)]
    full = write_vocab_gguf(tmp_path / "full.gguf", tokens, [2, 3, 3] + [1] * 50).read_bytes()
    cut_at = full.index(b"tok25")            # in the middle of the token list
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[:cut_at])
    with pytest.raises(ModelLoadError, match="truncated") as err:
        Vocabulary.from_gguf(cut)
    assert err.value.field == "tokenizer.ggml.tokens" and err.value.path == str(cut)
    kv_end = len(full.rstrip(b"\0")) + 3   # the last value is int32 1; alignment padding follows
    for n in range(0, kv_end, 7):            # any cut inside the metadata fails cleanly
        cut.write_bytes(full[:n])
        with pytest.raises(ModelLoadError):
            Vocabulary.from_gguf(cut)


def test_malformed_byte_token_is_reported(tmp_path):
    path = write_vocab_gguf(tmp_path / "b.gguf", ["<unk>", "<s>", "</s>", "<0xZZ>"], [2, 3, 3, 6])
    with pytest.raises(ModelLoadError, match="byte token 3") as err:
        Vocabulary.from_gguf(path)
    assert err.value.field == "tokenizer.ggml.tokens"


def test_duplicate_token_is_reported(tmp_path):
    path = write_vocab_gguf(tmp_path / "d.gguf", ["<unk>", "a", "b", "a"])
    with pytest.raises(ModelLoadError, match="duplicate token 'a' at ids 1 and 3"):
        Vocabulary.from_gguf(path)


@pytest.mark.parametrize("old, new, name", [("halter.grammar.vocab", "halter.vocab", "Vocabulary"),
                                            ("halter.grammar.gguf_metadata", "halter.gguf", "read_gguf_metadata")])
def test_old_documented_import_paths_still_work_with_a_warning(old, new, name):
    import importlib
    import sys
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new):
        module = importlib.import_module(old)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


# ------------------------------------------------------------------ pieces read in bulk

_SPM_MARK = "▁".encode()


@pytest.mark.parametrize("model", ["llama", "gpt2"])
@pytest.mark.parametrize("odd", [b"a\x00b", b"\xe2\x96", b"x\xffy", b"\xf0\x9f"])
def test_pieces_render_as_one_at_a_time(model, odd):
    """The pieces are decoded and rendered by calls over all of them joined: a piece holding the
    separator byte, invalid UTF-8 at a piece's end or inside it, a character no GPT-2 byte maps to,
    all give what decoding and rendering each piece alone gives (llama.cpp's token_to_piece)."""
    pieces = [b"<unk>", b"<s>", b"</s>", odd, _SPM_MARK + b"hi", "\u0120hi".encode(), "中".encode(),
              b"z" + odd, b"<0x41>", b"plain"]
    types = np.array([2, 3, 3, 1, 1, 1, 1, 1, 6 if model == "llama" else 1, 1], dtype=np.int32)
    meta = {"tokenizer.ggml.model": model, "tokenizer.ggml.tokens": list(pieces),
            "tokenizer.ggml.token_type": types}
    if model == "gpt2":
        meta["tokenizer.ggml.merges"] = [b"a b"]
    v = Vocabulary.from_gguf_metadata(meta)
    texts = [p.decode("utf-8", errors="replace") for p in pieces]
    assert list(v.token_texts) == texts
    assert v.find_token(texts[3]) == 3 and v.find_token(texts[7]) == 7
    decoder = {c: b for b, c in gpt2_byte_encoder().items()}
    for i, (piece, text) in enumerate(zip(pieces, texts)):
        if types[i] != 1:
            continue
        if model == "llama":
            want = piece.replace(_SPM_MARK, b" ")
        else:
            want = bytes(decoder[c] for c in text) if all(c in decoder for c in text) else piece
        assert v.token_bytes[i] == want, (i, piece)
    assert meta["tokenizer.ggml.tokens"] == pieces          # the metadata is not changed


def test_merges_split_at_the_first_space_after_the_first_character():
    """llama.cpp splits a merge line at the first space after its first character and looks
    pairs up as (left, right); halter's table is keyed by the line, which must give the same
    rank for every pair of space-free symbols (the only symbols a byte-level BPE word holds)."""
    from halter.engine.bpe import parse_merges

    def one_by_one(lines):
        ranks = {}
        for r, line in enumerate(lines):
            left, space, right = line[1:].partition(" ")
            ranks.setdefault((line[:1] + left, right) if space else ("", ""), r)
        return ranks

    clean = ["a b", "Ġ t", "  x", "ab cd ef", "a b", "x\u4e2d y", "ab cd", "b a"]
    with_odd = clean + ["nospace", "", "a\x00 b", " lone", "ab  cd"]
    for lines in (clean, with_odd):
        want = one_by_one(lines)
        symbols = {s for line in lines for s in line.split(" ")} | {s for pair in want for s in pair}
        symbols = {s for s in symbols if s and " " not in s}
        for given in (lines, [s.encode() for s in lines]):
            ranks = parse_merges(given)
            for left in symbols:
                for right in symbols:
                    assert ranks.get(left + " " + right) == want.get((left, right)), (left, right)
