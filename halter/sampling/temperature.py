"""Temperature samplers: plain temperature and llama.cpp's dynamic temperature (``temp_ext``).

``t <= 0`` keeps only the first best candidate (every other logit becomes ``-inf``), so the
chain's selector then picks it: that is how llama.cpp does greedy decoding inside a chain.
"""
from __future__ import annotations

import numpy as np

from halter.sampling.base import Sampler
from halter.sampling.candidates import Candidates
from halter.sampling.cmath import exp_array, logf, logf_array, powf, sum_f32, sum_f64

_F32 = np.float32


def temp_impl(c: Candidates, temp: float) -> None:
    """``llama_sampler_temp_impl``: divide the logits by ``temp``, or keep only the max if ``temp <= 0``."""
    t = _F32(temp)
    if t <= 0.0:
        if c.size == 0:
            return
        best = int(np.argmax(c.logits))
        keep = c.logits[best]
        c.logits[:] = -np.inf
        c.logits[best] = keep
        return
    np.divide(c.logits, t, out=c.logits)


class Temperature(Sampler):
    """Divide logits by ``t`` (``llama_sampler_init_temp``)."""

    name = "temp"

    def __init__(self, t: float) -> None:
        self.temp = float(t)

    def apply(self, c: Candidates) -> None:
        temp_impl(c, self.temp)


class TempExt(Sampler):
    """Dynamic temperature (``llama_sampler_init_temp_ext``).

    With ``delta > 0`` the temperature moves in ``[max(0, t - delta), t + delta]`` with the
    normalised entropy of the candidates raised to ``exponent``; otherwise it is plain ``t``.
    """

    name = "temp-ext"

    def __init__(self, t: float, delta: float = 0.0, exponent: float = 1.0) -> None:
        self.temp = float(t)
        self.delta = float(delta)
        self.exponent = float(exponent)

    def apply(self, c: Candidates) -> None:
        if _F32(self.delta) <= 0:
            temp_impl(c, self.temp)
            return
        t, d = _F32(self.temp), _F32(self.delta)
        min_temp = max(_F32(0.0), _F32(t - d))
        max_temp = _F32(t + d)
        if c.size <= 1:
            return
        # float32 throughout, as llama.cpp: logf/powf, left-to-right float sums
        max_entropy = _F32(-_F32(logf(_F32(_F32(1.0) / _F32(c.size)))))
        c.softmax(do_sort=True)
        pos = c.p[c.p > 0]
        entropy = _F32(-sum_f32(pos * logf_array(pos))) if pos.size else _F32(0)
        normalized = _F32(entropy / max_entropy)
        dyn_temp = _F32(min_temp + _F32(_F32(max_temp - min_temp) * _F32(powf(normalized, self.exponent))))
        temp_impl(c, float(dyn_temp))
        # llama.cpp re-computes the probabilities in double (exp, a double sum), stored as float
        lg = c.logits.astype(np.float64)
        p = exp_array(lg - lg[0])
        total = sum_f64(p)
        c.p = (p.astype(np.float32).astype(np.float64) / total).astype(np.float32)
