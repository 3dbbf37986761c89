"""A code-point DFA (char_automaton.py) written back as grammar rules over JSON-string spellings.

Each DFA state is a right-linear rule ``state ::= c1 state1 | c2 state2 | end`` where each ``c`` is
the set of characters leading to that successor, spelled the way every constrained string is
(raw and ``\\uXXXX``, short escapes, surrogate pairs: ``JsonText.encode_class``), and ``end`` (the
closing quote) ends an accepting state. To keep grammars small and readable, a state only gets its
own rule when it is needed: when several states lead to it or it lies on a cycle. Other states are
written inline in their only predecessor, a self-loop becomes ``c*``, and inlining stops at a
nesting depth of ``MAX_INLINE_DEPTH`` or ``MAX_INLINE_STATES`` states.
"""
from __future__ import annotations

from halter.grammar.ast import Expr, Repeat, RuleRef, alt
from halter.schemas.char_automaton import AutomatonTooLarge, Dfa, minimize, trim
from halter.schemas.json_text import JsonText, cat

MAX_STATE_RULES = 200
"""Most states written as rules of their own: the engine builds an automaton per rule (about
5 ms each for rules over classes like ``\\S``), so a 2,000-rule string would take 10 s to build."""
MAX_CHAIN = 128
"""Most states in a row outside cycles: the engine inlines rules used once, and recursing through
a 255-state chain (``[a-z]{1,255}`` minus a name) exceeds Python's stack."""
MAX_INLINE_DEPTH = 32
BIG_CLASS_RANGES = 8
MAX_INLINE_STATES = 24
"""A state whose inlined successors nest deeper or number more than these gets its own rule (the
engine builds an automaton per rule, so rules stay small)."""


def _cyclic(succ: list[dict[int, list]]) -> list[bool]:
    """Whether each state lies on a cycle through another state (Tarjan's SCCs, iterative)."""
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    out = [False] * n
    counter = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            q, it = work[-1]
            for t in it:
                if t == q:
                    continue
                if index[t] < 0:
                    index[t] = low[t] = counter
                    counter += 1
                    stack.append(t)
                    on[t] = True
                    work.append((t, iter(succ[t])))
                    break
                if on[t]:
                    low[q] = min(low[q], index[t])
            else:
                work.pop()
                if work:
                    p = work[-1][0]
                    low[p] = min(low[p], low[q])
                if low[q] == index[q]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on[x] = False
                        comp.append(x)
                        if x == q:
                            break
                    if len(comp) > 1:
                        for x in comp:
                            out[x] = True
    return out


def _longest_chain(succ: list[dict[int, list]], cyclic: list[bool]) -> int:
    """The most states in a row on a path that enters no cycle (the engine nests them).

    Edges into states on cycles are left out, which leaves no cycle: a longest-path DFS works.
    """
    longest: dict[int, int] = {}
    for root in range(len(succ)):
        stack = [(root, False)]
        while stack:
            q, expanded = stack.pop()
            nxt = [t for t in succ[q] if t != q and not cyclic[t]]
            if expanded:
                longest[q] = 1 + max((longest[t] for t in nxt), default=0)
            elif q not in longest:
                stack.append((q, True))
                stack.extend((t, False) for t in nxt if t not in longest)
    return max(longest.values(), default=0)


def _speller(js: JsonText, d: Dfa, hint: str):
    """Spells sets of ``d``'s symbols, sharing the large ones.

    A symbol of more than ``BIG_CLASS_RANGES`` ranges (``\\p{L}`` minus a few letters, say) gets
    one shared rule, so a transition is its small symbols as one character class plus references
    to the big ones: a key trie next to a ``\\p{L}`` pattern does not repeat 600 ranges per node.
    """
    big: dict[int, Expr] = {}
    cache: dict[tuple[int, ...], Expr] = {}

    def spell(syms: list[int]) -> Expr:
        key = tuple(syms)
        if key not in cache:
            small = [r for s in syms if len(d.symbols[s]) <= BIG_CLASS_RANGES for r in d.symbols[s]]
            parts = [js.encode_class(small)] if small else []
            for s in syms:
                if len(d.symbols[s]) > BIG_CLASS_RANGES:
                    if s not in big:
                        big[s] = js.rules.add(f"{hint}-chars", js.encode_class(d.symbols[s]))
                    parts.append(big[s])
            cache[key] = alt(*parts)
        return cache[key]
    return spell


def dfa_to_expr(d: Dfa, js: JsonText, hint: str, end: Expr) -> Expr | None:
    """The JSON-string spellings of ``d``'s language followed by ``end``; None if it is empty.

    ``d`` is minimized first. New rules are added to ``js.rules`` named after ``hint``. Raises
    ``AutomatonTooLarge`` when more than ``MAX_STATE_RULES`` states would need their own rule.
    """
    d = minimize(trim(d))
    if d.is_empty():
        return None
    rules = js.rules
    n = len(d)
    succ: list[dict[int, list]] = []
    indeg = [0] * n
    for q in range(n):
        groups: dict[int, list] = {}
        for sym, t in enumerate(d.trans[q]):
            if t >= 0:
                groups.setdefault(t, []).append(sym)
        succ.append(groups)
        for t in groups:
            if t != q:
                indeg[t] += 1
    spell = _speller(js, d, hint)
    cyclic = _cyclic(succ)
    is_rule = [indeg[q] > 1 or cyclic[q] or (q == d.start and indeg[q] > 0) for q in range(n)]
    if sum(is_rule) > MAX_STATE_RULES:
        raise AutomatonTooLarge(f"{sum(is_rule)} states would need their own rule")
    if _longest_chain(succ, cyclic) > MAX_CHAIN:
        raise AutomatonTooLarge(f"a chain of more than {MAX_CHAIN} states")
    names = {q: rules.reserve(f"{hint}-{i}") for i, q in enumerate(q for q in range(n) if is_rule[q])}
    body: dict[int, Expr] = {}
    depth: dict[int, int] = {}
    size: dict[int, int] = {}

    def write(q: int) -> Expr:
        parts: list[Expr] = []
        if d.accept[q]:
            parts.append(end)
        for t, ranges in succ[q].items():
            if t != q:
                nxt = RuleRef(names[t]) if t in names else body[t]
                parts.append(cat(spell(ranges), nxt))
        rest = alt(*parts)
        if q in succ[q]:
            return cat(Repeat(spell(succ[q][q]), 0, None), rest)
        return rest

    # inline states come before their (only) predecessor: a post-order walk from each rule root
    roots = [d.start] + [q for q in range(n) if is_rule[q] and q != d.start]
    for root in roots:
        stack = [(root, False)]
        while stack:
            q, expanded = stack.pop()
            if expanded:
                body[q] = write(q)
                inlined = [t for t in succ[q] if t != q and t not in names]
                depth[q] = 1 + max((depth[t] for t in inlined), default=0)
                size[q] = 1 + sum(size[t] for t in inlined)
                if (depth[q] > MAX_INLINE_DEPTH or size[q] > MAX_INLINE_STATES) and q not in names:
                    body[q] = rules.add(f"{hint}-part", body[q])
                    depth[q] = size[q] = 0
                continue
            stack.append((q, True))
            stack.extend((t, False) for t in succ[q] if t != q and t not in names and t not in body)
    for q, name in names.items():
        rules.define(name, body[q])
    return RuleRef(names[d.start]) if d.start in names else body[d.start]
