"""End-to-end tests of ``halter.generate`` / ``generate_batch`` on a tiny random GGUF model.

Every constrained output must match its constraint (100 seeded runs per case); where max_tokens
runs out the completion must say so and ``value`` must raise. Constraints are bounded so that
incomplete runs stay rare.
"""
from __future__ import annotations

import copy
import json
import re
from typing import Literal

import jsonschema
import pydantic
import pytest
import torch

from halter.api import generate, generate_batch
from halter.chat import ChatTemplateError
from halter.engine import Model, build_tiny_gguf
from halter.errors import GrammarError, IncompleteOutputError, SchemaError
from halter.grammar import Grammar
from halter.sampling import SamplingParams

RUNS = 100
COMPACT = {"whitespace": "compact"}
SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["n", "color", "tags"],
    "additionalProperties": False,
}


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog"]
    age: int = pydantic.Field(ge=0, le=20)
    vaccinated: bool


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    # One thread: a dim-64 model decodes ~5x faster than with threads fighting other processes.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    path = build_tiny_gguf(tmp_path_factory.mktemp("api") / "tiny.gguf", seed=3)
    yield Model.load(path, device="cpu", n_ctx=128, n_seq_max=4, progress=False)
    torch.set_num_threads(threads)


def _check_runs(model: Model, check, max_tokens: int = 60, **constraint) -> int:
    """Run RUNS seeds; every complete output passes ``check``; returns the number incomplete."""
    incomplete = 0
    for seed in range(RUNS):
        c = generate(model, "Answer:", max_tokens=max_tokens, seed=seed, **constraint)
        if c.complete:
            check(c)
        else:
            incomplete += 1
            assert c.finish_reason == "length" and len(c.tokens) == max_tokens
            with pytest.raises(IncompleteOutputError) as info:
                c.value
            assert info.value.completion is c
    assert incomplete <= RUNS // 10, f"{incomplete} of {RUNS} runs did not finish"
    return incomplete


def test_json_schema_outputs_validate(model: Model) -> None:
    def check(c) -> None:
        value = json.loads(c.text)
        jsonschema.validate(value, SCHEMA)
        assert c.value == value
    _check_runs(model, check, json_schema=SCHEMA, schema_options=COMPACT)


def test_unique_items_hold_in_generated_arrays(model: Model) -> None:
    """uniqueItems over open strings is not context-free: the check beside the grammar keeps a
    random model from closing a duplicate item (without it, 2-letter items repeat often)."""
    schema = {"type": "array", "items": {"type": "string", "pattern": "^[ab]+$"}, "minItems": 4,
              "maxItems": 4, "uniqueItems": True}
    done = 0
    for seed in range(20):
        c = generate(model, "Answer:", max_tokens=60, seed=seed, json_schema=schema, schema_options=COMPACT)
        if c.complete:
            jsonschema.validate(json.loads(c.text), schema)
            done += 1
    assert done >= 15


def test_regex_outputs_fully_match(model: Model) -> None:
    pattern = r"[a-z]{2,5}-[0-9]{1,3}"

    def check(c) -> None:
        assert re.fullmatch(pattern, c.text), c.text
        assert c.value == c.text
    _check_runs(model, check, regex=pattern)


def test_gbnf_outputs_match(model: Model) -> None:
    gbnf = 'root ::= term (op term){0,3}\nop ::= "+" | "*"\nterm ::= [0-9]{1,2} | "(" [0-9] ")"'

    def check(c) -> None:
        assert re.fullmatch(r"(\d{1,2}|\(\d\))([+*](\d{1,2}|\(\d\))){0,3}", c.text), c.text
    _check_runs(model, check, max_tokens=30, grammar=gbnf)


def test_pydantic_output_type_returns_instances(model: Model) -> None:
    def check(c) -> None:
        assert isinstance(c.value, Pet)
        assert c.value == Pet.model_validate_json(c.text)
    _check_runs(model, check, output_type=Pet, schema_options=COMPACT)


def test_python_output_types(model: Model) -> None:
    for seed in range(10):
        c = generate(model, "x", output_type=Literal["yes", "no"], max_tokens=10, seed=seed)
        assert c.complete and c.value in ("yes", "no") and c.text in ('"yes"', '"no"')
        b = generate(model, "x", output_type=bool, max_tokens=10, seed=seed)
        assert b.value is (b.text == "true")


def test_stream_yields_same_text_as_non_stream(model: Model) -> None:
    for seed in range(5):
        plain = generate(model, "Hi", json_schema=SCHEMA, max_tokens=40, seed=seed)
        stream = generate(model, "Hi", json_schema=SCHEMA, max_tokens=40, seed=seed, stream=True)
        pieces = list(stream)
        assert all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces) == plain.text == stream.completion.text
        assert stream.completion.finish_reason == plain.finish_reason
        assert stream.completion.tokens == plain.tokens


def test_batch_equals_single_runs(model: Model) -> None:
    prompts = ["a", "the quick", "{", "name:", "x y z"]
    constraints = [SCHEMA, SCHEMA, {"type": "integer"}, {"enum": ["p", "q"]}, SCHEMA]
    batch = generate_batch(model, prompts, json_schema=constraints, max_tokens=30,
                           seed=[11, 12, 13, 14, 15], schema_options=COMPACT)
    assert len(batch) == 5           # more rows than the cache has sequences: run in chunks
    for i, b in enumerate(batch):
        one = generate(model, prompts[i], json_schema=constraints[i], max_tokens=30,
                       seed=11 + i, schema_options=COMPACT)
        assert (b.text, b.tokens, b.finish_reason, b.complete) == \
            (one.text, one.tokens, one.finish_reason, one.complete)
        assert b.seed == one.seed == 11 + i


def test_batch_with_one_grammar_and_stop_strings(model: Model) -> None:
    kw = dict(regex="[a-c]{1,20}", max_tokens=25, stop=["ab"], temperature=1.5)
    batch = generate_batch(model, ["p", "q"], seed=[1, 2], **kw)
    for i, b in enumerate(batch):
        one = generate(model, ["p", "q"][i], seed=i + 1, **kw)
        assert (b.text, b.finish_reason, b.complete) == (one.text, one.finish_reason, one.complete)
        assert "ab" not in b.text


def test_max_tokens_too_small_is_flagged_incomplete(model: Model) -> None:
    c = generate(model, "x", json_schema=SCHEMA, max_tokens=3, seed=0)
    assert not c.complete and c.finish_reason == "length" and len(c.tokens) == 3
    with pytest.raises(IncompleteOutputError, match="incomplete"):
        c.value
    assert c.text                     # what was produced is still there


def test_grammar_finish_reason_and_complete_text(model: Model) -> None:
    c = generate(model, "x", grammar='root ::= "yes" | "no"', max_tokens=10, seed=0)
    assert c.complete and c.text in ("yes", "no") and c.finish_reason in ("grammar", "stop")


def test_stop_string_truncates_and_rechecks_the_grammar(model: Model) -> None:
    gbnf = 'root ::= "a" [b-c]{0,9} "END"'
    for seed in range(5):
        c = generate(model, "x", grammar=gbnf, max_tokens=20, seed=seed, stop="END")
        assert c.finish_reason == "stop_string" and not c.text.endswith("END")
        assert not c.complete         # the text without the stop string does not match


def test_at_most_one_constraint(model: Model) -> None:
    with pytest.raises(TypeError, match="json_schema and regex"):
        generate(model, "x", json_schema={}, regex="a")
    with pytest.raises(TypeError, match="grammar and output_type"):
        generate(model, "x", grammar='root ::= "a"', output_type=int)


def test_bad_inputs_have_clear_errors(model: Model) -> None:
    with pytest.raises(GrammarError) as info:
        generate(model, "x", grammar='root ::= "a" |* b')
    assert info.value.line == 1
    with pytest.raises(SchemaError, match="not valid JSON"):
        generate(model, "x", json_schema="{nope")
    with pytest.raises(TypeError, match="unknown sampling parameter.*temprature"):
        generate(model, "x", temprature=0.5)
    with pytest.raises(ValueError, match="max_tokens"):
        generate(model, "x", max_tokens=-1)
    with pytest.raises(TypeError, match="prompt must be"):
        generate(model, "x" and 3.5)


def test_schema_and_sampling_are_not_mutated(model: Model) -> None:
    schema = copy.deepcopy(SCHEMA)
    params = SamplingParams(temperature=0.7, seed=5)
    c = generate(model, "x", json_schema=schema, sampling=params, max_tokens=30, top_k=10)
    assert schema == SCHEMA and params.seed == 5 and params.top_k == 40
    assert c.seed == 5


def test_random_seed_is_recorded_and_replays(model: Model) -> None:
    a = generate(model, "x", regex="[a-z]{1,8}", max_tokens=10)
    assert isinstance(a.seed, int)
    b = generate(model, "x", regex="[a-z]{1,8}", max_tokens=10, seed=a.seed)
    assert a.text == b.text


def test_response_format_envelopes(model: Model) -> None:
    inner = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
             "additionalProperties": False}
    for rf in ({"type": "json_object", "schema": inner},
               {"type": "json_schema", "json_schema": {"name": "x", "schema": inner}}):
        c = generate(model, "x", response_format=rf, max_tokens=20, seed=0, schema_options=COMPACT)
        assert c.complete and isinstance(c.value["ok"], bool)
    with pytest.raises(ValueError, match="response_format type"):
        generate(model, "x", response_format={"type": "xml"})


def test_chat_prompts_use_the_template(model: Model) -> None:
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    with pytest.raises(ChatTemplateError, match="no chat template"):
        generate(model, msgs, max_tokens=2)
    template = ("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}")
    c = generate(model, msgs, chat_template=template, regex="[a-z]{1,4}", max_tokens=8, seed=0)
    expected = model.tokenizer.encode("<system>be brief\n<user>hi\n<assistant>", add_bos=True)
    assert c.usage.prompt_tokens == len(expected)    # BOS once, not twice
    assert c.complete and re.fullmatch("[a-z]{1,4}", c.text)
    bad = "{{ raise_exception('only user turns') }}"
    with pytest.raises(ChatTemplateError, match="only user turns"):
        generate(model, msgs, chat_template=bad)


def test_compiled_grammar_for_another_vocabulary_is_refused(model: Model) -> None:
    from halter.vocab.vocabulary import Vocabulary
    other = Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [b""], eog_ids=[256])
    cg = Grammar.from_gbnf('root ::= "a"').compile(other)
    with pytest.raises(GrammarError, match="257 tokens"):
        generate(model, "x", grammar=cg)


def test_calling_the_model_returns_the_validated_value(model: Model) -> None:
    for seed in range(3):
        pet = model("A pet:", Pet, max_tokens=60, seed=seed, schema_options=COMPACT)
        assert isinstance(pet, Pet)
        assert pet == generate(model, "A pet:", output_type=Pet, max_tokens=60, seed=seed,
                               schema_options=COMPACT).value
    assert model("x", regex="[0-9]{2}", max_tokens=5, seed=0).isdigit()
    with pytest.raises(IncompleteOutputError):
        model("x", Pet, max_tokens=2, seed=0)
    with pytest.raises(TypeError, match="streaming"):
        model("x", Pet, stream=True)


def test_output_types_keep_to_what_pydantic_parses(model: Model) -> None:
    # JSON Schema allows a leap second and a lone surrogate escape; Pydantic refuses both, so an
    # output_type's grammar must not let a model write them (the output would fail to parse).
    import datetime as dt

    from halter.api import resolve_constraint
    stamps = resolve_constraint(model, output_type=list[dt.datetime])
    assert stamps.matches('["2016-12-31T23:59:59Z"]')
    assert not stamps.matches('["2016-12-31T23:59:60Z"]')
    assert resolve_constraint(model, json_schema={"type": "array", "items": {"type": "string", "format": "date-time"}}
                              ).matches('["2016-12-31T23:59:60Z"]')
    words = resolve_constraint(model, output_type=list[str])
    assert words.matches('["\\ud83d\\ude00"]') and not words.matches('["\\ud83d"]')
