"""Distinct values of integer arrays by sorting, not ``np.unique``.

numpy 2.x answers a plain ``np.unique`` call through a hash table, ~15x a sort on the arrays here
(trie nodes, position hashes), and its first such call in a process imports ``numpy.ma`` (~9 ms):
inside the first schema a fresh process compiles, that import alone was a third of the compile.
"""
from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted."""
    if len(values) < 2:
        return values.copy()
    out = np.sort(values)
    keep = np.empty(len(out), dtype=bool)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


def count_distinct(values: np.ndarray) -> int:
    """How many distinct values a 1-D array holds."""
    if len(values) < 2:
        return len(values)
    out = np.sort(values)
    return int(np.count_nonzero(out[1:] != out[:-1])) + 1
