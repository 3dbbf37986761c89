"""Samplers that pick the token: greedy, dist (seeded), mirostat v1 and v2.

``Dist`` reproduces llama.cpp's stream exactly: float32 ``expf`` weights summed in double, one
``std::uniform_real_distribution<double>`` draw from ``std::mt19937`` (two 32-bit words), and the
first candidate (in the array's current order) whose running sum reaches ``draw * total``.
Mirostat draws with ``std::discrete_distribution`` as llama.cpp does.
"""
from __future__ import annotations

import math

import numpy as np

from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates
from halter.sampling.cmath import expf, log2f, logf, powf
from halter.sampling.rng import LLAMA_DEFAULT_SEED, Mt19937
from halter.sampling.truncation import top_k_impl

_F32 = np.float32


class Greedy(Sampler):
    """Select the candidate with the highest logit (the first one on ties)."""

    name = "greedy"

    def apply(self, c: Candidates) -> None:
        c.selected = int(np.argmax(c.logits)) if c.size else -1


class Dist(Sampler):
    """Draw from softmax(logits) of the current candidates with a seeded ``std::mt19937``.

    ``seed = LLAMA_DEFAULT_SEED`` (0xFFFFFFFF) picks a random seed, again at every ``reset()``;
    the seed actually in use is ``seed_cur``.
    """

    name = "dist"

    def __init__(self, seed: int = LLAMA_DEFAULT_SEED) -> None:
        self.seed = seed
        self._rng = Mt19937(seed)

    @property
    def seed_cur(self) -> int:
        return self._rng.seed_cur

    def apply(self, c: Candidates) -> None:
        n = c.size
        if n == 0:
            c.selected = -1
            return
        c.selected = 0
        if n == 1:
            self._rng.uniform_double()      # llama.cpp draws once here too (kept in step with its GPU path)
            c.p[0] = 1.0
            return
        max_l = c.logits[0] if c.sorted else c.logits.max()
        p = expf(c.logits - max_l)
        run = np.cumsum(p, dtype=np.float64)
        total = float(run[-1])
        target = total * self._rng.uniform_double()
        # the first running sum that reaches the target; none (a NaN sum, from a -inf first logit
        # of a sorted array) falls back to the last candidate, as llama.cpp does
        hit = np.flatnonzero(run >= target)
        c.selected = int(hit[0]) if hit.size else n - 1
        c.p = (p.astype(np.float64) / total).astype(np.float32)

    def reset(self) -> None:
        self._rng.reseed()

    def clone(self) -> "Dist":
        new = Dist.__new__(Dist)
        new.seed = self.seed
        new._rng = self._rng.copy()
        return new


def _to_int_like_c(x: float) -> int:
    """``int(float)`` as x86 compiles it: NaN and out-of-range values become INT_MIN."""
    if not math.isfinite(x) or not -2147483648.0 <= x < 2147483648.0:
        return -2147483648
    return int(x)


class Mirostat(Sampler):
    """Mirostat v1 (``llama_sampler_init_mirostat``): target surprise ``tau``, learning rate ``eta``.

    Estimates the Zipf exponent from the ``m`` most probable tokens, keeps the top-k that should
    give surprise ``mu``, draws, and moves ``mu`` towards ``tau``. ``mu`` starts at ``2 * tau``.
    """

    name = "mirostat"

    def __init__(self, n_vocab: int, seed: int = LLAMA_DEFAULT_SEED, tau: float = 5.0,
                 eta: float = 0.1, m: int = 100) -> None:
        if n_vocab <= 0:
            raise ValueError(f"mirostat: n_vocab must be positive, got {n_vocab}")
        self.n_vocab = int(n_vocab)
        self.seed = seed
        self.tau = float(tau)
        self.eta = float(eta)
        self.m = int(m)
        self.mu = float(_F32(2.0) * _F32(tau))
        self._rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        c.softmax(do_sort=True)
        p = c.p
        n_terms = min(self.m - 1, c.size - 1) if self.m >= 1 else c.size - 1
        sum_ti_bi = sum_ti_sq = _F32(0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            for i in range(max(n_terms, 0)):
                t_i = _F32(logf(_F32(i + 2) / _F32(i + 1)))
                b_i = _F32(logf(p[i] / p[i + 1]))
                sum_ti_bi = _F32(sum_ti_bi + _F32(t_i * b_i))
                sum_ti_sq = _F32(sum_ti_sq + _F32(t_i * t_i))
            s_hat = _F32(sum_ti_bi / sum_ti_sq)
            eps = _F32(s_hat - _F32(1))
            num = _F32(eps * _F32(powf(2.0, self.mu)))
            den = _F32(_F32(1) - _F32(powf(_F32(self.n_vocab), -eps)))
            k = powf(_F32(num / den), _F32(_F32(1) / s_hat))
        top_k_impl(c, max(_to_int_like_c(k), 1))
        c.softmax(do_sort=True)
        idx = self._rng.discrete(c.p)
        c.selected = idx
        self._update_mu(c.p[idx])

    def _update_mu(self, p_sel: float) -> None:
        surprise = _F32(-log2f(p_sel))
        e = _F32(surprise - _F32(self.tau))
        self.mu = float(_F32(_F32(self.mu) - _F32(_F32(self.eta) * e)))

    def reset(self) -> None:
        self.mu = float(_F32(2.0) * _F32(self.tau))
        self._rng.reseed()

    def clone(self) -> "Mirostat":
        new = Mirostat(self.n_vocab, self.seed, self.tau, self.eta, self.m)
        new.mu = self.mu
        new._rng = self._rng.copy()
        return new


class MirostatV2(Mirostat):
    """Mirostat v2 (``llama_sampler_init_mirostat_v2``): drop tokens with surprise above ``mu``, draw."""

    name = "mirostat-v2"

    def __init__(self, seed: int = LLAMA_DEFAULT_SEED, tau: float = 5.0, eta: float = 0.1) -> None:
        self.seed = seed
        self.tau = float(tau)
        self.eta = float(eta)
        self.mu = float(_F32(2.0) * _F32(tau))
        self._rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        c.softmax(do_sort=True)
        mu = _F32(self.mu)
        keep = c.size
        for i, pi in enumerate(c.p.tolist()):
            if _F32(-log2f(pi)) > mu:
                keep = i
                break
        c.truncate(max(keep, 1))
        c.softmax(do_sort=True)
        idx = self._rng.discrete(c.p)
        c.selected = idx
        self._update_mu(c.p[idx])

    def clone(self) -> "MirostatV2":
        new = MirostatV2(self.seed, self.tau, self.eta)
        new.mu = self.mu
        new._rng = self._rng.copy()
        return new
