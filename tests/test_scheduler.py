"""The continuous-batching scheduler: requests join and leave between steps, each with its own
sampler, grammar and seed, and one request's failure or cancellation leaves the others alone."""
from __future__ import annotations

import threading
import time

import pytest

from halter.engine import Model
from halter.engine.generation import Request, generate
from halter.engine.scheduler import Piece, QueueFullError, Scheduler
from halter.grammar import Grammar
from tests.conftest import tiny_path


@pytest.fixture(scope="module")
def model(tiny_gguf_dir: str) -> Model:
    return Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu", n_ctx=256, n_seq_max=4,
                      n_batch=8, progress=False)


def _letters(model: Model):
    return Grammar.from_gbnf("root ::= [a-z]+").compile(model.vocab)


def test_a_lone_request_equals_generate(model: Model) -> None:
    g = _letters(model)
    want = generate(model, "The cat", max_tokens=24, grammar=g, seed=5, temperature=0.9)
    with Scheduler(model) as s:
        got = s.submit(Request("The cat", max_tokens=24, grammar=g, seed=5,
                               sampling_fields={"temperature": 0.9})).wait(60)
    assert got.text == want.text and got.tokens == want.tokens
    assert got.finish_reason == want.finish_reason


def test_rows_keep_their_own_seeds_and_grammars_when_batched(model: Model) -> None:
    digits = Grammar.from_gbnf('root ::= [0-9]{3} "-" [0-9]{2}').compile(model.vocab)
    letters = _letters(model)
    with Scheduler(model) as s:
        jobs = [s.submit(Request(f"row {i}", max_tokens=20, grammar=digits if i % 2 else letters, seed=i))
                for i in range(4)]
        results = [j.wait(60) for j in jobs]
    for i, r in enumerate(results):
        g = digits if i % 2 else letters
        assert g.grammar.matches(r.text) or r.finish_reason == "length", (i, r.text)
        if i % 2:
            assert r.finish_reason == "grammar" and len(r.text) == 6
        assert r.seed == i


def test_requests_join_and_leave_between_steps(model: Model) -> None:
    """A request submitted while another decodes starts before that one ends, and a short one
    leaves first; its sequence is reused by the next waiting request."""
    events: list[tuple[str, str]] = []
    lock = threading.Lock()

    def sink(name: str):
        def put(ev):
            with lock:
                events.append((name, "piece" if isinstance(ev, Piece) else "end"))
        return put
    g = _letters(model)
    with Scheduler(model, n_parallel=2) as s:
        long = s.submit(Request("long one", max_tokens=60, grammar=g, seed=1, sampling_fields={"ignore_eos": True}),
                        sink=sink("long"))
        while not any(n == "long" for n, _ in events):
            time.sleep(0.001)
        short = s.submit(Request("short", max_tokens=3, grammar=g, seed=2), sink=sink("short"))
        third = s.submit(Request("third", max_tokens=3, grammar=g, seed=3), sink=sink("third"))
        for j in (long, short, third):
            j.wait(60)
    order = [n for n, kind in events if kind == "end"]
    assert order.index("short") < order.index("long")
    assert order.index("third") < order.index("long")       # took the freed sequence
    first_short = next(k for k, (n, _) in enumerate(events) if n == "short")
    assert any(n == "long" for n, _ in events[first_short:])  # long kept decoding alongside


def test_long_prompt_is_read_in_chunks_while_others_decode(model: Model) -> None:
    events: list[str] = []
    g = _letters(model)
    with Scheduler(model, n_parallel=2, n_batch=4) as s:
        a = s.submit(Request("a", max_tokens=40, grammar=g, seed=1, sampling_fields={"ignore_eos": True}),
                     sink=lambda ev: events.append("a"))
        while not events:
            time.sleep(0.001)
        b = s.submit(Request(list(range(3, 83)), max_tokens=2, seed=2), sink=lambda ev: events.append("b"))
        a.wait(60), b.wait(60)
    before_b = events[:events.index("b")].count("a")
    assert before_b >= 15          # 80 prompt tokens at 4 per step: a kept generating meanwhile


def test_a_failing_request_does_not_affect_the_others(model: Model) -> None:
    """A grammar dead end (its only token banned) ends that request with the error only."""
    only_a = Grammar.from_gbnf('root ::= "a"').compile(model.vocab)
    a_id = model.tokenizer.encode("a", add_bos=False)[0]
    g = _letters(model)
    with Scheduler(model) as s:
        ok = s.submit(Request("fine", max_tokens=10, grammar=g, seed=1))
        bad = s.submit(Request("doomed", max_tokens=10, grammar=only_a, sampling_fields={"logit_bias": {a_id: False}}))
        with pytest.raises(Exception, match="grammar"):
            bad.wait(60)
        assert ok.wait(60).text
        assert s.submit(Request("after", max_tokens=4, seed=3)).wait(60).tokens


def test_cancel_frees_the_sequence(model: Model) -> None:
    with Scheduler(model, n_parallel=1, max_queue=1) as s:
        job = s.submit(Request("x", max_tokens=200, seed=1, sampling_fields={"ignore_eos": True}))
        waiting = s.submit(Request("y", max_tokens=2, seed=2))
        with pytest.raises(QueueFullError):
            s.submit(Request("z", max_tokens=2, seed=3))
        job.cancel()
        with pytest.raises(RuntimeError, match="cancelled"):
            job.wait(60)
        assert len(waiting.wait(60).tokens) == 2
        assert s.n_running == 0


def test_bad_requests_fail_at_submit(model: Model) -> None:
    with Scheduler(model) as s:
        with pytest.raises(ValueError, match="max_tokens"):
            s.submit(Request("x", max_tokens=-1))
        with pytest.raises(ValueError, match="n_ctx"):
            s.submit(Request(list(range(3, 300)), max_tokens=1))
    with pytest.raises(ValueError, match="n_parallel"):
        Scheduler(model, n_parallel=9)


def test_requests_ending_at_their_prompt_all_finish(model: Model) -> None:
    """Several max_tokens=0 requests admitted in one step leave together with the others intact."""
    s = Scheduler(model)                                  # submit starts the loop
    try:
        jobs = [s.submit(Request(f"p{i}", max_tokens=0 if i < 3 else 5, seed=i)) for i in range(4)]
        results = [j.wait(60) for j in jobs]
    finally:
        s.close()
    assert [len(r.tokens) for r in results[:3]] == [0, 0, 0] and len(results[3].tokens) == 5
    assert {r.finish_reason for r in results[:3]} == {"length"}
