"""DRY ("Don't Repeat Yourself"): penalise the token that would extend a repeated sequence.

Port of the semantics of llama.cpp's DRY sampler (itself from koboldcpp): a repeat of length
``L >= allowed_length`` ending at the current position makes the token that continued it earlier
cost ``multiplier * base ** (L - allowed_length)``. Sequence breakers (strings such as ``"\\n"``)
cut repeats; each breaker becomes token sequences through the vocabulary, as llama.cpp does.
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Iterable, Sequence

import math

import numpy as np

from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates
from halter.sampling.cmath import logf

_F32 = np.float32
MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20
_FLOAT_MAX_LOG = 88.7228391


def _piece_bytes(piece: object) -> bytes:
    if isinstance(piece, bytes):
        return piece
    if isinstance(piece, str):
        return piece.encode("utf-8")
    raise TypeError(f"dry: vocabulary pieces must be str or bytes, got {type(piece).__name__}")


def _greedy_tokenizer(pieces: Sequence[bytes]) -> Callable[[bytes], list[int]]:
    """Longest-match tokenizer over the vocabulary pieces (used when no tokenizer is given)."""
    index: dict[bytes, int] = {}
    for i, b in enumerate(pieces):
        if b and b not in index:
            index[b] = i
    longest = max((len(b) for b in index), default=0)

    def tokenize(text: bytes) -> list[int]:
        out, i = [], 0
        while i < len(text):
            for n in range(min(longest, len(text) - i), 0, -1):
                tok = index.get(text[i:i + n])
                if tok is not None:
                    out.append(tok)
                    i += n
                    break
            else:
                i += 1  # a byte no piece covers: skip it
        return out

    return tokenize


def breaker_sequences(vocab: Sequence[object], breakers: Iterable[str],
                      tokenize: Callable[[bytes], list[int]] | None = None) -> dict[int, list[tuple[int, ...]]]:
    """Map head token -> tail token sequences for every way a breaker can start inside a token.

    A token containing the whole breaker is a single-token breaker (empty tail). A token that ends
    with a proper prefix of the breaker gets the rest of the breaker, tokenized (at most
    ``MAX_SEQ_LEN`` tokens), as its tail.
    """
    pieces = [_piece_bytes(p) for p in vocab]
    tok = tokenize or _greedy_tokenizer(pieces)
    result: dict[int, list[tuple[int, ...]]] = {}
    for raw in breakers:
        brk = _piece_bytes(raw)[:MAX_CHAR_LEN]
        if not brk:
            continue
        first = brk[:1]
        for tid, word in enumerate(pieces):
            if brk in word:
                _add(result, tid, ())
                continue
            pos = word.find(first)
            while pos != -1:
                tail_len = len(word) - pos
                if word[pos:] == brk[:tail_len]:
                    tail = tuple(int(t) for t in tok(brk[tail_len:]))[:MAX_SEQ_LEN]
                    _add(result, tid, tail)
                pos = word.find(first, pos + 1)
    return result


def _add(table: dict[int, list[tuple[int, ...]]], head: int, tail: tuple[int, ...]) -> None:
    seqs = table.setdefault(head, [])
    if tail not in seqs:
        seqs.append(tail)


class Dry(Sampler):
    """The DRY repetition penalty (``llama_sampler_init_dry``).

    Disabled when ``multiplier == 0``, ``base < 1`` or ``penalty_last_n <= 0`` (a negative window
    is 0, as ``llama_sampler_init_dry`` clamps it; ``SamplingParams`` resolves its ``-1`` = "the
    whole context" before building this sampler). Breakers are given as
    strings (needs ``vocab``: the token pieces, str or bytes, and optionally ``tokenize``) or
    directly as token sequences with ``breaker_tokens``.
    """

    name = "dry"

    def __init__(self, multiplier: float = 0.0, base: float = 1.75, allowed_length: int = 2,
                 penalty_last_n: int = -1, seq_breakers: Iterable[str] = ("\n", ":", '"', "*"), *,
                 vocab: Sequence[object] | None = None, n_ctx_train: int | None = None,
                 tokenize: Callable[[bytes], list[int]] | None = None,
                 breaker_tokens: Iterable[Sequence[int]] | None = None) -> None:
        self.multiplier = float(multiplier)
        self.base = float(base)
        self.allowed_length = int(allowed_length)
        self.penalty_last_n = max(int(penalty_last_n), 0)
        self.n_ctx_train = n_ctx_train      # kept for callers; the window is penalty_last_n
        self.seq_breakers = tuple(seq_breakers)
        self.breakers: dict[int, list[tuple[int, ...]]] = {}
        if self.enabled:
            if breaker_tokens is not None:
                for seq in breaker_tokens:
                    seq = [int(t) for t in seq]
                    if seq:
                        _add(self.breakers, seq[0], tuple(seq[1:]))
            elif self.seq_breakers:
                if vocab is None:
                    raise ValueError("dry: sequence breakers given as strings need vocab= (the token pieces) "
                                     "or breaker_tokens= (token sequences)")
                self.breakers = breaker_sequences(vocab, self.seq_breakers, tokenize)
        cap = self._effective_last_n()
        self._last: deque[int] = deque(maxlen=cap if self.enabled else 0)

    @property
    def enabled(self) -> bool:
        return _F32(self.multiplier) != 0.0 and _F32(self.base) >= 1.0 and self.penalty_last_n != 0

    def _effective_last_n(self) -> int:
        return self.penalty_last_n

    def accept(self, token: int) -> None:
        if self.enabled:
            self._last.append(int(token))

    def reset(self) -> None:
        self._last.clear()

    def _max_repeats(self) -> dict[int, int] | None:
        """Longest repeat each next token would extend; None when DRY has nothing to look at."""
        n = min(len(self._last), self.penalty_last_n)
        if n <= self.allowed_length:
            return None
        hist = list(self._last)[-n:]
        rat = hist[::-1]  # rat[i]: i-th token from the end

        rep_limit = n
        for i in range(n):
            tails = self.breakers.get(rat[i])
            if not tails:
                continue
            longest = -1
            for tail in tails:
                ln = len(tail)
                if longest < ln <= i and all(tail[o] == rat[i - o - 1] for o in range(ln)):
                    longest = ln
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed_length:
            return None

        # reverse Z-algorithm: repeat[last - k] = length of the suffix that also ends k tokens back
        repeat = [0] * n
        last = n - 1
        lt = rt = 0
        for k in range(1, n):
            if k > rt:
                m = 0
                while m + k < n and rat[m] == rat[m + k]:
                    m += 1
                repeat[last - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right_len = rt - k + 1
                if repeat[last - p] < right_len:
                    repeat[last - k] = min(repeat[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and rat[i] == rat[i - k]:
                        i += 1
                    repeat[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1

        best: dict[int, int] = {}
        for i in range(n - 1):
            length = repeat[i]
            if length >= self.allowed_length:
                tok = rat[n - 2 - i]
                if best.get(tok, -1) < length:
                    best[tok] = length
        return best

    def apply(self, c: Candidates) -> None:
        if not self.enabled:
            return
        best = self._max_repeats()
        if best is None:
            return
        tokens = [t for t in best if () not in self.breakers.get(t, [])]
        if tokens:
            base = _F32(self.base)
            # max_exponent = FLOAT_MAX_LOG / std::log(base) in float; penalty = multiplier *
            # std::pow(base, exp) in double, rounded to float
            max_exp = int(_F32(_F32(_FLOAT_MAX_LOG) / _F32(logf(base)))) if base > _F32(1.000001) else 0
            exps = [best[t] - self.allowed_length for t in tokens]
            if max_exp > 0:
                exps = [min(e, max_exp) for e in exps]
            penalty = np.array([float(_F32(self.multiplier)) * math.pow(float(base), e) for e in exps],
                               dtype=np.float64).astype(np.float32)
            tok_idx, pos = c.positions_of(np.array(tokens, dtype=np.int64))
            if pos.size:
                c.logits[pos] -= penalty[tok_idx]
        c.sorted = False

    @property
    def history(self) -> list[int]:
        return list(self._last)
