"""Random strings of a grammar: walk the rules choosing random alternatives, with bounded depth.

Used by tests to draw instances from a grammar (e.g. one converted from a JSON Schema) and check
them against an independent validator. Below ``max_depth`` choices are uniform; past it the walk
picks the option with the shortest completion (the lowest one among equals), so every walk ends (if the grammar can end at all).
"""
from __future__ import annotations

import random

from halter.grammar.ast import (MAX_CODE_POINT, Alt, AnyChar, CharClass, Expr, Literal, Repeat,
                                RuleRef, Seq, TokenRef)

_INF = float("inf")


def _min_lengths(rules: dict[str, Expr]) -> dict[str, tuple[float, float]]:
    """Per rule, (length, height) of its shortest string, the lowest derivation tree among the
    shortest (a fixpoint; inf for rules that cannot end). Past ``max_depth`` the walk follows
    these: heights fall at every rule, so it ends even where a recursive option ties an empty one
    at length 0 (``root ::= (root root){1,} | ""``)."""
    best = {name: (_INF, _INF) for name in rules}

    def size(e: Expr) -> tuple[float, float]:
        if isinstance(e, Literal):
            return (len(e.text), 0)
        if isinstance(e, (CharClass, AnyChar, TokenRef)):
            return (1, 0) if not isinstance(e, CharClass) or e.code_point_ranges() else (_INF, _INF)
        if isinstance(e, RuleRef):
            length, height = best[e.name]
            return (length, height + 1)
        if isinstance(e, Seq):
            parts = [size(i) for i in e.items]
            return (sum(p[0] for p in parts), max((p[1] for p in parts), default=0))
        if isinstance(e, Alt):
            return min(size(o) for o in e.options)
        if isinstance(e, Repeat):
            if e.min == 0:
                return (0, 0)
            length, height = size(e.expr)
            return (e.min * length, height)
        raise TypeError(e)

    changed = True
    while changed:
        changed = False
        for name, body in rules.items():
            s = size(body)
            if s < best[name]:
                best[name], changed = s, True
    memo: dict[int, tuple[float, float]] = {}      # id(expression) -> its pair, now that ``best`` is final

    def final_size(e: Expr) -> tuple[float, float]:
        got = memo.get(id(e))
        if got is None:
            got = memo[id(e)] = size(e)
        return got
    best["__size__"] = final_size  # type: ignore[assignment]
    return best


def _pick_char(ranges: list[tuple[int, int]], rng: random.Random) -> str:
    # no surrogates unless the class holds nothing else (they cannot be encoded as UTF-8)
    clipped = [r for lo, hi in ranges for r in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)) if r[0] <= r[1]]
    if not clipped:
        return chr(rng.randint(*rng.choice(ranges)))
    ranges = clipped
    # prefer printable ASCII when the class allows it, so samples stay readable
    ascii_ranges = [(max(lo, 0x20), min(hi, 0x7E)) for lo, hi in ranges if lo <= 0x7E and hi >= 0x20]
    pool = ascii_ranges if ascii_ranges and rng.random() < 0.8 else ranges
    weights = [hi - lo + 1 for lo, hi in pool]
    lo, hi = rng.choices(pool, weights=weights)[0]
    return chr(rng.randint(lo, hi))


def random_text(rules: dict[str, Expr], root: str, rng: random.Random, max_depth: int = 12,
                max_repeat: int = 4) -> str:
    """One random string of the grammar ``rules`` starting at ``root``.

    ``max_depth`` bounds rule nesting before the walk turns to shortest completions;
    ``max_repeat`` caps how many extra times an unbounded repetition repeats.
    Raises ``ValueError`` if ``root`` cannot derive any finite string.
    """
    info = _min_lengths(rules)
    size = info.pop("__size__")
    if info[root][0] == _INF:
        raise ValueError(f"rule {root!r} derives no finite string")
    out: list[str] = []

    def walk(e: Expr, depth: int) -> None:
        if isinstance(e, Literal):
            out.append(e.text)
        elif isinstance(e, CharClass):
            out.append(_pick_char(e.code_point_ranges(), rng))
        elif isinstance(e, AnyChar):
            out.append(_pick_char([(0, MAX_CODE_POINT)], rng))
        elif isinstance(e, TokenRef):
            raise ValueError("token references have no text without a vocabulary")
        elif isinstance(e, RuleRef):
            walk(rules[e.name], depth + 1)
        elif isinstance(e, Seq):
            for i in e.items:
                walk(i, depth)
        elif isinstance(e, Alt):
            finite = [o for o in e.options if size(o)[0] < _INF]
            if depth >= max_depth:
                shortest = min(size(o) for o in finite)
                finite = [o for o in finite if size(o) == shortest]
            walk(rng.choice(finite), depth)
        elif isinstance(e, Repeat):
            if depth >= max_depth or size(e.expr)[0] == _INF:     # (a body that matches nothing: min is 0)
                n = e.min
            else:
                hi = e.max if e.max is not None else e.min + max_repeat
                n = rng.randint(e.min, min(hi, e.min + max_repeat))
            for _ in range(n):
                walk(e.expr, depth)
        else:
            raise TypeError(f"not a grammar expression: {e!r}")

    walk(RuleRef(root), 0)
    return "".join(out)
