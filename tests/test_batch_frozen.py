"""Batches run on the scheduler give the tokens the earlier static batch loop gave: frozen outputs
of a tiny model for rows that differ in grammar, stop strings, max_tokens, greedy and seeded sampling."""
from __future__ import annotations

import pytest

import halter
from halter.engine.generation import Request, generate_batch

G = 'root ::= "{\\"n\\": " [1-9] [0-9]* "}"'

# tokens and finish reasons the static batch loop produced for these requests (tiny_llama, seed 7)
ENGINE_FROZEN = [[[214, 282, 276, 125, 131, 286, 215, 157, 302, 99, 155, 270], "length"], [[123, 34, 110, 34, 58, 32, 57, 49, 54, 57, 50, 125], "grammar"], [[217, 35, 74, 154, 273, 277, 237, 242, 73, 16, 35, 308, 58, 94, 154], "length"], [[302, 108, 106, 111], "stop"], [[97, 98, 52, 55, 52, 55, 52, 55, 50], "length"], [[], "length"]]

API_FROZEN = [[[56, 53, 50, 51, 50], "grammar", True], [[54, 46, 48, 48, 48, 48, 48, 48, 48], "stop", True], [[111, 110, 298, 307, 111, 110, 298, 121, 106], "stop", True], [[209, 243, 160, 204, 205, 237, 5, 198, 48, 27], "length", True], [[121, 275], "grammar", True]]


def _requests() -> list[Request]:
    return [
        Request([104, 101, 108, 108, 111], max_tokens=12, seed=1, sampling_fields={"temperature": 1.0}),
        Request([97, 98], max_tokens=20, seed=3, grammar=G, sampling_fields={"temperature": 1.0}),
        Request([104, 101, 108], max_tokens=15, sampling_fields={"temperature": 0.0}, stop=["e"]),
        Request([120, 121], max_tokens=7, seed=5, grammar="root ::= [a-z]+", sampling_fields={"temperature": 0.8}),
        Request([110, 111, 112], max_tokens=9, seed=9, sampling_fields={"temperature": 0.0},
                grammar='root ::= "ab" [0-9]*'),
        Request([120], max_tokens=0, seed=4),
    ]                                        # 6 requests for 4 sequences: two wait for a free one


def test_engine_batch_gives_the_frozen_tokens(tiny_llama) -> None:
    tiny_llama.cache.clear()
    got = [[c.tokens, c.finish_reason] for c in generate_batch(tiny_llama, _requests())]
    assert got == ENGINE_FROZEN
    assert [c.tokens for c in tiny_llama.generate_batch(_requests())] == [t for t, _ in ENGINE_FROZEN]


@pytest.mark.slow
def test_api_batch_gives_the_frozen_tokens(tiny_llama) -> None:
    out = halter.generate_batch(tiny_llama, ["a", "bb", "ccc", "dd", "e"],
                                regex=[r"[0-9]{2,5}", None, "[a-z]+", None, "(yes|no)"],
                                json_schema=[None, {"type": "integer"}, None, None, None],
                                max_tokens=10, seed=[1, 2, 3, 4, 5], stop=["z"], temperature=0.9)
    assert [[c.tokens, c.finish_reason, c.complete] for c in out] == API_FROZEN
    for i, c in enumerate(out):              # and each row equals its single run
        one = halter.generate(tiny_llama, ["a", "bb", "ccc", "dd", "e"][i], max_tokens=10, seed=i + 1,
                              stop=["z"], temperature=0.9,
                              **({0: {"regex": r"[0-9]{2,5}"}, 1: {"json_schema": {"type": "integer"}},
                                  2: {"regex": "[a-z]+"}, 4: {"regex": "(yes|no)"}}.get(i, {})))
        assert (one.tokens, one.finish_reason, one.complete) == (c.tokens, c.finish_reason, c.complete)
