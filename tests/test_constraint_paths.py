"""One constraint, every entry point: ``Grammar.from_*``, ``halter.generate``, ``generate_batch``,
``Model.generate``, ``model(...)``, ``halter run`` and the transformers logits processor all resolve
a constraint through ``halter.constraints``, so they accept the same language and, on the same
model with the same seed, write the same text."""
from __future__ import annotations

import json

import pytest
import torch

from halter import constraints
from halter.api import generate, generate_batch
from halter.cli import main
from halter.engine import Model, build_tiny_gguf
from halter.errors import HalterError, IncompleteOutputError
from halter.grammar import Grammar

HARD_REGEX = "(a|b)*a(a|b){16}"          # one automaton for it is too large: built with a rule per group
UNIQUE = {"type": "array", "items": {"type": "string", "maxLength": 1}, "uniqueItems": True, "maxItems": 3}
CASES = [
    ("regex", HARD_REGEX, lambda: Grammar.from_regex(HARD_REGEX)),
    ("regex", "[0-9]{2}-[a-c]+", lambda: Grammar.from_regex("[0-9]{2}-[a-c]+")),
    ("json_schema", UNIQUE, lambda: Grammar.from_json_schema(UNIQUE)),
    ("grammar", 'root ::= "x" [0-9]{1,3} ("," [a-z])?', lambda: Grammar.from_gbnf('root ::= "x" [0-9]{1,3} ("," [a-z])?')),
]
IDS = ["hard-regex", "regex", "unique-items", "gbnf"]
N_CTX, MAX_TOKENS, SEEDS = 128, 40, (0, 1, 2)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = build_tiny_gguf(tmp_path_factory.mktemp("paths") / "tiny.gguf", seed=11)
    yield path, Model.load(path, device="cpu", n_ctx=N_CTX, n_seq_max=4, progress=False)
    torch.set_num_threads(threads)


def _is_prefix(grammar: Grammar, text: str) -> bool:
    m = grammar.matcher()
    return bool(m.accept_bytes(text.encode()))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_entry_point_writes_the_same_text(tiny, case, capsys) -> None:
    path, model = tiny
    kind, spec, direct = case
    reference = direct()
    resolved = constraints.resolve(**{kind: spec})
    assert str(resolved.grammar) == str(reference)
    assert (resolved.grammar.text_check is None) == (reference.text_check is None)
    batch = generate_batch(model, ["Q:"] * len(SEEDS), max_tokens=MAX_TOKENS, seed=list(SEEDS), **{kind: spec})
    for seed, row in zip(SEEDS, batch):
        one = generate(model, "Q:", max_tokens=MAX_TOKENS, seed=seed, **{kind: spec})
        assert row.text == one.text and row.complete == one.complete
        if one.complete:
            assert reference.matches(one.text)
        else:
            assert _is_prefix(reference, one.text) and not reference.matches(one.text)
        engine = model.generate("Q:", max_tokens=MAX_TOKENS, seed=seed, **{kind: spec})
        assert engine.text == one.text
        if one.complete:
            assert model("Q:", max_tokens=MAX_TOKENS, seed=seed, **{kind: spec}) == one.value
        else:
            with pytest.raises(IncompleteOutputError):
                model("Q:", max_tokens=MAX_TOKENS, seed=seed, **{kind: spec})
        flag = {"regex": "--regex", "json_schema": "-j", "grammar": "--grammar"}[kind]
        rc = main(["run", "-m", path, "-p", "Q:", flag, spec if isinstance(spec, str) else json.dumps(spec),
                   "-n", str(MAX_TOKENS), "-s", str(seed), "-c", str(N_CTX), "--device", "cpu", "--json-output"])
        out = json.loads(capsys.readouterr().out)
        assert rc == (0 if one.complete else 3)
        assert out["text"] == one.text and out["complete"] == one.complete


def test_the_hard_regex_compiles_everywhere(tiny) -> None:
    # It used to compile through Grammar.from_regex but fail as "too complex" through generate.
    _, model = tiny
    cg = constraints.resolve(regex=HARD_REGEX).compile(model.vocab)
    assert cg.grammar.matches("b" + "a" * 17) and not cg.grammar.matches("b" + "a" * 16)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_transformers_processor_resolves_the_same_grammar(case) -> None:
    transformers = pytest.importorskip("transformers")
    from halter.vocab.vocabulary import Vocabulary
    from halter.integrations.transformers import GrammarLogitsProcessor

    kind, spec, direct = case
    eos = 256
    vocab = Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [b""], eog_ids=[eos], eos_id=eos)
    proc = GrammarLogitsProcessor.from_constraint(vocab, **{kind: spec})
    reference = direct()
    cfg = transformers.LlamaConfig(vocab_size=257, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                                   eos_token_id=eos, pad_token_id=eos, bos_token_id=0)
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(cfg).eval()
    prompts = torch.tensor([[0, 65, 66]] * 3)
    out = hf.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, max_new_tokens=30,
                      logits_processor=transformers.LogitsProcessorList([proc]), pad_token_id=eos,
                      eos_token_id=eos)
    for row in out[:, 3:].tolist():
        ended = eos in row
        text = bytes(row[:row.index(eos)] if ended else row).decode("utf-8", "replace")
        assert reference.matches(text) if ended else _is_prefix(reference, text)


def test_several_constraints_are_refused_everywhere(tiny) -> None:
    _, model = tiny
    with pytest.raises(TypeError, match="at most one"):
        constraints.resolve(regex="a", grammar='root ::= "a"')
    with pytest.raises(TypeError, match="at most one"):
        generate(model, "x", regex="a", json_schema={})
    with pytest.raises(TypeError, match="at most one"):
        model.generate("x", regex="a", json_schema={})


def test_a_response_format_of_the_wrong_shape_is_a_schema_error() -> None:
    with pytest.raises(HalterError, match="response_format"):
        constraints.resolve(response_format={"type": "xml"})
    assert constraints.resolve(response_format={"type": "text"}).grammar is None
