"""The grammar sampler: every token the grammar cannot accept next gets logit ``-inf``.

It wraps a token matcher (duck-typed: ``vocab_size``, ``allowed_mask()``, ``is_allowed(id)``,
``accept_token(id) -> bool``, ``reset()``; ``fill_bitmask`` is used when present) and advances it
on ``accept``. Token ids at or beyond the matcher's ``vocab_size`` (a model's padded vocabulary)
are never allowed.
"""
from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from halter.errors import NoValidTokenError
from halter.grammar.bitmask import allocate_bitmask, apply_bitmask
from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates

_MATCHER_METHODS = ("allowed_mask", "is_allowed", "accept_token", "reset")


def as_matcher(grammar: Any) -> Any:
    """A token matcher from a matcher, a compiled grammar (``.matcher()``) or a GrammarSampler."""
    if isinstance(grammar, GrammarSampler):
        return grammar.matcher
    if all(hasattr(grammar, m) for m in _MATCHER_METHODS):
        return grammar
    if hasattr(grammar, "matcher") and callable(grammar.matcher):
        return grammar.matcher()
    raise TypeError(f"expected a token matcher or a compiled grammar, got {type(grammar).__name__}")


class GrammarSampler(Sampler):
    """Mask the candidates with a grammar's token matcher; ``accept`` advances the matcher."""

    name = "grammar"

    def __init__(self, grammar: Any) -> None:
        self.matcher = as_matcher(grammar)
        self.vocab_size = int(self.matcher.vocab_size)
        self._bitmask = allocate_bitmask(None, self.vocab_size) if hasattr(self.matcher, "fill_bitmask") else None
        self.seconds = 0.0          # time spent in the matcher (masks, checks, accepts), for timings

    def apply(self, c: Candidates) -> None:
        t0 = time.perf_counter()
        try:
            self._apply(c)
        finally:
            self.seconds += time.perf_counter() - t0

    def _apply(self, c: Candidates) -> None:
        if c.size == 1:
            tok = int(c.ids[0])
            if not (tok < self.vocab_size and self.matcher.is_allowed(tok)):
                c.logits[0] = -np.inf
            return
        full = c.size >= self.vocab_size and _is_identity(c.ids, c.size)
        if full and self._bitmask is not None:
            self._bitmask.fill(-1)
            self.matcher.fill_bitmask(self._bitmask)
            apply_bitmask(c.logits, self._bitmask, vocab_size=self.vocab_size)
            return
        allowed = np.asarray(self.matcher.allowed_mask(), dtype=bool)
        ok = np.zeros(c.size, dtype=bool)
        inside = c.ids < self.vocab_size
        ok[inside] = allowed[c.ids[inside]]
        c.logits[~ok] = -np.inf

    def allowed_mask(self) -> np.ndarray:
        return np.asarray(self.matcher.allowed_mask(), dtype=bool)

    def is_allowed(self, token: int) -> bool:
        token = int(token)
        t0 = time.perf_counter()
        ok = 0 <= token < self.vocab_size and bool(self.matcher.is_allowed(token))
        self.seconds += time.perf_counter() - t0
        return ok

    def accept(self, token: int) -> None:
        token = int(token)
        t0 = time.perf_counter()
        ok = 0 <= token < self.vocab_size and self.matcher.accept_token(token)
        self.seconds += time.perf_counter() - t0
        if not ok:
            raise NoValidTokenError(f"grammar sampler: token {token} is not allowed by the grammar here; "
                                    "only accept tokens the grammar sampler let through")

    def reset(self) -> None:
        self.matcher.reset()

    def clone(self) -> "GrammarSampler":
        m = self.matcher
        for method in ("copy", "fork", "clone"):
            if hasattr(m, method):
                return GrammarSampler(getattr(m, method)())
        return GrammarSampler(copy.deepcopy(m))


def _is_identity(ids: np.ndarray, n: int) -> bool:
    """Whether the first ``n`` entries are tokens ``0..n-1`` in order (a fresh logits row)."""
    return ids.shape[0] == n and bool(np.array_equal(ids, np.arange(n, dtype=ids.dtype)))
