"""Trimming the per-rule DFAs before their states are numbered as grammar positions.

A rule's DFA is ``(accepting, byte_next, calls, tokens)`` per state, start 0 (``automaton.py``).
``trim_rules`` drops calls of rules that can never complete (``NeverMatches`` when the root is
one of them) and the states that cannot reach the rule's end or be reached from its start;
``nullable_rules_of`` says which rules can complete without reading a byte.
"""
from __future__ import annotations

from halter.errors import NeverMatches
from halter.grammar.graphs import strongly_connected_components


def nullable_rules_of(per_rule: list) -> list[bool]:
    """Per rule: can it complete without reading anything (through calls of nullable rules)?"""
    nullable = [False] * len(per_rule)
    changed = True
    while changed:
        changed = False
        for r, (acc, _bn, cl, _tk) in enumerate(per_rule):
            if nullable[r]:
                continue
            seen, stack = {0}, [0]
            while stack:
                q = stack.pop()
                if acc[q]:
                    nullable[r] = changed = True
                    break
                for rr, t in cl[q]:
                    if nullable[rr] and t not in seen:
                        seen.add(t)
                        stack.append(t)
    return nullable


def trim_rules(per_rule: list, names: list[str], root_id: int) -> list:
    """Drop calls to rules that can never complete and states that cannot reach the rule's end."""
    n = len(per_rule)
    productive = [False] * n
    callers: list[set[int]] = [set() for _ in range(n)]
    for r, (_acc, _bn, cl, _tk) in enumerate(per_rule):
        for row in cl:
            for rr, _t in row:
                callers[rr].add(r)
    # a worklist: a rule is looked at again only when a rule it calls became productive
    # (a pass over every rule until nothing changes is quadratic on a chain of rules)
    # callees before their callers (components of the call graph, each after those it reaches), so
    # that most rules are decided at their first look (the fixpoint is the same in any order).
    # A rule is productive when its start is live (can reach its end through productive calls);
    # the live states found then are kept, and found again at the end only where a call was left
    # out because its callee was not (yet) known productive.
    callees = [sorted({rr for row in cl for rr, _t in row}) for _acc, _bn, cl, _tk in per_rule]
    order = [r for comp in strongly_connected_components(range(n), callees.__getitem__) for r in comp]
    pending, queued = order[::-1], [True] * n
    live_of: list[tuple[set[int], bool] | None] = [None] * n
    while pending:
        r = pending.pop()
        queued[r] = False
        if productive[r]:
            continue
        live_of[r] = got = _live_states(per_rule[r], productive)
        if 0 not in got[0]:
            continue
        productive[r] = True
        for c in callers[r]:
            if not productive[c] and not queued[c]:
                queued[c] = True
                pending.append(c)
    if not productive[root_id]:
        raise NeverMatches(f"the grammar can never match: rule '{names[root_id]}' has no finite "
                           f"derivation (check for recursion without a base case)", 1, 1)
    all_productive = all(productive)
    out = []
    for r, (acc, bn, cl, tk) in enumerate(per_rule):
        if not all_productive:
            cl = [[(rr, t) for rr, t in row if productive[rr]] for row in cl]
        m = len(acc)
        got = live_of[r]
        if got is None or got[1]:                   # (calls were left out: with the final verdicts)
            got = _live_states((acc, bn, cl, tk), productive)
        live = got[0]
        if 0 not in live:           # an unproductive rule: keep one inert state so numbering holds
            out.append(([False], [[-1] * len(bn[0])], [[]], [[]]))
            continue
        if len(live) == m and all_productive:      # the usual case: subset construction made only
            out.append((acc, bn, cl, tk))          # states reachable from the start, by these edges
            continue
        # reachable from start through live states only
        reach, stack = {0}, [0]
        while stack:
            q = stack.pop()
            for t in (*bn[q], *(t for _rr, t in cl[q]), *(t for _k, t in tk[q])):
                if t in live and t not in reach:
                    reach.add(t)
                    stack.append(t)
        if len(reach) == m:                        # the usual case: nothing to drop
            out.append((acc, bn, cl, tk))
            continue
        order = sorted(reach)
        new = {q: i for i, q in enumerate(order)}
        renum = [-1] * (m + 1)                  # old state -> new (-1: dropped); renum[-1] is -1
        for q, i in new.items():
            renum[q] = i
        get = renum.__getitem__
        out.append(([acc[q] for q in order],
                    [list(map(get, bn[q])) for q in order],
                    [[(rr, new[t]) for rr, t in cl[q] if t in new] for q in order],
                    [[(k, new[t]) for k, t in tk[q] if t in new] for q in order]))
    return out


def _live_states(dfa, productive: list[bool]) -> tuple[set[int], bool]:
    """(the states that can reach an accepting state, calling only productive rules; whether a
    call of a rule not productive was left out): a search back from the accepting states."""
    acc, bn, cl, tk = dfa
    m = len(acc)
    rev: list[list[int]] = [[] for _ in range(m)]
    left_out = False
    for q, row in enumerate(bn):
        for t in set(row):
            if t >= 0:
                rev[t].append(q)
        if cl[q]:
            for rr, t in cl[q]:
                if productive[rr]:
                    rev[t].append(q)
                else:
                    left_out = True
        if tk[q]:
            for _k, t in tk[q]:
                rev[t].append(q)
    live = {q for q in range(m) if acc[q]}
    stack = list(live)
    while stack:
        q = stack.pop()
        for p in rev[q]:
            if p not in live:
                live.add(p)
                stack.append(p)
    return live, left_out
