"""The order llama.cpp's sorts leave candidates in, ties included.

llama.cpp sorts candidates with libstdc++'s ``std::sort`` (introsort) and ``std::partial_sort``
(heap select + heap sort), behind a 128-bucket pre-pass for more than 128 entries
(``llama_token_data_array_partial_sort``). Neither algorithm is stable, so equal logits come out
in an order only the algorithms themselves decide, and that order decides which of two tied
tokens a top-k cut keeps and which one a seeded draw lands on.

``sort_order(logits, n)`` returns the permutation (indices into ``logits``) of the first ``n``
entries llama.cpp's sort would produce. When the values that matter are all distinct every
correct sort agrees, and numpy computes it; only groups of equal values run the libstdc++
algorithms step by step (in Python, over the one bucket that holds the tie).
"""
from __future__ import annotations

import numpy as np

_THRESHOLD = 16          # libstdc++ _S_threshold
_NBUCKETS = 128
_BUCKET_SCALE = np.float32(_NBUCKETS / 20.0)      # 128 buckets over [-10, 10]
_BUCKET_INTER = np.float32(10.0) * _BUCKET_SCALE


# -- libstdc++ algorithms over a list ``a`` of items ordered by ``less(x, y)`` ----------------------

def _adjust_heap(a: list, first: int, hole: int, length: int, value, less) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if less(a[first + child], a[first + child - 1]):
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if (length & 1) == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and less(a[first + parent], value):
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = value


def _make_heap(a: list, first: int, last: int, less) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(a, first, parent, length, a[first + parent], less)
        if parent == 0:
            return
        parent -= 1


def _pop_heap(a: list, first: int, last: int, result: int, less) -> None:
    value = a[result]
    a[result] = a[first]
    _adjust_heap(a, first, 0, last - first, value, less)


def partial_sort(a: list, first: int, middle: int, last: int, less) -> None:
    """``std::partial_sort(first, middle, last, comp)``: heap select, then heap sort."""
    _make_heap(a, first, middle, less)
    for i in range(middle, last):
        if less(a[i], a[first]):
            _pop_heap(a, first, middle, i, less)
    while middle - first > 1:
        middle -= 1
        _pop_heap(a, first, middle, middle, less)


def _median_to_first(a: list, result: int, x: int, y: int, z: int, less) -> None:
    if less(a[x], a[y]):
        if less(a[y], a[z]):
            pick = y
        elif less(a[x], a[z]):
            pick = z
        else:
            pick = x
    elif less(a[x], a[z]):
        pick = x
    elif less(a[y], a[z]):
        pick = z
    else:
        pick = y
    a[result], a[pick] = a[pick], a[result]


def _introsort_loop(a: list, first: int, last: int, depth: int, less) -> None:
    while last - first > _THRESHOLD:
        if depth == 0:
            partial_sort(a, first, last, last, less)
            return
        depth -= 1
        mid = first + (last - first) // 2
        _median_to_first(a, first, first + 1, mid, last - 1, less)
        pivot = a[first]
        lo, hi = first + 1, last
        while True:
            while less(a[lo], pivot):
                lo += 1
            hi -= 1
            while less(pivot, a[hi]):
                hi -= 1
            if not lo < hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        _introsort_loop(a, lo, last, depth, less)
        last = lo


def _linear_insert(a: list, last: int, less) -> None:
    val = a[last]
    nxt = last - 1
    while less(val, a[nxt]):
        a[last] = a[nxt]
        last = nxt
        nxt -= 1
    a[last] = val


def _insertion_sort(a: list, first: int, last: int, less) -> None:
    if first == last:
        return
    for i in range(first + 1, last):
        if less(a[i], a[first]):
            val = a[i]
            a[first + 1:i + 1] = a[first:i]
            a[first] = val
        else:
            _linear_insert(a, i, less)


def std_sort(a: list, first: int, last: int, less) -> None:
    """``std::sort(first, last, comp)`` as libstdc++ implements it (introsort)."""
    if last - first < 2:
        return
    _introsort_loop(a, first, last, 2 * ((last - first).bit_length() - 1), less)
    if last - first > _THRESHOLD:
        _insertion_sort(a, first, first + _THRESHOLD, less)
        for i in range(first + _THRESHOLD, last):
            _linear_insert(a, i, less)
    else:
        _insertion_sort(a, first, last, less)


# -- the permutations, with numpy fast paths --------------------------------------------------------

def _has_ties(values: np.ndarray) -> bool:
    if values.size < 2:
        return False
    s = np.sort(values)
    return bool((s[1:] == s[:-1]).any()) or bool(np.isnan(s[-1]))


def _desc_pairs(logits: np.ndarray, idx: np.ndarray) -> list:
    """(-logit, index) items, so that ``less`` is ``a.logit > b.logit``."""
    return list(zip((-logits[idx].astype(np.float64)).tolist(), idx.tolist()))


def _less(x, y) -> bool:
    return x[0] < y[0]


def std_sort_desc(logits: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``std::sort`` of the entries ``idx`` (in that order) by descending logit."""
    if not _has_ties(logits[idx]):
        return idx[np.argsort(-logits[idx], kind="stable")]
    a = _desc_pairs(logits, idx)
    std_sort(a, 0, len(a), _less)
    return np.fromiter((p[1] for p in a), dtype=np.int64, count=len(a))


def std_partial_sort_desc(logits: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` entries ``std::partial_sort(first, first + k, last, greater)`` leaves."""
    n = idx.shape[0]
    vals = logits[idx]
    if k >= n:
        if not _has_ties(vals):
            return idx[np.argsort(-vals, kind="stable")]
    else:
        part = np.partition(-vals, (k - 1, k))
        top = -part[:k]
        if part[k - 1] != part[k] and not _has_ties(top) and not np.isnan(vals).any():
            sel = np.argpartition(-vals, k - 1)[:k]
            return idx[sel[np.argsort(-vals[sel], kind="stable")]]
    a = _desc_pairs(logits, idx)
    # heap select over the first k, scanning the rest in chunks: an entry can only enter the heap
    # when it beats the current heap top, so most chunks are skipped by one numpy comparison
    _make_heap(a, 0, k, _less)
    neg = -vals.astype(np.float64)
    pos = k
    while pos < n:
        end = min(n, pos + 4096)
        hits = np.flatnonzero(neg[pos:end] < a[0][0])
        for h in hits.tolist():
            i = pos + h
            if a[i][0] < a[0][0]:
                _pop_heap(a, 0, k, i, _less)
        pos = end
    last = k
    while last > 1:
        last -= 1
        _pop_heap(a, 0, last, last, _less)
    return np.fromiter((p[1] for p in a[:k]), dtype=np.int64, count=k)


def _buckets(vals: np.ndarray) -> np.ndarray:
    """llama.cpp's bucket of each logit: ``int(scale * v + inter)`` clamped to [0, 127]."""
    with np.errstate(invalid="ignore", over="ignore"):
        x = (np.float64(_BUCKET_SCALE) * vals.astype(np.float64) + np.float64(_BUCKET_INTER)).astype(np.float32)
        x = x.astype(np.float64)
        bad = ~np.isfinite(x) | (x >= 2147483648.0) | (x < -2147483648.0)
        ib = np.where(bad, 0.0, np.trunc(np.where(bad, 0.0, x)))
    return np.clip(ib, 0, _NBUCKETS - 1).astype(np.int64)


def bucket_sort_desc(logits: np.ndarray, npartial: int) -> np.ndarray:
    """``llama_token_data_array_partial_sort``: the permutation of its first ``npartial`` entries."""
    n = logits.shape[0]
    bidx = _buckets(logits)
    histo = np.bincount(bidx, minlength=_NBUCKETS)
    cum = np.cumsum(histo[::-1])
    ib = _NBUCKETS - 1 - int(np.searchsorted(cum, npartial, side="left"))
    ib = max(ib, 0)
    out = []
    order = np.argsort(-bidx, kind="stable")          # bucket by bucket, each in array order
    starts = np.concatenate([[0], np.cumsum(histo[::-1])])
    for j in range(_NBUCKETS - 1, ib - 1, -1):
        lo, hi = starts[_NBUCKETS - 1 - j], starts[_NBUCKETS - j]
        if hi == lo:
            continue
        members = order[lo:hi]
        if j > ib:
            out.append(std_sort_desc(logits, members))
        else:
            done = sum(x.shape[0] for x in out)
            out.append(std_partial_sort_desc(logits, members, npartial - done))
    res = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    return res[:npartial]


def sort_order(logits: np.ndarray, npartial: int) -> np.ndarray:
    """``llama_token_data_array_partial_sort_inplace``: indices of the top ``npartial``, in order."""
    n = logits.shape[0]
    npartial = min(int(npartial), n)
    if npartial <= 0:
        return np.zeros(0, dtype=np.int64)
    if npartial <= 128:
        return std_partial_sort_desc(logits, np.arange(n), npartial)
    return bucket_sort_desc(logits, npartial)


def std_sort_by(keys: np.ndarray) -> np.ndarray:
    """``std::sort`` of ``0..n-1`` by ascending ``keys`` (typical sampling's index sort)."""
    n = keys.shape[0]
    if not _has_ties(keys):
        return np.argsort(keys, kind="stable")
    a = list(zip(keys.astype(np.float64).tolist(), range(n)))
    std_sort(a, 0, n, _less)
    return np.fromiter((p[1] for p in a), dtype=np.int64, count=n)
