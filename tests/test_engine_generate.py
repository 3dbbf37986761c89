"""The generation loop: feeding tokens back, stopping, streaming, context shift, CFG, sampling."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import Greedy
from halter import Model
from halter.engine.generation import complete_utf8_prefix


class Script:
    """Emits a fixed list of tokens (byte-level vocabulary: token id == byte value)."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens, self.rows = list(tokens), []

    def sample(self, logits) -> int:
        self.rows.append(np.array(logits))
        return self.tokens[len(self.rows) - 1]

    def accept(self, token: int) -> None:
        pass


@pytest.fixture
def model(tiny_llama: Model) -> Model:
    tiny_llama.cache.clear()
    return tiny_llama


PROMPT = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]          # "hello world"


def test_greedy_generation_feeds_each_token_back(model: Model) -> None:
    res = model.generate(PROMPT, max_tokens=12, sampler=Greedy())
    assert res.finish_reason == "length" and len(res.tokens) == 12
    for i, tok in enumerate(res.tokens):       # each token is the argmax given everything before it
        assert int(model.logits(PROMPT + res.tokens[:i])[-1].argmax()) == tok
    assert res.usage.prompt_tokens == len(PROMPT) and res.timings.generated_tokens == 12


def test_end_of_generation_token_stops(model: Model) -> None:
    eos = model.vocab.eos_id
    res = model.generate(PROMPT, max_tokens=50, sampler=Script([97, 98, eos, 99]))
    assert res.finish_reason == "stop" and res.tokens == [97, 98] and res.text == "ab"


def test_stop_string_is_cut_and_never_streamed(model: Model) -> None:
    text = "say STOP now"
    stream = model.generate(PROMPT, max_tokens=50, sampler=Script(list(text.encode())),
                            stop=["STOP"], stream=True)
    pieces = list(stream)
    assert "".join(pieces) == "say " == stream.completion.text
    assert stream.completion.finish_reason == "stop_string"
    assert not any("S" in p for p in pieces)


def test_streaming_never_splits_a_utf8_character(model: Model) -> None:
    text = "héllo 😀 wörld"
    stream = model.generate(PROMPT, max_tokens=len(text.encode()),
                            sampler=Script(list(text.encode())), stream=True)
    pieces = list(stream)
    assert "".join(pieces) == text and all("\ufffd" not in p for p in pieces)
    assert len(pieces) > 5 and stream.completion.finish_reason == "length"


def test_complete_utf8_prefix() -> None:
    emoji = "😀".encode()
    assert complete_utf8_prefix(b"ab" + emoji[:3]) == 2
    assert complete_utf8_prefix(b"ab" + emoji) == 6
    assert complete_utf8_prefix("é".encode()[:1]) == 0


class GreedyNoEnd(Greedy):
    """Argmax over everything but the end-of-generation token, so the run is long."""

    def __init__(self, eos: int) -> None:
        super().__init__()
        self.eos = eos

    def sample(self, logits) -> int:
        logits = np.array(logits)
        logits[self.eos] = -np.inf
        return int(logits.argmax())


def test_context_shift_keeps_generating(model: Model) -> None:
    n_keep = 3
    eos = model.vocab.eos_id
    res = model.generate(PROMPT, max_tokens=150, sampler=GreedyNoEnd(eos), n_keep=n_keep)  # n_ctx 64
    assert len(res.tokens) == 150 and res.timings.context_shifts >= 3
    positions = model.cache.seq_positions(0)
    assert positions.tolist() == list(range(len(positions))) and len(positions) <= model.n_ctx
    # before the first shift, the output is exactly the unshifted greedy continuation
    ref = model.generate(PROMPT, max_tokens=40, sampler=GreedyNoEnd(eos))
    assert res.tokens[:40] == ref.tokens


def test_context_shift_follows_llama_cpp(model: Model) -> None:
    from halter.engine.generation import Timings, shift_context as _shift_context

    model.eval_prompt(list(range(64)), 0)
    kept_keys = model.cache.k[:, 0, :, :4].clone()
    _shift_context(model, 0, 4, Timings())                     # drop (64 - 4) // 2 = 30 tokens
    assert model.cache.seq_positions(0).tolist() == list(range(34))
    assert (model.cache.k[:, 0, :, :4] == kept_keys).all()


def test_prompt_longer_than_context_is_an_error(model: Model) -> None:
    with pytest.raises(ValueError, match="prompt has 70 tokens"):
        model.generate([1] * 70, max_tokens=1, sampler=Greedy())


def test_cfg_combines_log_probabilities(model: Model) -> None:
    neg = [110, 111, 112]
    script = Script([97, 98])
    model.generate(PROMPT, max_tokens=2, sampler=script, cfg_negative_prompt=neg, cfg_scale=1.5)
    lp = model.logits(PROMPT)[-1].double().log_softmax(-1).numpy()
    lg = model.logits(neg)[-1].double().log_softmax(-1).numpy()
    np.testing.assert_allclose(script.rows[0], 1.5 * (lp - lg) + lg, rtol=1e-4, atol=1e-4)
    # second step: both sequences were fed the sampled token
    lp2 = model.logits(PROMPT + [97])[-1].double().log_softmax(-1).numpy()
    lg2 = model.logits(neg + [97])[-1].double().log_softmax(-1).numpy()
    np.testing.assert_allclose(script.rows[1], 1.5 * (lp2 - lg2) + lg2, rtol=1e-4, atol=1e-4)


def test_cfg_scale_one_is_plain_generation(model: Model) -> None:
    a = model.generate(PROMPT, max_tokens=8, sampler=Greedy(), cfg_negative_prompt=[5], cfg_scale=1.0)
    b = model.generate(PROMPT, max_tokens=8, sampler=Greedy())
    assert a.tokens == b.tokens


def test_sampling_params_and_seed_reproduce(model: Model) -> None:
    a = model.generate(PROMPT, max_tokens=10, temperature=1.0, seed=42)
    b = model.generate(PROMPT, max_tokens=10, temperature=1.0, seed=42)
    greedy = model.generate(PROMPT, max_tokens=10, temperature=0.0)
    assert a.tokens == b.tokens
    assert greedy.tokens == model.generate(PROMPT, max_tokens=10, sampler=Greedy()).tokens


def test_bad_arguments_are_clear(model: Model) -> None:
    with pytest.raises(ValueError, match="stop strings"):
        model.generate(PROMPT, max_tokens=1, sampler=Greedy(), stop=[""])
    with pytest.raises(TypeError, match="not both"):
        model.generate(PROMPT, max_tokens=1, sampler=Greedy(), temperature=0.5)
    with pytest.raises(ValueError, match="empty"):
        model.generate([], max_tokens=1, sampler=Greedy())


GRAMMAR = 'root ::= "{\\"n\\": " [1-9] [0-9]* "}"'


@pytest.mark.parametrize("grammar_first", [False, True])
def test_grammar_constrains_sampled_output(model: Model, grammar_first: bool) -> None:
    import halter.grammar as grammar_mod
    compiled = grammar_mod.Grammar.from_gbnf(GRAMMAR).compile(model.vocab)
    matcher = compiled.matcher()
    for seed in range(3):
        res = model.generate(PROMPT, max_tokens=40, grammar=matcher, temperature=1.0, seed=seed,
                             grammar_first=grammar_first)
        assert res.text.startswith('{"n": ') and res.text[6:7] in "123456789"
        if res.finish_reason == "stop":
            assert grammar_mod.Grammar.from_gbnf(GRAMMAR).matches(res.text)
    assert matcher.num_accepted == 0                      # the caller's matcher was not advanced


def test_grammar_end_is_its_own_finish_reason_and_the_matcher_comes_back(model: Model) -> None:
    for grammar_first in (False, True):
        res = model.generate(PROMPT, max_tokens=10, sampler=Greedy(), grammar='root ::= "ab"',
                             grammar_first=grammar_first)
        assert (res.text, res.finish_reason) == ("ab", "grammar")
        assert res.matcher.is_finished() and res.matcher.num_accepted == 2
    cut = model.generate(PROMPT, max_tokens=1, sampler=Greedy(), grammar='root ::= "ab"')
    assert cut.finish_reason == "length" and not cut.matcher.is_accepting()
    plain = model.generate(PROMPT, max_tokens=2, sampler=Greedy())
    assert plain.matcher is None


def test_cpu_builds_a_mask_only_when_the_sampled_token_is_rejected(model: Model, monkeypatch) -> None:
    """On the CPU nothing overlaps the forward pass, so resample-on-reject checks the chain's token
    alone (llama.cpp's common sampler); grammar-first masks every step. Both count as grammar time."""
    from halter.grammar.token_matcher import TokenMatcher
    calls = []
    for name in ("fill_bitmask", "allowed_mask"):
        original = getattr(TokenMatcher, name)
        monkeypatch.setattr(TokenMatcher, name,
                            lambda self, *a, _o=original, _n=name, **k: (calls.append(_n), _o(self, *a, **k))[1])
    grammar = 'root ::= "a" [a-z]*'
    res = model.generate(PROMPT, max_tokens=3, sampler=Script([97, 98, 99]), grammar=grammar)
    assert res.text == "abc" and calls == [] and res.timings.mask_ms > 0
    res = model.generate(PROMPT, max_tokens=3, sampler=Script([97, 65, 98, 99]), grammar=grammar)
    assert res.text == "abc" and len(calls) == 1           # "A" was rejected: one mask, then resampled
    calls.clear()
    res = model.generate(PROMPT, max_tokens=3, sampler=Script([97, 98, 99]), grammar=grammar, grammar_first=True)
    assert res.text == "abc" and len(calls) == 3


def test_batch_of_requests_equals_single_runs(model: Model) -> None:
    from halter.engine.generation import Request

    neg = [110, 111, 112]
    requests = [
        Request(PROMPT, max_tokens=12, seed=1, sampling_fields={"temperature": 1.0}),
        Request(PROMPT[:5], max_tokens=9, seed=2, sampling_fields={"temperature": 1.0},
                cfg_negative_prompt=neg, cfg_scale=1.5),                 # two cache sequences
        Request([97, 98], max_tokens=20, seed=3, grammar=GRAMMAR, sampling_fields={"temperature": 1.0}),
        Request(PROMPT[3:], max_tokens=15, sampler=Greedy(), stop=["e"]),
        Request([120], max_tokens=0, seed=4),
    ]                                 # 6 sequences for a 4-sequence cache: some wait for a free one
    batch = model.generate_batch(requests)
    assert [r.timings.generated_tokens for r in batch][-1] == 0 and batch[-1].finish_reason == "length"
    for req, got in zip(requests, batch):
        one = model.generate(req.prompt, max_tokens=req.max_tokens, seed=req.seed,
                             sampler=Greedy() if req.sampler is not None else None, grammar=req.grammar,
                             stop=req.stop, cfg_negative_prompt=req.cfg_negative_prompt,
                             cfg_scale=req.cfg_scale, **req.sampling_fields)
        assert (got.tokens, got.text, got.finish_reason, got.seed) == \
            (one.tokens, one.text, one.finish_reason, one.seed)
    assert batch[0].seed == 1 and batch[0].matcher is None and batch[2].matcher is not None


def test_batch_request_errors_name_the_request(model: Model) -> None:
    from halter.engine.generation import Request

    with pytest.raises(ValueError, match=r"empty .*\(request 1\)"):
        model.generate_batch([Request(PROMPT, sampler=Greedy()), Request([], sampler=Greedy())])
