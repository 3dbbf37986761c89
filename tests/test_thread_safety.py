"""One compiled grammar shared by matchers in several threads gives exactly the single-threaded masks.

Serving engines fill masks from thread pools. A ``CompiledGrammar`` (and the parser-state space of
its ``Grammar``) memoises states, transitions and masks as matchers meet them; those caches are
filled under one lock, so threads that switch every microsecond still see complete masks.
"""
from __future__ import annotations

import json
import sys
import threading

import numpy as np

from halter import Grammar, Vocabulary
from tests.conftest import shared_path

SCHEMA = {"type": "object", "required": ["id", "name", "tags"],
          "properties": {"id": {"type": "integer", "minimum": 0},
                         "name": {"type": "string", "maxLength": 40},
                         "email": {"type": "string", "format": "email"},
                         "tags": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 4},
                         "address": {"type": "object", "properties": {"city": {"type": "string"},
                                                                      "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
                         "score": {"type": "number"}}}
DOCS = [{"id": 7, "name": "Ana Lúcia", "tags": ["a", "bé"], "address": {"city": "Porto", "zip": "40000"}},
        {"id": 123, "name": "x", "email": "x@y.org", "tags": [], "score": -1.5e3},
        {"id": 0, "name": "quote \" and \\ slash", "tags": ["one", "two", "three", "four"]},
        {"id": 42, "name": "", "tags": ["z"], "address": {}, "score": 0.25}]


def _tokens(cg, doc) -> list[int]:
    """The document written with the longest allowed token at each step (single-threaded)."""
    tb, m, out = cg.vocab.token_bytes, cg.matcher(), []
    data, pos = json.dumps(doc, ensure_ascii=False).encode(), 0
    while pos < len(data):
        best = max((t for t in m.allowed_tokens() if data.startswith(tb[t], pos)), key=lambda t: len(tb[t]))
        assert m.accept_token(int(best))
        out.append(int(best))
        pos += len(tb[best])
    return out


def _masks(cg, tokens) -> list[np.ndarray]:
    m, out = cg.matcher(), []
    for t in tokens:
        out.append(m.allowed_mask())
        assert m.accept_token(t)
    out.append(m.allowed_mask())
    return out


def test_eight_threads_on_one_compiled_grammar_give_single_threaded_masks():
    vocab = Vocabulary.from_gguf(shared_path("vocab", "ggml-vocab-gpt-2.gguf"))
    ref_cg = Grammar.from_json_schema(SCHEMA).compile(vocab, cache=False)
    docs = [_tokens(ref_cg, d) for d in DOCS]
    expected = [_masks(ref_cg, toks) for toks in docs]

    shared = Grammar.from_json_schema(SCHEMA).compile(vocab, cache=False)    # a fresh, cold one
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            start.wait()
            results[i] = _masks(shared, docs[i % len(docs)])
        except BaseException as e:     # reported below, with the thread's number
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    for i in range(8):
        want = expected[i % len(docs)]
        assert len(results[i]) == len(want)
        for step, (got, exp) in enumerate(zip(results[i], want)):
            assert (got == exp).all(), (f"thread {i}, step {step}: {int((exp & ~got).sum())} tokens masked, "
                                        f"{int((got & ~exp).sum())} allowed wrongly")
