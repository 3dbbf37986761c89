"""Samplers that shift chosen logits: logit bias and repetition penalties.

Both touch only the token ids they concern (a handful of positions), never the whole row.
"""
from __future__ import annotations

from collections import Counter, deque
from typing import Iterable, Mapping, Union

import numpy as np

from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates

_F32 = np.float32

Biases = Union[Mapping[int, float], Iterable[tuple[int, float]]]


class LogitBias(Sampler):
    """Add a fixed bias to chosen tokens' logits (``-inf`` bans a token).

    ``biases`` is a ``{token: bias}`` mapping or a sequence of ``(token, bias)`` pairs (a token
    may repeat; every pair is applied, as in llama.cpp).
    """

    name = "logit-bias"

    def __init__(self, n_vocab: int, biases: Biases) -> None:
        self.n_vocab = int(n_vocab)
        pairs = list(biases.items()) if isinstance(biases, Mapping) else list(biases)
        tokens, values = [], []
        for item in pairs:
            try:
                tok, bias = item
            except (TypeError, ValueError):
                raise ValueError(f"logit_bias: expected (token, bias) pairs, got {item!r}") from None
            if isinstance(tok, bool) or not isinstance(tok, (int, np.integer)):
                raise TypeError(f"logit_bias: token ids must be ints, got {tok!r}")
            if not 0 <= tok < self.n_vocab:
                raise ValueError(f"logit_bias: token {tok} is outside the vocabulary [0, {self.n_vocab})")
            tokens.append(int(tok))
            values.append(float(bias))
        self.tokens = np.array(tokens, dtype=np.int64)
        self.biases = np.array(values, dtype=np.float32)

    def apply(self, c: Candidates) -> None:
        """As ``llama_sampler_logit_bias_apply``: every bias of a token still at its own index is
        added there; a token that moved gets only the first bias listed for it, wherever it is."""
        if self.tokens.size == 0:
            return
        n = c.size
        tok = self.tokens
        direct = np.zeros(tok.shape, dtype=bool)
        inside = tok < n
        direct[inside] = c.ids[tok[inside]] == tok[inside]
        if direct.any():
            np.add.at(c.logits, tok[direct], self.biases[direct])
        if direct.all():
            return
        first: dict[int, np.float32] = {}
        for t, b in zip(tok[~direct].tolist(), self.biases[~direct]):
            first.setdefault(t, b)
        wanted = np.fromiter(first.keys(), dtype=np.int64, count=len(first))
        hit = np.flatnonzero(np.isin(c.ids, wanted))
        if hit.size:
            c.logits[hit] += np.array([first[int(i)] for i in c.ids[hit]], dtype=np.float32)

    def clone(self) -> "LogitBias":
        return LogitBias(self.n_vocab, list(zip(self.tokens.tolist(), self.biases.tolist())))


class Penalties(Sampler):
    """Repeat, frequency and presence penalties over the last ``penalty_last_n`` accepted tokens.

    For a token seen ``count`` times: a positive logit is divided by ``penalty_repeat`` (a
    non-positive one multiplied), then ``count * penalty_freq + penalty_present`` is subtracted.
    ``penalty_last_n == 0`` or neutral values (1, 0, 0) disable it; ``-1`` is treated as 0 here
    (llama.cpp's common layer maps -1 to the context size before it gets this far).
    """

    name = "penalties"

    def __init__(self, penalty_last_n: int = 64, penalty_repeat: float = 1.0,
                 penalty_freq: float = 0.0, penalty_present: float = 0.0) -> None:
        self.penalty_last_n = max(int(penalty_last_n), 0)
        self.penalty_repeat = float(penalty_repeat)
        self.penalty_freq = float(penalty_freq)
        self.penalty_present = float(penalty_present)
        self._prev: deque[int] = deque()
        self._count: Counter[int] = Counter()

    def accept(self, token: int) -> None:
        if self.penalty_last_n == 0:
            return
        token = int(token)
        self._count[token] += 1
        if len(self._prev) >= self.penalty_last_n:
            old = self._prev.popleft()
            self._count[old] -= 1
            if self._count[old] == 0:
                del self._count[old]
        self._prev.append(token)

    def apply(self, c: Candidates) -> None:
        if self.penalty_last_n == 0 or (_F32(self.penalty_repeat) == 1.0 and _F32(self.penalty_freq) == 0.0
                                        and _F32(self.penalty_present) == 0.0):
            return
        if self._count:
            tokens = np.fromiter(self._count.keys(), dtype=np.int64, count=len(self._count))
            counts = np.fromiter(self._count.values(), dtype=np.int64, count=len(self._count))
            tok_idx, pos = c.positions_of(tokens)
            if pos.size:
                lg = c.logits[pos]
                rep = _F32(self.penalty_repeat)
                lg = np.where(lg <= 0, lg * rep, lg / rep).astype(np.float32)
                cnt = counts[tok_idx].astype(np.float32)
                lg -= cnt * _F32(self.penalty_freq) + (cnt > 0).astype(np.float32) * _F32(self.penalty_present)
                c.logits[pos] = lg
        c.sorted = False

    def reset(self) -> None:
        self._prev.clear()
        self._count.clear()

    @property
    def history(self) -> list[int]:
        """The tokens the penalties currently look at, oldest first."""
        return list(self._prev)
