"""Graph algorithms the grammar layer shares, iteratively (a grammar's rule graph can be a chain of
thousands of rules, deeper than Python's stack): strongly connected components, reachability."""
from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

N = TypeVar("N", bound=Hashable)


def strongly_connected_components(nodes: Iterable[N], succ: Callable[[N], Iterable[N]]) -> list[list[N]]:
    """Strongly connected components of the graph ``succ`` over ``nodes``, each after every
    component it reaches (Tarjan's algorithm with an explicit stack)."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    on_stack: set[N] = set()
    stack: list[N] = []
    out: list[list[N]] = []
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ(root)))]
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ(w))))
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work and low[v] < low[work[-1][0]]:
                    low[work[-1][0]] = low[v]
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    out.append(group)
    return out


def reachable(starts: Iterable[N], succ: Callable[[N], Iterable[N]]) -> set[N]:
    """Every node reachable from ``starts`` (themselves included) through ``succ``."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for t in succ(stack.pop()):
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return seen
