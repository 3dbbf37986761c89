"""The transformers ``LogitsProcessor``: a tiny random ``LlamaForCausalLM`` (no download) with a
synthetic byte-level vocabulary must produce text each row's grammar accepts."""
from __future__ import annotations

import re

import pytest
import torch

transformers = pytest.importorskip("transformers")

from halter.errors import HalterError  # noqa: E402
from halter.grammar import Grammar  # noqa: E402
from halter.vocab.vocabulary import Vocabulary  # noqa: E402
from halter.integrations.transformers import GrammarLogitsProcessor  # noqa: E402

EOS = 256
EXTRA = [b"true", b"false", b'"a":', b"12", b", "]
N_VOCAB = 257 + len(EXTRA)
INT_OBJ = re.compile(rb'\{"a":(0|[1-9][0-9]{0,2})\}')
BOOLS = re.compile(rb"\[(true|false)(, (true|false)){0,2}\]")


@pytest.fixture(scope="module")
def setup():
    token_bytes = [bytes([b]) for b in range(256)] + [b""] + EXTRA
    vocab = Vocabulary.from_token_bytes(token_bytes, eog_ids=[EOS], eos_id=EOS)
    cfg = transformers.LlamaConfig(vocab_size=N_VOCAB, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=128, eos_token_id=EOS, pad_token_id=EOS,
                                   bos_token_id=0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    obj = Grammar.from_gbnf('root ::= "{\\"a\\":" ("0" | [1-9] [0-9]{0,2}) "}"').compile(vocab)
    bools = Grammar.from_gbnf('root ::= "[" b (", " b){0,2} "]"\nb ::= "true" | "false"').compile(vocab)
    return model, vocab, obj, bools


def _texts(out: torch.Tensor, prompt_len: int, vocab: Vocabulary) -> list[tuple[bytes, bool]]:
    rows = []
    for row in out[:, prompt_len:].tolist():
        ended = EOS in row
        row = row[:row.index(EOS)] if ended else row
        rows.append((b"".join(vocab.token_bytes[t] for t in row), ended))
    return rows


def _generate(model, proc, prompts: torch.Tensor, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    return model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                          max_new_tokens=20, logits_processor=transformers.LogitsProcessorList([proc]),
                          pad_token_id=EOS, eos_token_id=EOS)


def test_per_row_grammars_are_obeyed_and_the_processor_resets(setup) -> None:
    model, vocab, obj, bools = setup
    proc = GrammarLogitsProcessor([obj, bools])
    finished = 0
    for seed in range(6):                         # one processor reused: it resets per prompt
        prompts = torch.randint(0, 256, (2, 3 + seed % 2))
        out = _generate(model, proc, prompts, seed)
        (t0, e0), (t1, e1) = _texts(out, prompts.shape[1], vocab)
        for text, ended, pattern in ((t0, e0, INT_OBJ), (t1, e1, BOOLS)):
            if ended:
                assert pattern.fullmatch(text), text
                finished += 1
            else:                                  # ran out of tokens: a prefix of a valid output
                assert len(text) > 0
    assert finished >= 8


def test_one_grammar_for_every_row(setup) -> None:
    model, vocab, obj, _ = setup
    prompts = torch.randint(0, 256, (3, 4))
    out = _generate(model, GrammarLogitsProcessor(obj), prompts, 1)
    for text, ended in _texts(out, 4, vocab):
        if ended:
            assert INT_OBJ.fullmatch(text), text


def test_misuse_fails_loudly(setup) -> None:
    model, vocab, obj, bools = setup
    with pytest.raises(ValueError, match="2 grammars for a batch of 3"):
        _generate(model, GrammarLogitsProcessor([obj, bools]), torch.randint(0, 256, (3, 4)), 0)
    with pytest.raises(TypeError, match="CompiledGrammar"):
        GrammarLogitsProcessor(Grammar.from_gbnf('root ::= "a"'))
    proc = GrammarLogitsProcessor(obj)
    ids = torch.randint(0, 256, (1, 4))
    scores = torch.zeros(1, N_VOCAB)
    proc(ids, scores)
    with pytest.raises(HalterError, match="twice"):
        proc(ids, scores)
    bad = torch.cat([ids, torch.tensor([[ord("x")]])], dim=1)   # a token the grammar forbids
    with pytest.raises(HalterError, match="not allowed"):
        proc(bad, scores)
    with pytest.raises(ValueError, match="columns"):
        GrammarLogitsProcessor(obj)(ids, torch.zeros(1, 100))


def test_masked_scores_allow_exactly_the_grammar(setup) -> None:
    _, vocab, obj, _ = setup
    proc = GrammarLogitsProcessor(obj, vocab_size=N_VOCAB + 3)
    scores = torch.zeros(1, N_VOCAB + 3)
    out = proc(torch.tensor([[1, 2]]), scores)
    assert torch.isfinite(out).nonzero()[:, 1].tolist() == [ord("{")]
    assert torch.equal(scores, torch.zeros(1, N_VOCAB + 3))   # input not modified
