"""Sampling on the logits' device (the CUDA path, run here on CPU tensors): the same tokens as the
host chain for the same seed, with and without a grammar, and the host chain where no device
version exists."""
from __future__ import annotations

import pytest

from halter.engine.generation import Request

pytestmark = pytest.mark.slow

GRAMMAR = 'root ::= "{" [a-z]+ ":" [0-9]+ "}"'


@pytest.mark.parametrize("kw", [dict(temperature=0.9, seed=3), dict(temperature=0.0),
                                dict(temperature=1.3, top_k=0, top_p=0.9, min_p=0.02, seed=11)])
def test_device_chain_picks_the_host_chain_tokens(tiny_llama, kw) -> None:
    host = tiny_llama.generate("Once", max_tokens=24, device_sampling=False, **kw)
    dev = tiny_llama.generate("Once", max_tokens=24, device_sampling=True, **kw)
    assert dev.tokens == host.tokens and dev.finish_reason == host.finish_reason


@pytest.mark.parametrize("grammar_first", [False, True])
def test_device_chain_with_a_grammar_agrees_and_obeys_it(tiny_llama, grammar_first: bool) -> None:
    kw = dict(max_tokens=20, temperature=0.8, seed=5, grammar=GRAMMAR, grammar_first=grammar_first)
    host = tiny_llama.generate("x", device_sampling=False, **kw)
    dev = tiny_llama.generate("x", device_sampling=True, **kw)
    assert dev.tokens == host.tokens
    assert dev.text.startswith("{") and dev.text[1:2].isalpha()


def test_batch_rows_each_keep_their_own_stream(tiny_llama) -> None:
    reqs = [Request("a", max_tokens=10, seed=s, sampling_fields={"temperature": 1.0}) for s in (1, 2, 3)]
    host = tiny_llama.generate_batch(reqs)
    dev = tiny_llama.generate_batch([Request(r.prompt, max_tokens=10, seed=r.seed,
                                             sampling_fields=r.sampling_fields, device_sampling=True)
                                     for r in reqs])
    assert [r.tokens for r in dev] == [r.tokens for r in host]


def test_chains_without_a_device_version(tiny_llama) -> None:
    with pytest.raises(ValueError, match="no device version"):
        tiny_llama.generate("a", max_tokens=2, repeat_penalty=1.2, device_sampling=True)
    # auto on the CPU, or a penalty chain: the host chain runs, nothing is refused
    assert len(tiny_llama.generate("a", max_tokens=3, repeat_penalty=1.2, ignore_eos=True).tokens) == 3
