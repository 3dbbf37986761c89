"""Merge grammar positions that no input can tell apart, across rules (a bisimulation quotient).

Each rule's DFA is minimal on its own, but rules repeat one another's tails: every property rule a
JSON Schema makes ends in ``ws ":" ws <value> ws``, every closed object repeats the same separators,
and equal sub-rules come out of ``$ref``s under different names. Two positions are *equivalent* when
they agree on whether the rule may end there and, for every byte class, call and token reference,
step to equivalent positions (calls compared by the callee's start). Equivalent positions accept the
same texts under any caller, so they can be one position: the token tables are then computed once
for all of them, and the parser states that differ only by which copy they sit in become one state
(the string value of each property, say, no longer makes states of its own).

The coarsest such partition is found by Moore's refinement with 64-bit hashes (each round hashes a
position's flag, its class and its successors' classes), one vectorised pass per round; the result is
then checked exactly, and if a hash collision ever merged two positions that differ the automata are
returned unchanged.
"""
from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from halter.grammar.automaton import RuleAutomata

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_K_OLD, _K_ACC, _K_CALL, _K_TOK, _K_TGT = (np.uint64(k) for k in (
    0x9E3779B97F4A7C15, 0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3))


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return x ^ (x >> _S31)


def _bounds(owner: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each owner's entries begin and end in ``owner`` (sorted ascending), for ``_segment_sums``."""
    b = np.searchsorted(owner, np.arange(n + 1))
    return b[1:], b[:-1]


def _segment_sums(bounds: tuple[np.ndarray, np.ndarray], values: np.ndarray) -> np.ndarray:
    """Per owner, the wrapping sum of its ``values``."""
    total = np.concatenate(([np.uint64(0)], np.cumsum(values, dtype=np.uint64)))
    return total[bounds[0]] - total[bounds[1]]


def equivalence_classes(a: "RuleAutomata") -> np.ndarray | None:
    """Position -> class id of the coarsest partition found (None: every position is its own)."""
    n, n_cls = a.n_positions, a.n_classes
    if n < 2:
        return None
    with np.errstate(over="ignore"):
        flat = np.fromiter(chain.from_iterable(a.byte_next), dtype=np.int64, count=n * n_cls)
        live = flat >= 0
        pos = np.repeat(np.arange(n, dtype=np.int64), n_cls)[live]
        cls_col = np.tile(np.arange(n_cls, dtype=np.uint64), n)[live]
        tgt = flat[live]
        # one edge per (position, target): the classes leading there, summarised by a hash of the set
        key = pos * n + tgt
        order = np.argsort(key, kind="stable")
        key, cls_col = key[order], cls_col[order]
        first = np.ones(len(key), dtype=bool)
        first[1:] = key[1:] != key[:-1]
        starts = np.flatnonzero(first)
        set_hash = np.add.reduceat(_mix(cls_col + _K_TGT), starts) if len(key) else np.zeros(0, np.uint64)
        e_pos, e_tgt = key[starts] // n, key[starts] % n
        c_pos, c_start, c_tgt = _flatten(a.calls, lambda r, t: (a.start[r], t))
        k_pos, k_ref, k_tgt = _flatten(a.tokens, lambda k, t: (k, t))
        e_b, c_b, k_b = _bounds(e_pos, n), _bounds(c_pos, n), _bounds(k_pos, n)
        acc = np.asarray(a.accepting, dtype=np.uint64) * _K_ACC
        h = _mix(acc + np.uint64(1))
        count = len(np.unique(h))
        while True:
            total = h * _K_OLD + acc
            total += _segment_sums(e_b, _mix(set_hash ^ h[e_tgt]))
            if len(c_pos):
                total += _segment_sums(c_b, _mix(h[c_start] * _K_CALL + h[c_tgt])) * _K_CALL
            if len(k_pos):
                total += _segment_sums(k_b, _mix(k_ref.astype(np.uint64) * _K_TOK + h[k_tgt])) * _K_TOK
            h = _mix(total)
            uniq, classes = np.unique(h, return_inverse=True)
            if len(uniq) == count:
                break
            count = len(uniq)
    if count == n or not _is_bisimulation(a, classes, flat.reshape(n, n_cls)):
        return None
    return classes


def _flatten(rows, item) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    owner, first, second = [], [], []
    for p, row in enumerate(rows):
        for x, t in row:
            u, v = item(x, t)
            owner.append(p)
            first.append(u)
            second.append(v)
    return (np.asarray(owner, dtype=np.int64), np.asarray(first, dtype=np.int64),
            np.asarray(second, dtype=np.int64))


def _is_bisimulation(a: "RuleAutomata", classes: np.ndarray, byte_next: np.ndarray) -> bool:
    """Exactly: does every position agree with its class's first member on flag and successors' classes?"""
    n = len(classes)
    rep = np.full(classes.max() + 1, n, dtype=np.int64)
    np.minimum.at(rep, classes, np.arange(n, dtype=np.int64))
    mine = rep[classes]
    ext = np.append(classes, -1)
    succ = ext[byte_next]                      # -1 indexes the appended -1
    if not np.array_equal(succ, succ[mine]):
        return False
    accepting = np.asarray(a.accepting)
    if not np.array_equal(accepting, accepting[mine]):
        return False
    cl = classes.tolist()
    start = a.start
    linked = np.fromiter((bool(c or k) for c, k in zip(a.calls, a.tokens)), dtype=bool, count=n)
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
    classes = equivalence_classes(a)
    if classes is None:
        return a
    n = a.n_positions
    rep = np.full(classes.max() + 1, n, dtype=np.int64)
    np.minimum.at(rep, classes, np.arange(n, dtype=np.int64))
    reps = np.sort(rep).tolist()                    # new positions in the order of their first member
    rank = np.empty(len(rep), dtype=np.int64)
    rank[classes[reps]] = np.arange(len(reps))
    new_id = rank[classes].tolist() + [-1]         # old position -> new; index -1 keeps -1
    get = new_id.__getitem__
    canon: dict[int, int] = {}                      # a rule -> the first rule starting at its start
    for r, s in enumerate(a.start):
        canon.setdefault(new_id[s], r)
    start = [new_id[s] for s in a.start]
    rule_of = [a.rule_of[p] for p in reps]
    accepting = [a.accepting[p] for p in reps]
    byte_next = [tuple(map(get, a.byte_next[p])) for p in reps]
    calls = [tuple(dict.fromkeys((canon[start[r]], new_id[t]) for r, t in a.calls[p])) for p in reps]
    tokens = [tuple(dict.fromkeys((k, new_id[t]) for k, t in a.tokens[p])) for p in reps]
    return RuleAutomata(rule_names=a.rule_names, root=a.root, start=start, rule_of=rule_of, accepting=accepting,
                        byte_next=byte_next, calls=calls, tokens=tokens, token_refs=a.token_refs,
                        class_of=a.class_of, n_classes=a.n_classes, nullable=a.nullable)
