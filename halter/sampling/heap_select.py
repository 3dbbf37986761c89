"""``std::partial_sort``'s heap select over flat arrays, compiled with numba where it is installed.

The order ``llama_sort.std_partial_sort_desc`` must reproduce for tied logits is the one
libstdc++'s heap algorithms leave (make_heap over the first ``k``, a pop for every later entry
that beats the top, then sort_heap). Here the heap is two parallel arrays (key, position) and
the loops run compiled: on bf16-rounded logits, where the top of a 50k-260k vocabulary ties
often, the list-of-tuples version in Python spent 2-4 ms a token. ``select(neg, k)`` is that
compiled kernel, or None without numba; ``select_py`` is the same code uncompiled (tests).
"""
from __future__ import annotations

import numpy as np

from halter import jit


def _adjust(key, pos, hole, length, vk, vp):
    """libstdc++ ``__adjust_heap`` with ``comp(a, b) = key[a] < key[b]`` (then ``__push_heap``)."""
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if key[child] < key[child - 1]:
            child -= 1
        key[hole] = key[child]
        pos[hole] = pos[child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        key[hole] = key[child - 1]
        pos[hole] = pos[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and key[parent] < vk:
        key[hole] = key[parent]
        pos[hole] = pos[parent]
        hole = parent
        parent = (hole - 1) // 2
    key[hole] = vk
    pos[hole] = vp


def _select(values, k):
    """Positions (into ``values``) of the ``k`` largest in the order partial_sort leaves them.

    The heap's keys are the negated values in float64 (``comp`` is ``greater`` on the values)."""
    n = values.shape[0]
    key = np.empty(k, dtype=np.float64)
    pos = np.empty(k, dtype=np.int64)
    for i in range(k):
        key[i] = -np.float64(values[i])
        pos[i] = i
    if k >= 2:                                 # make_heap
        parent = (k - 2) // 2
        while True:
            _adjust_impl(key, pos, parent, k, key[parent], pos[parent])
            if parent == 0:
                break
            parent -= 1
    for i in range(k, n):                      # heap select: pop_heap(first, middle, i)
        v = -np.float64(values[i])
        if v < key[0]:
            _adjust_impl(key, pos, 0, k, v, i)
    last = k
    while last > 1:                            # sort_heap
        last -= 1
        vk = key[last]
        vp = pos[last]
        key[last] = key[0]
        pos[last] = pos[0]
        _adjust_impl(key, pos, 0, last, vk, vp)
    return pos


_adjust_impl = _adjust            # what ``_select`` calls: the compiled ``_adjust`` once built


def select_py(values: np.ndarray, k: int) -> np.ndarray:
    """``select`` uncompiled (slow; for the tests)."""
    return _select(values, k)


def _build(numba):
    global _adjust_impl
    _adjust_impl = numba.njit(cache=True, nogil=True)(_adjust)
    return numba.njit(cache=True, nogil=True)(_select)


def select(values: np.ndarray, k: int, *, load: bool = True) -> np.ndarray | None:
    """The compiled heap select of the ``k`` (``<= len(values)``) largest float32 or float64
    ``values``, as positions in order, or None without numba. ``load=False``: None unless the
    kernel is loaded already (loading numba costs ~0.5 s, worth it only once ties show up)."""
    kernel = jit.build_once(_build) if load else jit.built(_build)
    return None if kernel is None else kernel(values, k)
