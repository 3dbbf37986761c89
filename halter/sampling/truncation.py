"""Samplers that cut the candidates down: top-k, top-p, min-p, typical, top-n-sigma and XTC.

Each follows ``src/llama-sampling.cpp`` (parameters, disabling values, ``min_keep``, which entries
survive and in which order), computing probabilities itself whenever it needs them.
"""
from __future__ import annotations

import math

import numpy as np

from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates
from halter.sampling.cmath import logf, logf_array, sum_f32
from halter.sampling.llama_sort import bucket_sort_desc, std_sort_by
from halter.sampling.rng import LLAMA_DEFAULT_SEED, Mt19937

_F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)


def _check_min_keep(min_keep: int, who: str) -> int:
    if isinstance(min_keep, bool) or not isinstance(min_keep, (int, np.integer)) or min_keep < 0:
        raise ValueError(f"{who}: min_keep must be a non-negative int, got {min_keep!r}")
    return int(min_keep)


def top_k_impl(c: Candidates, k: int) -> None:
    """``llama_sampler_top_k_impl``: k <= 0 does nothing; otherwise keep the k best, sorted."""
    if k <= 0:
        return
    k = min(k, c.size)
    if not c.sorted:
        c.sort_desc(k)
    c.truncate(k)


class TopK(Sampler):
    """Keep the ``k`` most likely tokens (sorted by logit). ``k <= 0`` disables it."""

    name = "top-k"

    def __init__(self, k: int) -> None:
        self.k = int(k)

    def apply(self, c: Candidates) -> None:
        top_k_impl(c, self.k)


class TopP(Sampler):
    """Nucleus sampling: the smallest prefix (by logit) whose probability reaches ``p``.

    ``p >= 1`` disables it; at least ``min_keep`` tokens stay. Probabilities are those of the
    candidates as they arrive (not renormalised after the cut), as in llama.cpp.
    """

    name = "top-p"

    def __init__(self, p: float, min_keep: int = 1) -> None:
        self.p = float(p)
        self.min_keep = _check_min_keep(min_keep, "top_p")

    def apply(self, c: Candidates) -> None:
        if _F32(self.p) >= 1.0:
            return
        c.softmax(do_sort=False)
        p32 = _F32(self.p)
        n = c.size
        if not c.sorted and n > 1024:
            # adaptive: the best 256 first (llama.cpp's bucket partial sort), everything only if
            # they are not enough
            probe = bucket_sort_desc(c.logits, 256)
            last = _first_reach(np.cumsum(c.p[probe], dtype=np.float32), p32, self.min_keep)
            if last is None:
                probe = bucket_sort_desc(c.logits, n)
                last = _first_reach(np.cumsum(c.p[probe], dtype=np.float32), p32, self.min_keep)
                last = n if last is None else last
            c.take(probe[:last])
            c.sorted = True
            return
        if not c.sorted:
            c.sort_desc()
        last = _first_reach(np.cumsum(c.p, dtype=np.float32), p32, self.min_keep)
        c.truncate(n if last is None else last)


def _first_reach(cum: np.ndarray, p: np.float32, min_keep: int) -> int | None:
    """1 + the first index i with cum[i] >= p and i + 1 >= min_keep, or None."""
    ok = cum >= p
    if min_keep > 1:
        ok[: min_keep - 1] = False
    hit = np.flatnonzero(ok)
    return int(hit[0]) + 1 if hit.size else None


class MinP(Sampler):
    """Keep tokens whose probability is at least ``p`` times the best one's. ``p <= 0`` disables it."""

    name = "min-p"

    def __init__(self, p: float, min_keep: int = 1) -> None:
        self.p = float(p)
        self.min_keep = _check_min_keep(min_keep, "min_p")

    def apply(self, c: Candidates) -> None:
        if _F32(self.p) <= 0.0 or c.size == 0:
            return
        log_p = _F32(logf(self.p))
        if not c.sorted:
            # llama.cpp starts its maximum at -FLT_MAX: all -inf logits fall back to the sorted path
            min_logit = _F32(max(_F32(c.logits.max()), _F32(-_FLT_MAX))) + log_p
            keep = np.flatnonzero(c.logits >= min_logit)
            if keep.size and keep.size >= self.min_keep:
                if keep.size != c.size:
                    c.take(keep)
                return
            c.sort_desc()
        min_logit = _F32(c.logits[0]) + log_p
        idx = np.arange(1, c.size)
        stop = np.flatnonzero((c.logits[1:] < min_logit) & (idx >= self.min_keep))
        c.truncate(int(stop[0]) + 1 if stop.size else c.size)


class Typical(Sampler):
    """Locally typical sampling: tokens whose surprise is closest to the entropy, up to mass ``p``.

    ``p >= 1`` disables it. Leaves the candidates unsorted (ordered by typicality).
    """

    name = "typical"

    def __init__(self, p: float, min_keep: int = 1) -> None:
        self.p = float(p)
        self.min_keep = _check_min_keep(min_keep, "typical")

    def apply(self, c: Candidates) -> None:
        if _F32(self.p) >= 1.0:
            return
        c.softmax(do_sort=True)
        logp = logf_array(c.p)
        with np.errstate(invalid="ignore", over="ignore"):
            # -p * logf(p), summed left to right in float (a zero p gives NaN, as in llama.cpp)
            entropy = sum_f32((-c.p) * logp)
            shifted = np.abs(-logp - entropy)
        order = std_sort_by(shifted)
        cum = np.cumsum(c.p[order], dtype=np.float32)
        ok = cum > _F32(self.p)
        if self.min_keep > 1:
            ok[: self.min_keep - 1] = False
        hit = np.flatnonzero(ok)
        last = int(hit[0]) + 1 if hit.size else c.size
        c.take(order[:last])
        c.sorted = False


class TopNSigma(Sampler):
    """Keep logits within ``n`` standard deviations of the maximum. ``n <= 0`` disables it."""

    name = "top-n-sigma"

    def __init__(self, n: float) -> None:
        self.n = float(n)

    def apply(self, c: Candidates) -> None:
        if _F32(self.n) <= 0.0 or c.size <= 1:
            return
        finite = c.logits != -np.inf
        valid = c.logits[finite]
        mx = max(_F32(c.logits[0]), valid.max()) if valid.size else _F32(c.logits[0])
        if valid.size:
            mean = _F32(sum_f32(valid) / _F32(valid.size))
            # acc += pow(logit - mean, 2): float difference, squared in double, float accumulator
            sq = (valid - mean).astype(np.float64) ** 2
            acc = 0.0
            for d in sq.tolist():
                acc = float(_F32(acc + d))
            std = _F32(math.sqrt(float(_F32(_F32(acc) / _F32(valid.size)))))
        else:
            std = _F32(0)
        thr = _F32(mx - _F32(_F32(self.n) * std))
        c.logits[c.logits < thr] = -np.inf


class Xtc(Sampler):
    """Exclude Top Choices: with probability ``p``, drop every token above ``t`` except the last.

    Disabled when ``p <= 0``, ``t > 0.5`` or fewer than two candidates (no random draw then).
    Uses its own ``std::mt19937`` stream seeded with ``seed``.
    """

    name = "xtc"

    def __init__(self, p: float, t: float, min_keep: int = 1, seed: int = LLAMA_DEFAULT_SEED) -> None:
        self.probability = float(p)
        self.threshold = float(t)
        self.min_keep = _check_min_keep(min_keep, "xtc")
        self.seed = seed
        self._rng = Mt19937(seed)

    def apply(self, c: Candidates) -> None:
        if _F32(self.probability) <= 0.0 or _F32(self.threshold) > 0.5 or c.size < 2:
            return
        chance = self._rng.uniform_float()
        if chance > _F32(self.probability):
            return
        c.softmax(do_sort=True)
        above = c.p >= _F32(self.threshold)
        run = np.flatnonzero(~above)
        pos_last = (int(run[0]) - 1 if run.size else c.size - 1)
        pos_last = max(pos_last, 0)
        if c.size - pos_last >= self.min_keep and pos_last > 0:
            c.drop_front(pos_last)

    def reset(self) -> None:
        self._rng.reseed()

    def clone(self) -> "Xtc":
        new = Xtc(self.probability, self.threshold, self.min_keep, self.seed)
        new._rng = self._rng.copy()
        return new
