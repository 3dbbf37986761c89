"""Helpers for the seeded statistical tests of the samplers (not a test module)."""
import math

import numpy as np


def chi2_sf(x: float, df: int) -> float:
    """Survival function of the chi-square distribution (series for the regularised gamma)."""
    a, z = df / 2.0, x / 2.0
    if z <= 0:
        return 1.0
    if z < a + 1:  # lower series, then complement
        term = total = 1.0 / a
        n = 1
        while term > total * 1e-15:
            term *= z / (a + n)
            total += term
            n += 1
        return max(0.0, 1.0 - total * math.exp(-z + a * math.log(z) - math.lgamma(a)))
    # continued fraction for the upper tail (Lentz)
    b = z + 1 - a
    c, d = 1e300, 1 / b
    h = d
    for i in range(1, 500):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1 / (d if abs(d) > 1e-300 else 1e-300)
        c = b + an / c
        c = c if abs(c) > 1e-300 else 1e-300
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(-z + a * math.log(z) - math.lgamma(a)) * h


def chi2_pvalue(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of observed counts against expected probabilities (cells with p > 0)."""
    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    n = counts.sum()
    assert counts[probs == 0].sum() == 0, "a zero-probability token was drawn"
    live = probs > 0
    expected = n * probs[live]
    stat = float(((counts[live] - expected) ** 2 / expected).sum())
    return chi2_sf(stat, int(live.sum()) - 1)


def softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    e = np.exp(x - x[np.isfinite(x)].max())
    e[~np.isfinite(x)] = 0
    return e / e.sum()
