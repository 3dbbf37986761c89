"""Syntax tree -> one minimal byte-level DFA per rule, whose edges are byte classes, rule calls and token refs.

Each rule body is a regular expression over three kinds of symbols: bytes (character classes are
expanded to UTF-8 byte ranges), calls of other rules, and token references. It is turned into an NFA,
determinized (rule calls are symbols, so ``x? x? x?`` or ``("a" | "a" | "aa")*`` collapse into a few
states) and trimmed of states that can never complete (``trim.py``). The states of all rules are then numbered
globally: these are the grammar *positions* that token masks are precomputed for. Last, positions
that no input tells apart are merged, within a rule and across rules (``quotient.py``): that
minimises every rule's DFA and shares the tails rules repeat. (``merge=False`` minimises each rule
on its own instead.)
Bytes are grouped into classes (bytes no rule tells apart share a class) to keep tables small. Each
rule is determinized over its own, coarser, classes (the bytes *it* tells apart: most rules tell a few
apart where the grammar tells a hundred), and its rows are widened to the grammar's classes with one
numpy gather; the global byte table is a numpy array (``RuleAutomata.next_array``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from halter.errors import RuleTooComplex
from halter.grammar.ast import Expr, TokenRef
from halter.grammar.minimize import minimize_rule as _minimize
from halter.grammar.nfa import BYTES, CALL, EPS, TOKEN, Nfa, NfaBuilder
from halter.grammar.quotient import merge_equivalent_positions
from halter.grammar.split_rules import split_repeats
from halter.grammar.trim import nullable_rules_of as _nullable
from halter.grammar.trim import trim_rules as _trim

MAX_DFA_STATES = 50_000
# Bump whenever the construction changes: positions are cached on disk by number (see compiled.py).
AUTOMATON_VERSION = "15"


@dataclass
class RuleAutomata:
    """Global tables over all DFA states (positions) of all rules reachable from the root."""
    rule_names: list[str]
    root: int
    start: list[int]                       # rule -> its start position
    rule_of: list[int]                     # position -> rule (the first, where positions of rules merged)
    accepting: list[bool]                  # position -> the rule may end here
    next_array: np.ndarray                 # [position, byte class] -> next position (-1: none), int32
    calls: list[tuple[tuple[int, int], ...]]    # position -> ((rule, position after the call), ...)
    tokens: list[tuple[tuple[int, int], ...]]   # position -> ((token-ref index, next position), ...)
    token_refs: list[TokenRef]
    class_of: list[int]                    # byte -> class
    n_classes: int
    nullable: list[bool]                   # rule -> can match the empty string
    has_bytes: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.has_bytes = (self.next_array >= 0).any(axis=1).tolist()

    @property
    def byte_next(self) -> "RowTuples":
        """Position -> next position per byte class (-1: none): rows of ``next_array`` as tuples,
        each made the first time it is read (stepping a byte in Python reads these; a document
        meets a few of a large grammar's positions)."""
        rows = self.__dict__.get("_byte_next")
        if rows is None:
            rows = self.__dict__["_byte_next"] = RowTuples(self.next_array)
        return rows

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_byte_next", None)         # (made again from next_array when needed)
        return state

    @property
    def n_positions(self) -> int:
        return len(self.rule_of)


class RowTuples(dict):
    """Rows of a 2-D array as tuples of ints, by row index, each made on first access."""

    __slots__ = ("_array",)

    def __init__(self, array: np.ndarray) -> None:
        super().__init__()
        self._array = array

    def __missing__(self, row: int) -> tuple[int, ...]:
        if not 0 <= row < len(self._array):
            raise IndexError(f"row {row} of {len(self._array)}")
        got = self[row] = tuple(self._array[row].tolist())
        return got


def _byte_classes(builders: list[tuple[Nfa, int, int]]) -> list[int]:
    """Byte -> class: bytes between consecutive ends of any byte range of any rule share one."""
    cuts = {0, 256}
    for nfa, _, _ in builders:
        for edges in nfa.edges:
            for kind, label, _t in edges:
                if kind == BYTES:
                    cuts.add(label[0])
                    cuts.add(label[1] + 1)
    bounds = sorted(cuts)
    class_of = [0] * 256
    for ci in range(len(bounds) - 1):
        for b in range(bounds[ci], bounds[ci + 1]):
            class_of[b] = ci
    return class_of


def _determinize(nfa: Nfa, s: int, e: int, class_starts: np.ndarray, name: str):
    """Subset construction over the rule's own byte classes.

    Returns ((accepting, byte_next, calls, tokens) per DFA state, start = 0; and the rule's class
    of each of the grammar's classes, ``class_starts`` giving their first bytes). The rule's classes
    are coarser than the grammar's (and ordered alike), so the states are found in the same order
    as over the grammar's classes, and ``rows[:, local]`` are the rows over the grammar's classes.
    """
    closure_cache: dict[int, frozenset[int]] = {}
    # per NFA state: its epsilon targets, byte edges as byte intervals [lo, hi), calls and token refs
    eps_edges: list[list[int]] = []
    byte_edges: list[list[tuple[int, int, int]]] = []
    linked: set[int] = set()                    # NFA states with call or token edges
    call_edges: dict[int, list[tuple[int, int]]] = {}
    tok_edges: dict[int, list[tuple[int, int]]] = {}
    cuts = {0, 256}
    for q, edges in enumerate(nfa.edges):
        eps, byt = [], []
        for k, lb, t in edges:
            if k == EPS:
                eps.append(t)
            elif k == BYTES:
                lo, hi = lb[0], lb[1] + 1
                byt.append((lo, hi, t))
                cuts.add(lo)
                cuts.add(hi)
            elif k == CALL:
                call_edges.setdefault(q, []).append((lb, t))
                linked.add(q)
            elif k == TOKEN:
                tok_edges.setdefault(q, []).append((lb, t))
                linked.add(q)
        eps_edges.append(eps)
        byte_edges.append(byt)
    bounds = sorted(cuts)
    at = {c: i for i, c in enumerate(bounds)}   # a byte where a class starts -> the class
    n_classes = len(bounds) - 1
    local = np.searchsorted(np.asarray(bounds), class_starts, side="right") - 1
    no_edges: list = []

    def eclose(states) -> frozenset[int]:
        out, stack = set(states), list(states)
        while stack:
            for t in eps_edges[stack.pop()]:
                if t not in out:
                    out.add(t)
                    stack.append(t)
        return frozenset(out)

    start = eclose([s])
    ids = {start: 0}
    order = [start]
    accepting, byte_next, calls, tokens = [], [], [], []

    def target(states) -> int:
        key = frozenset(states)
        sub = closure_cache.get(key)
        if sub is None:
            sub = closure_cache[key] = eclose(key)
        dfa_id = ids.get(sub)
        if dfa_id is None:
            if len(order) >= MAX_DFA_STATES:
                raise RuleTooComplex(f"rule '{name}' is too complex: its automaton exceeds "
                                     f"{MAX_DFA_STATES} states; split it into smaller rules", rule=name)
            dfa_id = ids[sub] = len(order)
            order.append(sub)
        return dfa_id

    i = 0
    while i < len(order):
        subset = order[i]
        i += 1
        if len(subset) == 1:
            for q in subset:
                intervals = byte_edges[q]
        else:
            intervals = [iv for q in subset for iv in byte_edges[q]]
        row = [-1] * n_classes
        if len(intervals) == 1:                 # one byte range (inside a literal, most states)
            lo, hi, t = intervals[0]
            lo, hi = at[lo], at[hi]
            row[lo:hi] = [target((t,))] * (hi - lo)
        elif intervals:
            ivs = sorted(intervals)
            if all(ivs[k][1] <= ivs[k + 1][0] for k in range(len(ivs) - 1)):
                # disjoint ranges (the first bytes of a few literals or classes): each its own
                # target, found in the order the sweep below would find them
                for lo, hi, t in ivs:
                    lo, hi = at[lo], at[hi]
                    row[lo:hi] = [target((t,))] * (hi - lo)
            else:
                # classes between consecutive interval ends share one target set: a sweep over
                # the ends keeps the set of covering intervals' targets, one lookup per segment
                ends = sorted({lo for lo, _, _ in intervals} | {hi for _, hi, _ in intervals})
                where = {c: i for i, c in enumerate(ends)}
                opens: list[list[int]] = [[] for _ in ends]
                closes: list[list[int]] = [[] for _ in ends]
                for lo, hi, t in intervals:
                    opens[where[lo]].append(t)
                    closes[where[hi]].append(t)
                active: dict[int, int] = {}
                for k in range(len(ends) - 1):
                    for t in closes[k]:
                        if active[t] == 1:
                            del active[t]
                        else:
                            active[t] -= 1
                    for t in opens[k]:
                        active[t] = active.get(t, 0) + 1
                    if active:
                        lo, hi = at[ends[k]], at[ends[k + 1]]
                        row[lo:hi] = [target(active)] * (hi - lo)
        accepting.append(e in subset)
        byte_next.append(row)
        if linked.isdisjoint(subset):           # most states: no calls, no token references
            calls.append(no_edges)
            tokens.append(no_edges)
            continue
        by_call: dict[int, set[int]] = {}
        by_tok: dict[int, set[int]] = {}
        for q in subset:
            for r, t in call_edges.get(q, no_edges):
                by_call.setdefault(r, set()).add(t)
            for k, t in tok_edges.get(q, no_edges):
                by_tok.setdefault(k, set()).add(t)
        calls.append(sorted((r, target(ts)) for r, ts in by_call.items()))
        tokens.append(sorted((k, target(ts)) for k, ts in by_tok.items()))
    return (accepting, byte_next, calls, tokens), local


def build_automata(rules: dict[str, Expr], root: str, *, merge: bool = True) -> RuleAutomata:
    """Compile the rules reachable from ``root`` into global position tables.

    ``merge``: merge positions that no input tells apart, across rules (``quotient.py``).
    Rules are expanded into their callers where that helps (``NfaBuilder.plan_inlining``); when a
    rule's automaton then grows past the limit, the grammar is built again without expanding any,
    so that the limit is only ever hit by a rule as the user wrote it.
    """
    b = NfaBuilder(rules)
    b.build_all(root)
    try:
        return _assemble(b, *_determinize_all(b, merge), root, merge)
    except RuleTooComplex as first:
        err = first
    expand_first = bool(b.inline)       # first retry: the rules as written, none expanded
    split: set[str] = set()
    while True:
        if expand_first:
            expand_first = False
        else:
            # a rule as the user wrote it is too large: its repeats become rules (split_rules.py)
            name = next((n for n in (err.rule, (err.rule or "").split("--")[0])
                         if n in rules and n not in split), None)
            if name is None:
                raise err
            split.add(name)
            rules = split_repeats(rules, name)
        b = NfaBuilder(rules)
        b.build_all(root, inline=False)
        try:
            per_rule, widen = _determinize_all(b, merge)
        except RuleTooComplex as again:
            err = again
            continue
        return _assemble(b, per_rule, widen, root, merge)


def _determinize_all(b: NfaBuilder, merge: bool) -> tuple[list, list[np.ndarray]]:
    """Each rule's DFA over its own classes, and the map from the grammar's classes to those;
    ``RuleTooComplex`` (a ``GrammarError``) if one is too large."""
    class_of = _byte_classes(b.nfas)
    n_classes = max(class_of) + 1
    b.class_of, b.n_classes = class_of, n_classes
    class_starts = np.asarray([0] + [x for x in range(1, 256) if class_of[x] != class_of[x - 1]])
    per_rule, widen = [], []
    for r, (nfa, s, e) in enumerate(b.nfas):
        dfa, local = _determinize(nfa, s, e, class_starts, b.names[r])
        # the merge at the end finds every equivalence that minimising each rule would (and those
        # across rules), so rule-by-rule minimisation only runs when there is no merge
        per_rule.append(dfa if merge else _minimize(*dfa))
        widen.append(local)
    return per_rule, widen


def _assemble(b: NfaBuilder, per_rule: list, widen: list[np.ndarray], root: str, merge: bool) -> RuleAutomata:
    class_of, n_classes = b.class_of, b.n_classes
    per_rule = _trim(per_rule, b.names, root_id=0)
    offsets, total = [], 0
    for acc, *_ in per_rule:
        offsets.append(total)
        total += len(acc)
    rule_of, accepting, blocks, calls, tokens = [], [], [], [], []
    for r, (acc, bn, cl, tk) in enumerate(per_rule):
        off = offsets[r]
        rule_of.extend([r] * len(acc))
        accepting.extend(acc)
        rows = np.array(bn, dtype=np.int32)[:, widen[r]]          # the grammar's classes
        np.add(rows, off, out=rows, where=rows >= 0)              # local state -> position; -1 stays
        blocks.append(rows)
        for q in range(len(acc)):
            calls.append(tuple((rr, t + off) for rr, t in cl[q]))
            tokens.append(tuple((k, t + off) for k, t in tk[q]))
    nullable = _nullable(per_rule)
    automata = RuleAutomata(rule_names=b.names, root=0, start=offsets, rule_of=rule_of, accepting=accepting,
                            next_array=np.concatenate(blocks), calls=calls, tokens=tokens,
                            token_refs=b.token_refs, class_of=class_of, n_classes=n_classes, nullable=nullable)
    return merge_equivalent_positions(automata) if merge else automata
