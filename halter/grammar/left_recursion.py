"""Rules that can reach themselves before reading anything: left recursion through empty prefixes.

``a ::= a | "x"`` or ``a ::= b``, ``b ::= ""? a`` call themselves again before a character is read.
halter's Earley parser reads them by their least fixed point (``a`` is ``"x"``; ``d ::= d`` matches
nothing), but other tools do not agree on them: llama.cpp refuses them, and a JSON Schema validator
recurses without end on the ``$ref`` cycles they come from. Callers warn about them.

Everything here is iterative (a syntax tree nests as deep as ``limits.nesting_depth``, and a rule
graph can be a chain of thousands of rules).
"""
from __future__ import annotations

from halter.grammar.ast import Alt, Expr, Literal, Repeat, RuleRef, Seq, children, rule_refs
from halter.grammar.graphs import reachable, strongly_connected_components


_END = object()


def _leaf_nullable(x: Expr, empty_rules: set[str]) -> bool | None:
    """Whether ``x`` can match "" when its own node tells (None: it depends on its children)."""
    if isinstance(x, Literal):
        return x.text == ""
    if isinstance(x, RuleRef):
        return x.name in empty_rules
    if isinstance(x, (Seq, Alt)):
        return None
    if isinstance(x, Repeat):
        return True if x.min == 0 else None
    return False                                    # a character, a class, a token


def _nullable(e: Expr, empty_rules: set[str], memo: dict[int, bool] | None = None) -> bool:
    """Whether ``e`` can match "", looking no further than needed
    (a sequence stops at its first item that cannot be empty, an alternation at its first that can:
    a property's rule is decided by the key it starts with). ``memo``: sub-expressions decided
    before, under the same ``empty_rules``, by identity (shared by calls over one grammar's rules,
    which outlive it)."""
    ret = _leaf_nullable(e, empty_rules)
    if ret is not None:
        return ret
    if memo is None:
        memo = {}
    elif id(e) in memo:
        return memo[id(e)]
    stack = [(e, iter(children(e)))]
    while stack:
        x, it = stack[-1]
        if ret is not None:                         # a child of x has just been decided
            if isinstance(x, Repeat) or (not ret if isinstance(x, Seq) else ret):
                memo[id(x)] = ret                   # ... and that decides x
                stack.pop()
                continue
            ret = None
        k = next(it, _END)
        if k is _END:                               # every item could be empty / no option could
            ret = memo[id(x)] = isinstance(x, Seq)
            stack.pop()
            continue
        ret = memo.get(id(k))
        if ret is None:
            ret = _leaf_nullable(k, empty_rules)
        if ret is None:
            stack.append((k, iter(children(k))))
    return bool(ret)


def nullable_rules(rules: dict[str, Expr], refs: dict[str, set[str]] | None = None) -> set[str]:
    """The rules that can match the empty string (``refs``: the names each rule references, where
    the caller has them)."""
    users: dict[str, set[str]] = {}
    for name, body in rules.items():
        names = refs[name] if refs is not None else {ref.name for ref in rule_refs(body, distinct=True)}
        for callee in names:
            users.setdefault(callee, set()).add(name)
    empty: set[str] = set()
    todo = list(rules)
    while todo:
        name = todo.pop()
        if name in empty or not _nullable(rules[name], empty):
            continue
        empty.add(name)
        todo.extend(u for u in users.get(name, ()) if u not in empty)
    return empty


def _first_calls(body: Expr, empty: set[str], memo: dict[int, bool]) -> set[str]:
    """Rules ``body`` can call before it has read a character (``memo``: see ``_nullable``; a
    sequence's items are decided only up to the first that cannot be empty)."""
    out: set[str] = set()
    seen: set[int] = set()            # a sub-expression shared by several parents is looked into once
    stack = [body]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, RuleRef):
            out.add(x.name)
        elif isinstance(x, Seq):
            for item in x.items:
                stack.append(item)
                if not _nullable(item, empty, memo):
                    break
        elif isinstance(x, Alt):
            stack.extend(x.options)
        elif isinstance(x, Repeat) and x.max != 0:
            stack.append(x.expr)
    return out


def left_recursive_rules(rules: dict[str, Expr]) -> list[list[str]]:
    """The cycles of rules that call each other before reading a character: each strongly
    connected component of that call graph that has a cycle, its rules in the grammar's order.

    Such a cycle is a cycle of rule references too, so only the rules on a cycle of references
    are looked into, and whether rules match "" only for them and what they call (a JSON Schema's
    grammar has hundreds of rules, and usually only ``json-value``'s few are on a cycle)."""
    refs = {name: {r.name for r in rule_refs(body, distinct=True)} & rules.keys() for name, body in rules.items()}
    cyclic: set[str] = set()
    for comp in strongly_connected_components(list(rules), refs.__getitem__):
        if len(comp) > 1 or comp[0] in refs[comp[0]]:
            cyclic.update(comp)
    if not cyclic:
        return []
    reach = reachable(cyclic, refs.__getitem__)
    empty = nullable_rules({name: body for name, body in rules.items() if name in reach}, refs)
    memo: dict[int, bool] = {}
    first = {name: _first_calls(body, empty, memo) & cyclic for name, body in rules.items() if name in cyclic}
    order = {name: i for i, name in enumerate(rules)}
    cycles = []
    for comp in strongly_connected_components([n for n in rules if n in cyclic], first.__getitem__):
        if len(comp) > 1 or comp[0] in first[comp[0]]:
            cycles.append(sorted(comp, key=order.__getitem__))
    return sorted(cycles, key=lambda c: order[c[0]])
