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

from halter.sampling import heap_select

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


# -- std::sort over numpy keys: Hoare partitions vectorised, leaves finished by a stable sort -------

def _cumsum0(x: np.ndarray) -> np.ndarray:
    out = np.zeros(x.shape[0], dtype=np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def std_sort_perm(keys: np.ndarray) -> np.ndarray:
    """The permutation ``std::sort`` (libstdc++) leaves on ``0..n-1`` ordered by ascending ``keys``.

    Introsort level by level: every segment longer than 16 of one level is partitioned at once
    (median of three moved to the front, then the Hoare scans, see ``_partition_np``); a segment
    whose depth budget runs out is heap-sorted; the final insertion sort, which only ever moves
    entries inside their leaf segment and is stable, is a stable sort per leaf.
    """
    n = keys.shape[0]
    return std_sort_segments(keys.astype(np.float64), np.arange(n), np.array([0]), np.array([n]))


def _segments_with_ties(k: np.ndarray, a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    lengths = hi - lo
    seg = np.repeat(np.arange(lo.shape[0]), lengths)
    pos = np.arange(seg.shape[0]) - np.repeat(_cumsum0(lengths), lengths) + np.repeat(lo, lengths)
    kv = k[a[pos]]
    o = np.lexsort((kv, seg))
    kv, seg = kv[o], seg[o]
    dup = (kv[1:] == kv[:-1]) & (seg[1:] == seg[:-1])
    return np.bincount(seg[1:][dup], minlength=lo.shape[0]) > 0


def std_sort_segments(k: np.ndarray, a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``std::sort`` run separately on each segment ``a[lo[i]:hi[i]]`` (entries index ``k``)."""
    n = a.shape[0]
    a = a.copy()
    if n < 2:
        return a
    if np.isnan(k[a]).any():    # NaN compares false both ways: the plain step-by-step algorithm
        for l, h in zip(lo.tolist(), hi.tolist()):
            items = list(zip(k[a[l:h]].tolist(), a[l:h].tolist()))
            std_sort(items, 0, h - l, _less)
            a[l:h] = [i for _, i in items]
        return a
    starts = np.zeros(n + 1, dtype=np.int64)
    starts[lo] += 1
    lens = np.maximum(hi - lo, 1)
    dep = 2 * (np.floor(np.log2(lens)).astype(np.int64))
    level = 0
    while lo.size:
        if level % 3 == 0:
            # a segment without equal keys comes out sorted whatever the algorithm does: finish it
            tied = _segments_with_ties(k, a, lo, hi)
            starts[lo[~tied]] += 1
            lo, hi, dep = lo[tied], hi[tied], dep[tied]
        level += 1
        big = (hi - lo) > _THRESHOLD
        starts[lo[~big]] += 1
        heap = big & (dep == 0)
        for l, h in zip(lo[heap].tolist(), hi[heap].tolist()):
            starts[l] += 1
            seg = a[l:h].tolist()
            partial_sort(seg, 0, len(seg), len(seg), lambda x, y: k[x] < k[y])
            a[l:h] = seg
        act = big & (dep > 0)
        lo, hi, dep = lo[act], hi[act], dep[act] - 1
        if not lo.size:
            break
        S = lo.shape[0]
        x, y, z = lo + 1, lo + (hi - lo) // 2, hi - 1
        kx, ky, kz = k[a[x]], k[a[y]], k[a[z]]
        pick = np.where(kx < ky, np.where(ky < kz, y, np.where(kx < kz, z, x)),
                        np.where(kx < kz, x, np.where(ky < kz, z, y)))
        tmp = a[lo].copy()
        a[lo] = a[pick]
        a[pick] = tmp
        pv = k[a[lo]]
        lengths = hi - lo - 1
        seg = np.repeat(np.arange(S), lengths)
        pos = np.arange(seg.shape[0]) - np.repeat(_cumsum0(lengths), lengths) + np.repeat(lo + 1, lengths)
        kv = k[a[pos]]
        is_l = ~(kv < pv[seg])
        is_r = ~(pv[seg] < kv)
        lpos, rpos = pos[is_l], pos[is_r]
        n_l = np.bincount(seg[is_l], minlength=S)
        n_r = np.bincount(seg[is_r], minlength=S)
        off_l, off_r = _cumsum0(n_l), _cumsum0(n_r)
        m = np.minimum(n_l, n_r)
        pseg = np.repeat(np.arange(S), m)
        pi = np.arange(pseg.shape[0]) - np.repeat(_cumsum0(m), m)
        lp = lpos[off_l[pseg] + pi]
        rp = rpos[off_r[pseg] + n_r[pseg] - 1 - pi]      # right stops run from the end
        cross = m.copy()
        hit = np.flatnonzero(lp >= rp)
        if hit.size:
            np.minimum.at(cross, pseg[hit], pi[hit])
        sw = pi < cross[pseg]
        li, ri = lp[sw], rp[sw]
        tmp = a[li].copy()
        a[li] = a[ri]
        a[ri] = tmp
        cut = np.where(cross < n_l, lpos[np.minimum(off_l + cross, lpos.shape[0] - 1)], hi)
        prev_r = np.where(cross > 0, rpos[np.clip(off_r + n_r - cross, 0, max(rpos.shape[0] - 1, 0))], hi)
        cut = np.minimum(cut, prev_r)
        lo, hi, dep = np.concatenate([lo, cut]), np.concatenate([cut, hi]), np.concatenate([dep, dep])
    leaf = np.cumsum(starts[:n])
    return a[np.lexsort((k[a], leaf))]


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
    return idx[std_sort_perm(-logits[idx].astype(np.float64))]


def std_partial_sort_desc(logits: np.ndarray, idx: np.ndarray, k: int) -> np.ndarray:
    """The first ``k`` entries ``std::partial_sort(first, first + k, last, greater)`` leaves."""
    n = logits.shape[0] if idx is None else idx.shape[0]
    k = min(k, n)
    vals = logits if idx is None else logits[idx]
    if k < n:          # compiled, once a tie has loaded it: ties or not, one pass over the row
        picked = heap_select.select(vals, k, load=False)
        if picked is not None:
            return picked if idx is None else idx[picked]
    neg = np.negative(vals, dtype=np.float32)
    if k >= n:
        if not _has_ties(vals):
            out = np.argsort(neg, kind="stable")
            return out if idx is None else idx[out]
    else:
        sel = np.argpartition(neg, k)
        top = sel[:k]
        top_neg = neg[top]
        if top_neg.max() < neg[sel[k]] and not _has_ties(top_neg):
            out = top[np.argsort(top_neg, kind="stable")]
            return out if idx is None else idx[out]
    picked = heap_select.select(vals, k)            # ties: the compiled heap select (loaded now)
    if picked is not None:
        return picked if idx is None else idx[picked]
    if idx is None:
        idx = np.arange(n)
    # heap select over the first k, scanning the rest in chunks: an entry can only enter the heap
    # when it beats the current heap top, so most chunks are skipped by one numpy comparison, and
    # only those entries become items (slot k stands for the scanned position: std::pop_heap
    # writes the old top there, which the scan never reads again)
    a = _desc_pairs(logits, idx[:k]) + [None]
    _make_heap(a, 0, k, _less)
    pos = k
    while pos < n:
        end = min(n, pos + 4096)
        hits = np.flatnonzero(neg[pos:end] < a[0][0])
        for h in hits.tolist():
            j = int(idx[pos + h])
            item = (-float(logits[j]), j)
            if item[0] < a[0][0]:
                a[k] = item
                _pop_heap(a, 0, k, k, _less)
        pos = end
    last = k
    while last > 1:
        last -= 1
        _pop_heap(a, 0, last, last, _less)
    return np.fromiter((p[1] for p in a[:k]), dtype=np.int64, count=k)


def _buckets(vals: np.ndarray) -> np.ndarray:
    """llama.cpp's bucket of each logit: ``int(scale * v + inter)`` clamped to [0, 127]."""
    with np.errstate(invalid="ignore", over="ignore"):
        # two float roundings, product then sum: llama.cpp's sampler is built without FMA contraction
        x = (_BUCKET_SCALE * vals.astype(np.float32)) + _BUCKET_INTER
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
    order = np.argsort(-bidx, kind="stable")          # bucket by bucket, each in array order
    bounds = np.concatenate([[0], np.cumsum(histo[::-1])])
    lo_ib, hi_ib = int(bounds[_NBUCKETS - 1 - ib]), int(bounds[_NBUCKETS - ib])
    full = order[:lo_ib]
    if lo_ib:
        los, his = bounds[:_NBUCKETS - 1 - ib], bounds[1:_NBUCKETS - ib]
        keep = his > los
        los, his = los[keep], his[keep]
        vals = logits[full]
        if _has_ties(vals) or np.isnan(vals).any():
            full = std_sort_segments(-logits.astype(np.float64), full, los, his)
        else:
            full = full[np.argsort(-vals, kind="stable")]
    rest = std_partial_sort_desc(logits, order[lo_ib:hi_ib], npartial - lo_ib)
    return np.concatenate([full, rest])[:npartial]


def sort_order(logits: np.ndarray, npartial: int) -> np.ndarray:
    """``llama_token_data_array_partial_sort_inplace``: indices of the top ``npartial``, in order."""
    n = logits.shape[0]
    npartial = min(int(npartial), n)
    if npartial <= 0:
        return np.zeros(0, dtype=np.int64)
    if npartial <= 128:
        return std_partial_sort_desc(logits, None, npartial)
    return bucket_sort_desc(logits, npartial)


def std_sort_by(keys: np.ndarray) -> np.ndarray:
    """``std::sort`` of ``0..n-1`` by ascending ``keys`` (typical sampling's index sort)."""
    n = keys.shape[0]
    if not _has_ties(keys):
        return np.argsort(keys, kind="stable")
    return std_sort_perm(keys)
