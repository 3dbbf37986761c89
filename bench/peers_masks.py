"""Peer adapters for ``bench/schema_mask_bench.py --peers``: XGrammar and llguidance on a halter vocabulary.

Each peer builds its tokenizer from halter's ``Vocabulary`` (the same token bytes, the same ids, the
same end-of-generation ids), compiles a JSON Schema (``compile``: everything up to a matcher ready
for the first token, the peer's schema-to-grammar conversion included) and replays a token id
sequence (``walk``), timing the mask fill before each token (returned) and the token's accept apart
(appended to ``accepts`` when given). ``walk`` on an already walked matcher resets it first: the second walk is the peer's steady
state (whatever the peer keeps in the compiled grammar between generations is kept).

Schema semantics are kept as close to halter's as each peer allows: whitespace is flexible
(halter's default), XGrammar runs with ``strict_mode=False`` (halter, like JSON Schema, allows
properties and items the schema does not name; XGrammar's default strict mode forbids them), and
llguidance with ``lenient=True`` (ignore keywords it cannot enforce, like halter's default mode)
unless halter runs strict. A peer that cannot be imported is reported and left out; a peer that
refuses a schema or a token raises ``PeerError`` (the bench counts the schema as skipped for it).
"""
from __future__ import annotations

import time
from importlib import metadata
from typing import Any


class PeerError(Exception):
    """The peer refused the schema, or rejected a token of the sequence."""


class XGrammarPeer:
    name = "xgrammar"

    def __init__(self, vocab, strict: bool = False) -> None:
        import xgrammar as xgr
        self.xgr = xgr
        self.version = metadata.version("xgrammar")
        self.strict = strict
        # an empty token (control tokens: <unk>, <s>) is a special token for XGrammar, never allowed
        info = xgr.TokenizerInfo(list(vocab.token_bytes), vocab_type=xgr.VocabType.RAW,
                                 vocab_size=vocab.size, stop_token_ids=sorted(vocab.eog_ids))
        # the bench has 2 cores; no compile cache, so every schema is compiled from nothing
        self.compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab.size)

    def compile(self, schema_json: str) -> Any:
        try:
            compiled = self.compiler.compile_json_schema(schema_json, any_whitespace=True, strict_mode=self.strict)
            return self.xgr.GrammarMatcher(compiled)
        except Exception as e:  # noqa: BLE001 - any refusal is a skip
            raise PeerError(f"{type(e).__name__}: {str(e)[:100]}") from e

    def walk(self, matcher, tokens: list[int], accepts: list[float] | None = None) -> list[float]:
        matcher.reset()
        fill, bm, times = matcher.fill_next_token_bitmask, self.bitmask, []
        acc = accepts if accepts is not None else []
        for tid in tokens:
            t0 = time.perf_counter()
            fill(bm)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t1 = time.perf_counter()
            ok = matcher.accept_token(tid)
            acc.append(time.perf_counter() - t1)
            if not ok:
                raise PeerError(f"rejected token {tid} at step {len(times) - 1}")
        return times


class LLGuidancePeer:
    name = "llguidance"

    def __init__(self, vocab, strict: bool = False) -> None:
        import llguidance
        import llguidance.numpy
        self.llg = llguidance
        self.version = metadata.version("llguidance")
        self.options = {"whitespace_flexible": True, "lenient": not strict}

        class _Tok:  # the byte-level view TokenizerWrapper asks for; text is never tokenized here
            eos_token_id = sorted(vocab.eog_ids)[0]
            bos_token_id = vocab.bos_id
            # llguidance wants a name for every token: control tokens get one, marked special
            tokens = [b if b else f"<special_{i}>".encode() for i, b in enumerate(vocab.token_bytes)]
            special_token_ids = sorted(set(vocab.special_ids) | {i for i, b in enumerate(vocab.token_bytes) if not b})

            def __call__(self, s):
                return []

        self.tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tok()))
        self.bitmask = llguidance.numpy.allocate_token_bitmask(1, self.tokenizer.vocab_size)
        self._fill = llguidance.numpy.fill_next_token_bitmask

    def compile(self, schema_json: str) -> Any:
        try:
            grammar = self.llg.LLMatcher.grammar_from_json_schema(schema_json, defaults=self.options)
            matcher = self.llg.LLMatcher(self.tokenizer, grammar)
        except Exception as e:  # noqa: BLE001 - any refusal is a skip
            raise PeerError(f"{type(e).__name__}: {str(e)[:100]}") from e
        if matcher.is_error():
            raise PeerError(matcher.get_error()[:100])
        return matcher

    def walk(self, matcher, tokens: list[int], accepts: list[float] | None = None) -> list[float]:
        matcher.reset()
        fill, bm, times = self._fill, self.bitmask, []
        acc = accepts if accepts is not None else []
        for tid in tokens:
            t0 = time.perf_counter()
            fill(matcher, bm, 0)
            t1 = time.perf_counter()
            times.append(t1 - t0)
            if matcher.is_error():
                raise PeerError(f"rejected token {tid} at step {len(times) - 1}: {matcher.get_error()[:80]}")
            t1 = time.perf_counter()
            ok = matcher.consume_token(tid)
            acc.append(time.perf_counter() - t1)
            if not ok:
                raise PeerError(f"rejected token {tid} at step {len(times) - 1}: {matcher.get_error()[:80]}")
        return times


def load_peers(vocab, strict: bool = False) -> list:
    """The peers that import and accept the vocabulary; says which were left out and why."""
    peers = []
    for cls in (XGrammarPeer, LLGuidancePeer):
        try:
            peers.append(cls(vocab, strict))
        except ImportError as e:
            print(f"({cls.name} not importable: skipped; {e})")
        except Exception as e:  # noqa: BLE001 - a peer failing must not stop the run
            print(f"({cls.name} could not load the vocabulary: skipped; {type(e).__name__}: {str(e)[:100]})")
    return peers
