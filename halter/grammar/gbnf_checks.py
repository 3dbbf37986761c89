"""Whole-grammar checks after GBNF parsing, as llama.cpp makes them, plus the warnings halter adds.

* Undefined rules, exactly as ``llama_grammar_parser::parse`` finds them: over every rule it
  stored (auxiliary rules of superseded definitions included), a rule id below the largest one
  that was never defined, or a reference to a rule never defined, is an error.
* Left recursion, with llama.cpp's own test (``llama_grammar_detect_left_recursion``: a rule
  "may be empty" only when one of its alternatives is empty as written). llama.cpp refuses such
  grammars; halter parses them (Earley) and warns, naming the rule: a deliberate departure.
* Rules the root can reach that can never finish (every way through them needs themselves
  again, or a class that matches nothing): llama.cpp lets text enter them, halter never does; a
  warning names them.

Every walk here is iterative, so chains of thousands of rules are fine.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from halter.errors import GrammarError
from halter.grammar.ast import AnyChar, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, TokenRef, rule_refs

if TYPE_CHECKING:
    from halter.grammar.gbnf_parser import ParseResult


def check_llama_tables(result: "ParseResult", text: str) -> None:
    """Raise ``GrammarError`` for undefined rules as llama.cpp would; add the left-recursion warnings."""
    sym = result.symbols
    stored = sym.stored
    size = max(stored) + 1 if stored else 0
    missing = next((sid for sid in range(size) if sid not in stored), None)
    if missing is None:
        for sid in sorted(stored):
            for alternative in stored[sid]:
                missing = next((e for e in alternative if e >= 0 and e not in stored), None)
                if missing is not None:
                    break
            if missing is not None:
                break
    if missing is not None:
        _raise_undefined(result, missing, text)
    rule_id = _left_recursive(stored, size)
    if rule_id is not None:
        name = _owner(result, rule_id)
        line, col = result.positions.get(name, (1, 1))
        result.warnings.append((f"rule '{name}' is left-recursive (it can reach itself before reading "
                                "any character): halter parses it, llama.cpp refuses this grammar",
                                line, col, "left-recursion"))


def _raise_undefined(result: "ParseResult", sid: int, text: str) -> None:
    from halter.grammar.gbnf_lexer import line_starts, position_of
    sym = result.symbols
    name = sym.names[sid]
    offset = sym.first_use.get(sid, 0)
    starts = [o for o, _ in result.spans]
    k = bisect.bisect_right(starts, offset) - 1
    user = f" (used in rule '{result.spans[k][1]}')" if k >= 0 else ""
    raise GrammarError(f"undefined rule '{name}'{user}", *position_of(line_starts(text), offset), text)


def _owner(result: "ParseResult", sid: int) -> str:
    """The user's rule a symbol belongs to (a group or repetition id: the rule it was written in)."""
    sym = result.symbols
    return sym.names[sid] or sym.owner.get(sid, "root")


def _left_recursive(stored: dict[int, list[list[int]]], size: int) -> int | None:
    """llama.cpp's left-recursion test over all stored rules; the id it reports, or None."""
    visited = [False] * size
    in_progress = [False] * size
    may_be_empty = [False] * size
    for i in range(size):
        if visited[i] or i not in stored:
            continue
        # explicit-stack version of the recursive test: frames (rule, alternative, element index)
        stack = [[i, 0, 0]]
        in_progress[i] = True
        may_be_empty[i] = any(not a for a in stored[i])
        while stack:
            frame = stack[-1]
            rid, ai, ei = frame
            alts = stored[rid]
            if ai >= len(alts):
                in_progress[rid] = False
                visited[rid] = True
                stack.pop()
                if stack:                           # back in the caller: may it go on past this call?
                    caller = stack[-1]
                    if may_be_empty[rid]:
                        caller[2] += 1
                    else:
                        caller[1] += 1
                        caller[2] = 0
                continue
            alternative = alts[ai]
            if ei >= len(alternative) or alternative[ei] < 0:
                frame[1] += 1                       # end of alternative or a terminal: next alternative
                frame[2] = 0
                continue
            ref = alternative[ei]
            if ref >= size or ref not in stored:
                frame[1] += 1
                frame[2] = 0
                continue
            if in_progress[ref]:
                return i
            if visited[ref]:                        # (llama.cpp walks it again; the answer is the same)
                if may_be_empty[ref]:
                    frame[2] += 1
                else:
                    frame[1] += 1
                    frame[2] = 0
                continue
            in_progress[ref] = True
            may_be_empty[ref] = any(not a for a in stored[ref])
            stack.append([ref, 0, 0])
    return None


def nesting_depth(e: Expr) -> int:
    """How deep ``e``'s groups and repetitions nest (iterative: any depth)."""
    best, stack = 0, [(e, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (Seq, Alt, Repeat)):
            best = max(best, d)
        if isinstance(node, Seq):
            stack.extend((c, d + 1) for c in node.items)
        elif isinstance(node, Alt):
            stack.extend((c, d + 1) for c in node.options)
        elif isinstance(node, Repeat):
            stack.append((node.expr, d + 1))
    return best


def _productive(e: Expr, ok: set[str]) -> bool:
    if isinstance(e, RuleRef):
        return e.name in ok
    if isinstance(e, (Literal, AnyChar, TokenRef)):
        return True
    if isinstance(e, CharClass):
        return bool(e.code_point_ranges())
    if isinstance(e, Seq):
        return all(_productive(c, ok) for c in e.items)
    if isinstance(e, Alt):
        return any(_productive(c, ok) for c in e.options)
    return e.min == 0 or _productive(e.expr, ok)      # Repeat


def dead_end_warnings(rules: dict[str, Expr], root: str,
                      positions: dict[str, tuple[int, int]]) -> list[tuple[str, int, int, str]]:
    """Warnings for rules reachable from ``root`` that can never finish (root itself excluded:
    that is an error, ``NeverMatches``)."""
    import sys
    refs = {n: {r.name for r in rule_refs(b, distinct=True)} for n, b in rules.items()}
    reach, todo = {root}, [root]
    while todo:
        for r in refs.get(todo.pop(), ()):
            if r in rules and r not in reach:
                reach.add(r)
                todo.append(r)
    users: dict[str, list[str]] = {}
    for n in reach:
        for r in refs[n]:
            users.setdefault(r, []).append(n)
    ok: set[str] = set()
    todo = sorted(reach)
    queued = set(todo)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))      # _productive recurses along nesting (<= limits)
    try:
        while todo:
            n = todo.pop()
            queued.discard(n)
            if n not in ok and _productive(rules[n], ok):
                ok.add(n)
                for u in users.get(n, ()):
                    if u not in ok and u not in queued:
                        queued.add(u)
                        todo.append(u)
    finally:
        sys.setrecursionlimit(limit)
    out: list[tuple[str, int, int, str]] = []
    if root not in ok:
        return out
    for n in rules:
        if n in reach and n not in ok:
            line, col = positions.get(n, (1, 1))
            out.append((f"rule '{n}' can never finish (every way through it needs itself again, or a "
                        "class that matches nothing): halter never enters it; llama.cpp lets text enter "
                        "it and then cannot end", line, col, "dead-end"))
    return out
