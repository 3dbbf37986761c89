"""Rule automata kept for the life of the process, for rule bodies that recur from grammar to grammar.

Every grammar the JSON Schema converter makes holds the same helper rules: any JSON value, object,
array, string, number, whitespace, escapes. Building a rule's automaton (its NFA, then subset
construction) is a pure function of its body, of which callees are expanded into it and their
bodies, and of the names it calls. A body made ``canonical`` (one object per distinct body, kept for
the life of the process) can therefore be keyed by identity: ``lookup`` finds the DFA an earlier
grammar built for the same key, and ``build_automata`` then neither emits nor determinizes it, and
numbers the rules it calls in the order emitting it would have (so positions come out as before).

Only rules whose emission touched nothing outside their own NFA are kept: no auxiliary rules made
or called (``repeats.py``), no token references. ``tests/test_rule_memo.py`` checks grammars built
with the memo against grammars built without it, position by position.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from halter.grammar.ast import Expr, rule_refs

if TYPE_CHECKING:
    from halter.grammar.nfa import Nfa, NfaBuilder

MAX_CANONICAL = 4096      # distinct bodies kept (the converter's helpers make a few dozen)
MAX_ENTRIES = 1024        # rule automata kept

_canon: dict[Expr, Expr] = {}
_canon_ids: set[int] = set()
_entries: dict[tuple, tuple] = {}
enabled = True            # (tests turn it off to build the same grammars without it)


def canonical(body: Expr) -> Expr:
    """The one object kept for bodies equal to ``body`` (``body`` itself past MAX_CANONICAL)."""
    if len(_canon) >= MAX_CANONICAL:
        return _canon.get(body, body)
    hit = _canon.setdefault(body, body)          # (one hash of the body; atomic)
    if hit is body:
        _canon_ids.add(id(body))
    return hit


def _context(b: "NfaBuilder", body: Expr, seen: dict[int, Any]) -> Any:
    """What, besides ``body`` itself, decides the NFA emitted for it: per rule it names, whether it
    is expanded in place, and if so its (canonical) body and that body's context. None when some
    expanded body is not canonical (no stable key)."""
    key = id(body)
    if key in seen:
        return seen[key]
    seen[key] = None                                  # (expanded rules never recurse)
    parts = []
    for name in dict.fromkeys(r.name for r in rule_refs(body, distinct=True)):
        if name in b.inline:
            sub = b.rules[name]
            if id(sub) not in _canon_ids:
                return None
            ctx = _context(b, sub, seen)
            if ctx is None:
                return None
            parts.append((name, id(sub), ctx))
        else:
            parts.append((name,))
    seen[key] = out = tuple(parts)
    return out


def key_of(b: "NfaBuilder", name: str) -> tuple | None:
    """The memo key of rule ``name`` as ``b`` would emit it (None: not kept)."""
    if not enabled:
        return None
    body = b.rules.get(name)
    if body is None or id(body) not in _canon_ids:
        return None
    ctx = _context(b, body, {})
    return None if ctx is None else (id(body), ctx)


def lookup(key: tuple | None) -> tuple | None:
    """(dfa with callee names, the rule's byte-range cuts, callee names in first-call order) or None."""
    return None if key is None else _entries.get(key)


def keepable(b: "NfaBuilder", nfa: "Nfa", rules_before: int) -> bool:
    """Did emitting the rule into ``nfa`` stay inside it (no auxiliary rule, no token reference)?"""
    from halter.grammar.nfa import TOKEN
    if len(b.rules) != rules_before or any(name not in b.user_rules for name in nfa.called):
        return False
    return not any(k == TOKEN for edges in nfa.edges for k, _lb, _t in edges)


def store(key: tuple, dfa: tuple, names: list[str], cuts: set[int], called: list[str]) -> None:
    """Keep a rule's DFA (its calls by callee name) under ``key``."""
    if len(_entries) >= MAX_ENTRIES:
        return
    acc, bn, cl, tk = dfa
    named = [tuple((names[r], t) for r, t in row) for row in cl]
    _entries.setdefault(key, (tuple(acc), tuple(map(tuple, bn)), tuple(named), frozenset(cuts), tuple(called)))


def restore(entry: tuple, index: dict[str, int]) -> tuple:
    """The DFA of an entry with its calls numbered by ``index`` (the grammar's rule ids), in the
    order subset construction would give them."""
    acc, bn, named, _cuts, _called = entry
    cl = [sorted((index[n], t) for n, t in row) if row else [] for row in named]
    return list(acc), [list(row) for row in bn], cl, [[] for _ in acc]
