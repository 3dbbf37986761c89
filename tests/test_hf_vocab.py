"""``Vocabulary.from_hf_tokenizer`` against ``Vocabulary.from_gguf`` on the same model in both forms
(a GGUF file and the Hugging Face folder ``transformers`` writes from it), and the ``transformers``
logits processor on that converted model with a vocabulary read from its tokenizer."""
from __future__ import annotations

import json

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")

from halter.grammar import Grammar  # noqa: E402
from halter.vocab.vocabulary import (TOKEN_BYTE, TOKEN_NORMAL, TOKEN_USER_DEFINED,  # noqa: E402
                                  Vocabulary)
from halter.integrations.transformers import GrammarLogitsProcessor  # noqa: E402

TEXT_TYPES = (TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_BYTE)
SAMPLES = ["Hello world", " {\"name\": \"Ada\", \"age\": 36}", "naïve café — 東京 🙂", "a\n\tb  c",
           "x = [1, 2, 3]\nprint(x)"]


@pytest.fixture(scope="module", params=["llama-spm", "gpt-2"])
def both_forms(request, tiny_hf_models):
    gguf, folder = tiny_hf_models[request.param]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    return request.param, tok, Vocabulary.from_hf_tokenizer(tok), Vocabulary.from_gguf(gguf)


def test_every_token_has_the_same_bytes_as_the_gguf_vocabulary(both_forms) -> None:
    name, tok, hf, gg = both_forms
    assert hf.size == gg.size == len(tok)
    assert hf.model == gg.model == {"llama-spm": "llama", "gpt-2": "gpt2"}[name]
    assert hf.token_bytes == gg.token_bytes
    assert hf.token_texts == gg.token_texts
    produces_text = np.isin(hf.token_types, TEXT_TYPES)
    assert np.array_equal(produces_text, np.isin(gg.token_types, TEXT_TYPES))
    assert hf.eos_id == gg.eos_id == tok.eos_token_id and hf.eos_id in hf.eog_ids
    assert hf.eog_ids <= gg.eog_ids            # llama.cpp also ends on more texts
    if name == "llama-spm":
        assert hf.token_bytes[hf.find_token("<0x0A>")] == b"\n"
        assert hf.token_types[hf.find_token("<0x0A>")] == TOKEN_BYTE
        assert hf.token_bytes[hf.find_token("\u2581the")] == b" the"


def test_token_bytes_spell_what_the_tokenizer_encodes(both_forms) -> None:
    name, tok, hf, _ = both_forms
    for text in SAMPLES:
        ids = tok.encode(text, add_special_tokens=False)
        data = b"".join(hf.token_bytes[i] for i in ids)
        if name == "llama-spm":      # SentencePiece may mark the start with a space ("▁Hello")
            assert data in (text.encode(), b" " + text.encode())
        else:
            assert data == text.encode()


def test_a_bare_tokenizers_tokenizer_reads_the_same(both_forms) -> None:
    _, tok, hf, _ = both_forms
    bare = Vocabulary.from_hf_tokenizer(tok.backend_tokenizer)
    assert bare.token_bytes[:hf.size] == hf.token_bytes


def test_added_tokens_eos_list_and_padding(tiny_hf_models) -> None:
    _, folder = tiny_hf_models["gpt-2"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    n = len(tok)
    tok.add_tokens(["<tool>"])                              # ordinary added text
    tok.add_special_tokens({"additional_special_tokens": ["<|sep|>"]})
    v = Vocabulary.from_hf_tokenizer(tok, eos_token_id=[n + 1], vocab_size=n + 8)
    assert v.size == n + 8
    assert v.token_bytes[n] == b"<tool>" and v.token_types[n] == TOKEN_USER_DEFINED
    assert v.token_bytes[n + 1] == b"" and n + 1 in v.special_ids
    assert v.eog_ids == {tok.eos_token_id, n + 1}
    assert all(v.token_bytes[i] == b"" and i in v.special_ids for i in range(n + 2, n + 8))
    with pytest.raises(ValueError, match="smaller"):
        Vocabulary.from_hf_tokenizer(tok, vocab_size=10)
    with pytest.raises(TypeError, match="tokenizer"):
        Vocabulary.from_hf_tokenizer(object())


@pytest.mark.slow
def test_transformers_generate_on_the_converted_model_obeys_the_schema(tiny_hf_models) -> None:
    import jsonschema
    import torch
    _, folder = tiny_hf_models["llama-spm"]
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    vocab = Vocabulary.from_hf_tokenizer(tok, vocab_size=model.config.vocab_size)
    schema = {"type": "object", "additionalProperties": False, "required": ["id", "tags"],
              "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                             "tags": {"type": "array", "maxItems": 2,
                                      "items": {"enum": ["red", "green", "blue"]}}}}
    compiled = Grammar.from_json_schema(schema, whitespace="compact").compile(vocab)
    proc = GrammarLogitsProcessor(compiled, vocab_size=model.config.vocab_size)
    ids = tok("A record:", return_tensors="pt").input_ids.repeat(3, 1)
    torch.manual_seed(0)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=60,
                         logits_processor=transformers.LogitsProcessorList([proc]),
                         pad_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    for row in out[:, ids.shape[1]:].tolist():
        assert tok.eos_token_id in row, "the grammar forces the output to end within 60 tokens"
        row = row[:row.index(tok.eos_token_id)]
        text = b"".join(vocab.token_bytes[t] for t in row).decode()
        jsonschema.validate(json.loads(text), schema)
        assert tok.decode(row) == text          # the tokenizer reads the same text back
