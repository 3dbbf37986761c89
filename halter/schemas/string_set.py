"""A large set of string values (a long ``enum``) as one shared-suffix expression, built in linear time.

Written as an alternation of ``JsonText.quoted(v)``, an enum of 10,000 strings is 10,000 branches
that the engine's subset construction has to fold back into a tree, which costs seconds. Here the
values are folded first, the way a minimal acyclic automaton over characters is built: a trie of
the values, then equal subtrees (same characters to the same futures) merged bottom-up into one
node. Each node becomes one expression object, ``"`` where a value ends, ``| c1 rest1 | c2 rest2``
for its edges, with runs of single-edge nodes written as one sequence, and a node with several
parents is the *same* object under each of them. The engine builds a subexpression it meets again
once (``nfa.py``: ``start_of``, by identity), so its NFA is the size of the merged tree: the
characters' spellings are the converter's own (``JsonText.encode_text``: printable ASCII as
itself, other characters raw or escaped), and the language is exactly that of the alternation.
"""
from __future__ import annotations

from halter.grammar.ast import Expr, Literal, Seq, alt
from halter.schemas.json_text import JsonText

_QUOTE = Literal('"')


def string_set(js: JsonText, values: list[str]) -> Expr:
    """The quoted JSON spellings of every string in ``values`` (at least one), as one expression."""
    # the trie: per node its edges {char: child} and whether a value ends there
    edges: list[dict[str, int]] = [{}]
    final: list[bool] = [False]
    for v in values:
        q = 0
        for ch in v:
            nxt = edges[q].get(ch)
            if nxt is None:
                nxt = edges[q][ch] = len(edges)
                edges.append({})
                final.append(False)
            q = nxt
        final[q] = True
    # merge equal subtrees bottom up (children have higher numbers than their parents)
    canon = list(range(len(edges)))
    registry: dict[tuple, int] = {}
    for q in range(len(edges) - 1, -1, -1):
        out = edges[q] = {ch: canon[t] for ch, t in edges[q].items()}
        key = (final[q], tuple(sorted(out.items())))
        canon[q] = registry.setdefault(key, q)
    parents = [0] * len(edges)
    for q in set(canon):
        for t in edges[q].values():
            parents[t] += 1
    spell: dict[str, Expr] = {}

    def unit(ch: str) -> Expr:
        got = spell.get(ch)
        if got is None:
            got = spell[ch] = js.encode_text(ch)
        return got

    built: dict[int, Expr] = {}

    def node(q: int) -> Expr:
        """Node ``q`` (canonical) and everything after it, closing quote included."""
        # iterative: a node's children first (values may be long chains)
        stack = [q]
        while stack:
            p = stack[-1]
            if p in built:
                stack.pop()
                continue
            pending = [t for t in (_chain_end(edges, final, parents, c) for c in edges[p].values())
                       if t not in built]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            opts: list[Expr] = [_QUOTE] if final[p] else []
            for ch in sorted(edges[p]):
                opts.append(_branch(ch, edges[p][ch]))
            built[p] = alt(*opts)
        return built[q]

    def _branch(ch: str, t: int) -> Expr:
        """``ch`` then the run of single-edge nodes from ``t`` up to a shared or branching node."""
        items = [unit(ch)]
        run = []
        while not final[t] and len(edges[t]) == 1 and parents[t] == 1:
            (c, t), = edges[t].items()
            run.append(c)
        items.extend(unit(c) for c in run)
        items.append(built[t])
        return _joined(items)

    return Seq((_QUOTE, node(0)))


def _chain_end(edges, final, parents, t: int) -> int:
    """The node a run of single-edge, single-parent nodes starting at ``t`` leads to."""
    while not final[t] and len(edges[t]) == 1 and parents[t] == 1:
        (t,) = edges[t].values()
    return t


def _joined(items: list[Expr]) -> Expr:
    """A sequence with adjacent literals joined (``"a" "b"`` -> ``"ab"``); the last item, a shared
    node, is kept as it is."""
    out: list[Expr] = []
    for it in items[:-1]:
        parts = it.items if isinstance(it, Seq) else (it,)
        for p in parts:
            if out and isinstance(p, Literal) and isinstance(out[-1], Literal):
                out[-1] = Literal(out[-1].text + p.text)
            else:
                out.append(p)
    out.append(items[-1])
    return out[0] if len(out) == 1 else Seq(tuple(out))
