"""Merge grammar positions that no input can tell apart, across rules (a bisimulation quotient).

Rules repeat one another's tails: every property rule a JSON Schema makes ends in
``ws ":" ws <value> ws``, every closed object repeats the same separators, and equal sub-rules come
out of ``$ref``s under different names; and a rule's own DFA, fresh from subset construction, is not
minimal yet. Two positions are *equivalent* when they agree on whether the rule may end there and,
for every byte class, call and token reference, step to equivalent positions (calls compared by the
callee's start). Equivalent positions accept the same texts under any caller, so they can be one
position: the token tables are then computed once for all of them, and the parser states that
differ only by which copy they sit in become one state (the string value of each property, say, no
longer makes states of its own).

The coarsest such partition is found by Moore's refinement with 64-bit hashes (each round hashes a
position's flag, its class and its successors' classes), one vectorised pass per round; the result is
then checked exactly, and if a hash collision ever merged two positions that differ the automata are
returned unchanged.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.array_sets import count_distinct

if TYPE_CHECKING:
    from halter.grammar.automaton import RuleAutomata

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_K_OLD, _K_ACC, _K_CALL, _K_TOK, _K_TGT = (np.uint64(k) for k in (
    0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3))


#: positions x refinement rounds spent before giving up on merging (~2 s on a 2-core machine)
_WORK_BUDGET = 15_000_000


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def equivalence_classes(a: "RuleAutomata") -> np.ndarray | None:
    """Position -> class id of the coarsest partition found (None: every position is its own)."""
    if a.n_positions < 2:
        return None
    return _classes(a, a.next_array.reshape(-1))


def _classes(a: "RuleAutomata", flat: np.ndarray) -> np.ndarray | None:
    n, n_cls = a.n_positions, a.n_classes
    owner, x, y, mul, salt, coef = _edges(a, flat, n, n_cls)
    bounds = np.searchsorted(owner, np.arange(n + 1))
    hi, lo = bounds[1:], bounds[:-1]
    acc = np.asarray(a.accepting, dtype=np.uint64) * _K_ACC
    height = _heights(owner, np.where(y == n, x, y), n).astype(np.uint64)
    with np.errstate(over="ignore"):
        hx = np.zeros(n + 1, dtype=np.uint64)      # position hashes, and a 0 for edges with one target
        hx[:n] = _mix(acc + _mix(height + _K_TGT) + np.uint64(1))
        sums = np.zeros(len(owner) + 1, dtype=np.uint64)
        count = count_distinct(hx[:n])
        # Moore's refinement is stable within n rounds, but each round is O(n): past a work budget
        # (long chains of rules need a round per rule) stop and merge nothing, which is always sound
        for _round in range(min(n + 1, max(64, _WORK_BUDGET // max(n, 1)))):
            # an edge's term: its label and where it leads (a call: the callee's start and the return)
            v = hx[x]
            v *= mul
            v += hx[y]
            v += salt
            v = _mix(v)
            v *= coef
            np.cumsum(v, out=sums[1:])
            total = hx[:n] * _K_OLD
            total += acc
            total += sums[hi]
            total -= sums[lo]
            hx[:n] = _mix(total)
            ordered = np.sort(hx[:n])
            new_count = int(np.count_nonzero(ordered[1:] != ordered[:-1])) + 1
            if new_count == count:
                break
            count = new_count
        else:                            # hash collisions, or the budget: merge nothing
            return None
    if count == n:
        return None
    classes = np.unique(hx[:n], return_inverse=True)[1]
    if not _is_bisimulation(a, classes, flat.reshape(n, n_cls)):
        return None
    return classes


def _heights(owner: np.ndarray, succ: np.ndarray, n: int) -> np.ndarray:
    """Position -> the length of its longest path in its rule (a call steps to its return), or
    -1 where that is unbounded (a loop is reachable).

    Equivalent positions have equal heights, so refinement may start from them: a counted repeat's
    chain of positions (``[ \\t]{0,64}``) then costs one round, not one round per link, of which
    each hashes every edge. Found by peeling positions whose successors all have heights (Kahn's
    algorithm, in one pass over the edges)."""
    deg_arr = np.bincount(owner, minlength=n)
    deg = deg_arr.tolist()
    by_target = np.argsort(succ, kind="stable")          # the edges grouped by target: p's
    preds = owner[by_target].tolist()                     # predecessors are preds[first[p]:first[p + 1]]
    first = np.searchsorted(succ[by_target], np.arange(n + 1)).tolist()
    height = [-1] * n
    frontier = np.flatnonzero(deg_arr == 0).tolist()
    level = 0
    while frontier:
        nxt = []
        for p in frontier:
            height[p] = level
            for q in preds[first[p]:first[p + 1]]:
                deg[q] -= 1
                if not deg[q]:
                    nxt.append(q)
        frontier = nxt
        level += 1
    return np.asarray(height, dtype=np.int64)


def _edges(a: "RuleAutomata", flat: np.ndarray, n: int, n_cls: int):
    """Every position's out-edges, sorted by position: (owner, x, y, mul, salt, coef) arrays.

    An edge's term in a round is ``mix(h[x] * mul + h[y] + salt) * coef``. A call leads to two
    places, the callee's start ``x`` and the return ``y``; a byte or token edge has ``y = n``, the
    slot whose hash is 0. Byte edges are grouped by target, one edge per (position, target) whose
    ``coef`` is the sum of the classes' own hashes: the sum of terms is then the same as one term
    per class, so ``{a} -> t1, {b} -> t2`` hashes like ``{a, b} -> t`` once t1, t2 and t are
    found equivalent (rows of DFAs that were not minimised rule by rule).
    """
    pos, cls_col = np.nonzero(flat.reshape(n, n_cls) >= 0)
    key = pos * n + flat[pos * n_cls + cls_col]
    order = np.argsort(key)
    key, cls_col = key[order], cls_col[order].astype(np.uint64)
    parts = []
    if len(key):
        first = np.ones(len(key), dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        with np.errstate(over="ignore"):
            set_hash = np.add.reduceat(_mix(cls_col + _K_TGT), starts)
        m = len(starts)
        parts.append((key[starts] // n, key[starts] % n, np.full(m, n), np.ones(m, np.uint64),
                      np.zeros(m, np.uint64), set_hash))
    start = a.start
    call_edges = [(p, start[r], t) for p, row in enumerate(a.calls) if row for r, t in row]
    if call_edges:
        m = len(call_edges)
        c_owner, c_x, c_y = np.asarray(call_edges, dtype=np.int64).T
        k_call, k_tgt = np.full(m, _K_CALL, np.uint64), np.full(m, _K_TGT, np.uint64)
        parts.append((c_owner, c_x, c_y, k_call, k_call, k_tgt))
    token_edges = [(p, t, k) for p, row in enumerate(a.tokens) if row for k, t in row]
    if token_edges:
        m = len(token_edges)
        k_owner, k_x, k_salt = np.asarray(token_edges, dtype=np.int64).T
        with np.errstate(over="ignore"):
            salt = _mix(k_salt.astype(np.uint64) + _K_TOK)
        parts.append((k_owner, k_x, np.full(m, n), np.ones(m, np.uint64), salt,
                      np.full(m, _K_TOK, np.uint64)))
    if not parts:
        e, u = np.zeros(0, dtype=np.int64), np.zeros(0, np.uint64)
        return e, e, e, u, u, u
    owner, x, y, mul, salt, coef = (np.concatenate([part[i] for part in parts]) for i in range(6))
    order = np.argsort(owner, kind="stable")
    return (owner[order].astype(np.int64), x[order].astype(np.int64), y[order].astype(np.int64),
            mul[order], salt[order], coef[order])


def _first_members(classes: np.ndarray) -> np.ndarray:
    """Class id -> its smallest position."""
    n = len(classes)
    first = np.full(classes.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, classes, np.arange(n, dtype=np.int64))
    return first


def _is_bisimulation(a: "RuleAutomata", classes: np.ndarray, byte_next: np.ndarray) -> bool:
    """Exactly: does every position agree with its class's first member on flag and successors' classes?"""
    n = len(classes)
    mine = _first_members(classes)[classes]
    ext = np.append(classes, -1).astype(np.int32)
    succ = ext[byte_next]                      # -1 indexes the appended -1
    if not np.array_equal(succ, succ[mine]):
        return False
    accepting = np.asarray(a.accepting)
    if not np.array_equal(accepting, accepting[mine]):
        return False
    cl = classes.tolist()
    start = a.start
    linked = np.fromiter(map(bool, a.calls), dtype=bool, count=n) | np.fromiter(map(bool, a.tokens), dtype=bool, count=n)
    check = np.flatnonzero((linked | linked[mine]) & (mine != np.arange(n)))
    for p, r in zip(check.tolist(), mine[check].tolist()):
        if a.calls[p] or a.calls[r]:
            if ({(cl[start[x]], cl[t]) for x, t in a.calls[p]} != {(cl[start[x]], cl[t]) for x, t in a.calls[r]}):
                return False
        if a.tokens[p] or a.tokens[r]:
            if {(k, cl[t]) for k, t in a.tokens[p]} != {(k, cl[t]) for k, t in a.tokens[r]}:
                return False
    return True


def merge_equivalent_positions(a: "RuleAutomata") -> "RuleAutomata":
    """``a`` with equivalent positions merged into one (``a`` itself when none are)."""
    from halter.grammar.automaton import RuleAutomata
    n = a.n_positions
    if n < 2:
        return a
    flat = a.next_array.reshape(-1)
    classes = _classes(a, flat)
    if classes is None:
        return a
    rep = _first_members(classes)
    reps = np.sort(rep).tolist()                    # new positions in the order of their first member
    rank = np.empty(len(rep), dtype=np.int64)
    rank[classes[reps]] = np.arange(len(reps))
    new_id = rank[classes].tolist() + [-1]         # old position -> new; index -1 keeps -1
    canon: dict[int, int] = {}                      # a rule -> the first rule starting at its start
    for r, s in enumerate(a.start):
        canon.setdefault(new_id[s], r)
    start = [new_id[s] for s in a.start]
    rule_of = [a.rule_of[p] for p in reps]
    accepting = [a.accepting[p] for p in reps]
    ext = np.asarray(new_id, dtype=np.int32)           # ext[-1] == -1
    next_array = ext[a.next_array[reps]]
    a_calls, a_tokens = a.calls, a.tokens
    calls = [tuple(dict.fromkeys([(canon[start[r]], new_id[t]) for r, t in a_calls[p]])) if a_calls[p] else ()
             for p in reps]
    tokens = [tuple(dict.fromkeys([(k, new_id[t]) for k, t in a_tokens[p]])) if a_tokens[p] else () for p in reps]
    return RuleAutomata(rule_names=a.rule_names, root=a.root, start=start, rule_of=rule_of, accepting=accepting,
                        next_array=next_array, calls=calls, tokens=tokens, token_refs=a.token_refs,
                        class_of=a.class_of, n_classes=a.n_classes, nullable=a.nullable)
