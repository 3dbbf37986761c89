"""The random stream llama.cpp's samplers draw from: ``std::mt19937`` read through libstdc++.

``std::mt19937(seed)`` and numpy's legacy MT19937 seeding (``init_genrand``) produce the same
32-bit words. On top of the words, libstdc++'s ``generate_canonical<T, digits>`` builds a real in
[0, 1): for ``float`` one word ``w`` gives ``float(w) / 2**32``; for ``double`` two words give
``(w0 + w1 * 2**32) / 2**64``; a result that rounds up to 1 is clamped to the largest value below
1. ``std::discrete_distribution`` normalises its weights in double, takes their running sum (the
last entry forced to 1), draws one canonical double and returns the first index whose running sum
is not below it (no draw at all when there are fewer than two weights).
"""
from __future__ import annotations

import secrets

import numpy as np

LLAMA_DEFAULT_SEED = 0xFFFFFFFF

_F32_BELOW_ONE = float(np.nextafter(np.float32(1), np.float32(0)))
_F64_BELOW_ONE = float(np.nextafter(1.0, 0.0))


def resolve_seed(seed: int | None) -> int:
    """A concrete 32-bit seed: ``None``, ``-1`` and ``LLAMA_DEFAULT_SEED`` draw a random one."""
    if seed is None or seed == -1 or seed == LLAMA_DEFAULT_SEED:
        return secrets.randbits(32)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    if not 0 <= seed <= 0xFFFFFFFF:
        raise ValueError(f"seed must be in [0, 2**32 - 1] (or -1 / None for random), got {seed}")
    return int(seed)


class Mt19937:
    """``std::mt19937`` with the libstdc++ distributions llama.cpp uses.

    ``seed`` is the sampler's configured seed; ``LLAMA_DEFAULT_SEED`` (or ``None``) means a fresh
    random seed at construction and at every ``reseed()``, as llama.cpp's ``get_rng_seed`` does.
    """

    def __init__(self, seed: int | None = LLAMA_DEFAULT_SEED) -> None:
        self.seed = LLAMA_DEFAULT_SEED if seed is None else seed
        self._bits = np.random.MT19937(0)
        self._ahead: list[int] = []        # words drawn by ``peek_doubles``, not yet consumed
        self.seed_cur = 0
        self.reseed()

    def reseed(self) -> None:
        """Restart the stream from the configured seed (a new random one if it is random)."""
        self.seed_cur = resolve_seed(self.seed)
        self._bits._legacy_seeding(self.seed_cur)
        self._ahead = []

    def next_u32(self) -> int:
        """The next raw 32-bit word."""
        if self._ahead:
            return self._ahead.pop(0)
        return int(self._bits.random_raw())

    def peek_doubles(self, n: int) -> list[float]:
        """The next ``n`` ``uniform_double`` values, without consuming them (the stream gives them
        again, and the same words to any other draw)."""
        short = 2 * n - len(self._ahead)
        if short > 0:
            self._ahead.extend(int(w) for w in self._bits.random_raw(short))
        return [_canonical_double(self._ahead[2 * i], self._ahead[2 * i + 1]) for i in range(n)]

    def uniform_float(self) -> float:
        """``std::uniform_real_distribution<float>(0, 1)``: one word, rounded to float."""
        r = float(np.float32(self.next_u32())) / 4294967296.0
        return _F32_BELOW_ONE if r >= 1.0 else float(np.float32(r))

    def uniform_double(self) -> float:
        """``std::uniform_real_distribution<double>(0, 1)``: two words, low word first."""
        w0 = self.next_u32()
        return _canonical_double(w0, self.next_u32())

    def discrete(self, weights: np.ndarray) -> int:
        """``std::discrete_distribution<int>(weights)(rng)`` as libstdc++ computes it."""
        n = len(weights)
        if n < 2:
            return 0
        w = np.asarray(weights, dtype=np.float64)
        total = float(np.cumsum(w)[-1])
        cp = np.cumsum(w / total)
        cp[-1] = 1.0
        u = self.uniform_double()
        return int(np.searchsorted(cp, u, side="left"))

    def getstate(self) -> dict:
        return {"seed": self.seed, "seed_cur": self.seed_cur, "bits": self._bits.state, "ahead": list(self._ahead)}

    def copy(self) -> "Mt19937":
        """An independent generator at the same point of the same stream."""
        new = Mt19937.__new__(Mt19937)
        new.seed = self.seed
        new.seed_cur = self.seed_cur
        new._bits = np.random.MT19937(0)
        new._bits.state = self._bits.state
        new._ahead = list(self._ahead)
        return new


def _canonical_double(w0: int, w1: int) -> float:
    """libstdc++'s ``generate_canonical<double, 53>`` of two words (low word first)."""
    r = (float(w0) + float(w1) * 4294967296.0) / 18446744073709551616.0
    return _F64_BELOW_ONE if r >= 1.0 else r
