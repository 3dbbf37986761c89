"""How a repetition ``x{m,n}`` becomes NFA paths: copies of ``x``, and when to call ``x`` as a rule.

``emit_repeat`` unrolls a repetition into one copy of its body per count (``x{2,4}`` is ``x x
x? x?``, ``x+`` is ``x x*``), so a DFA tracks the count exactly and tokens never leave the rule.
Two things keep that from multiplying positions by more than the count:

* **Big bodies are called, not copied.** When the copies would add more than
  ``MAX_INLINE_REPEAT_STATES`` NFA states, the body becomes an auxiliary rule (``<rule>--repeat-<n>``)
  and each copy is a call. The size counted is what emission really makes (``emitted_size``):
  ``x+`` is two copies of ``x`` and ``{2}`` two, nested repeats multiply, expanded rules count with
  their bodies. So ``((("a")+)+)+...`` or ``("a"{2}){2}...`` nested dozens of levels deep cost states
  linear in the nesting (every dozen levels or so call the levels below as one rule), not
  exponential.
* **A long bounded repeat keeps one position per count** (``split_body``). A JSON string
  character (``[ -!#-\\[\\]-~] | non-ASCII | "\\\\" escape``) is ~10 DFA states, so ``char{0,300}`` unrolled
  would be ~3,000 positions. Its body is split into the part read in one byte (kept inline: the
  count's position reads it and moves to the next count) and the rest (multi-byte characters,
  escapes), called as one auxiliary rule that returns to the next count's position. The language is
  the same (a union split in two); ``char{0,300}`` is then ~300 positions plus the rule's few.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from halter.grammar.ast import AnyChar, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, MAX_CODE_POINT, alt

if TYPE_CHECKING:
    from halter.grammar.nfa import Nfa, NfaBuilder

MAX_INLINE_REPEAT_STATES = 4000  # bigger repetitions call an auxiliary rule instead of unrolling
SPLIT_MIN_COUNT = 8              # bounded repeats with at least this many copies have their body split
SPLIT_MIN_REST = 6               # ... when the multi-byte rest is at least this big (in NFA states)


def copies_of(rep: Repeat) -> int:
    """Copies of the body ``emit_repeat`` makes (``x+``: two, ``x{2,5}``: five, ``x*``: one)."""
    return max(rep.min, rep.max if rep.max is not None else rep.min + 1)


def emitted_size(b: "NfaBuilder", expr: Expr) -> int:
    """NFA states (about) that emitting ``expr`` makes: repeats count every copy, except where
    ``emit_repeat`` calls the body instead; rules expanded in place count their bodies."""
    memo = b._emitted
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:                                  # post-order without recursion (deep nesting)
        e, done = stack.pop()
        if id(e) in memo:
            continue
        kids: tuple = ()
        if isinstance(e, RuleRef):
            kids = (b.rules[e.name],) if e.name in b.inline else ()
        elif isinstance(e, Seq):
            kids = e.items
        elif isinstance(e, Alt):
            kids = e.options
        elif isinstance(e, Repeat):
            kids = (e.expr,)
        if not done and any(id(k) not in memo for k in kids):
            stack.append((e, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        if isinstance(e, RuleRef):
            n = memo[id(kids[0])] if kids else 1
        elif isinstance(e, Seq):
            n = sum(memo[id(k)] for k in kids)
        elif isinstance(e, Alt):
            n = sum(memo[id(k)] for k in kids) + 2
        elif isinstance(e, Repeat):
            body = memo[id(e.expr)]
            n = (1 if _calls_body(e, body) else body) * copies_of(e) + 2
        else:
            n = b.size(e)
        memo[id(e)] = n
        b._emitted_keep.append(e)               # ids stay valid while the memo holds them
    return memo[id(expr)]


def _calls_body(rep: Repeat, body_size: int) -> bool:
    """Does ``emit_repeat`` call the body as a rule? (A rule call is never wrapped in another: a
    rule expanded in place is counted with its copies by the inlining plan.)"""
    copies = copies_of(rep)
    return copies >= 2 and body_size * copies > MAX_INLINE_REPEAT_STATES and not isinstance(rep.expr, RuleRef)


def emit_repeat(b: "NfaBuilder", nfa: "Nfa", rep: Repeat, s: int, e: int, rule: str) -> None:
    """Add paths from ``s`` to ``e`` spelling ``rep`` (see the module docstring)."""
    from halter.grammar.nfa import EPS
    inner = rep.expr
    if rep.max is not None and rep.max >= SPLIT_MIN_COUNT:
        inner = split_body(b, inner, rule)
    if _calls_body(rep, emitted_size(b, inner)):
        inner = _aux(b, rule, rep.expr)
    cur = s
    for _ in range(rep.min):
        nxt = nfa.new()
        b.emit(nfa, inner, cur, nxt, rule)
        cur = nxt
    if rep.max is None:
        loop = nfa.new()
        nfa.add(cur, EPS, None, loop)
        body_end = nfa.new()
        b.emit(nfa, inner, loop, body_end, rule)
        nfa.add(body_end, EPS, None, loop)
        nfa.add(loop, EPS, None, e)
    else:
        for _ in range(rep.max - rep.min):
            nfa.add(cur, EPS, None, e)
            nxt = nfa.new()
            b.emit(nfa, inner, cur, nxt, rule)
            cur = nxt
        nfa.add(cur, EPS, None, e)


def _aux(b: "NfaBuilder", rule: str, body: Expr) -> RuleRef:
    """A call of the auxiliary rule whose body is ``body``: one per body, however many copies of
    the repeat (or of repeats around it) emit it."""
    hit = b._aux.get(id(body))
    if hit is not None:
        return hit[1]
    name = f"{rule}--repeat-{len(b.rules)}"
    while name in b.rules:
        name += "-"
    b.rules[name] = body
    ref = RuleRef(name)
    b._aux[id(body)] = (body, ref)
    return ref


def split_body(b: "NfaBuilder", inner: Expr, rule: str) -> Expr:
    """``inner`` as ``single-byte part | call of the rest`` when the rest is big enough to matter
    (else ``inner`` itself); memoised per body, so every copy and every repeat of it share the rule."""
    key = id(inner)
    hit = b._split.get(key)
    if hit is not None:
        return hit[1]
    one, rest = _one_byte_part(b, inner)
    out = inner
    if one is not None and rest is not None and emitted_size(b, rest) >= SPLIT_MIN_REST:
        out = alt(one, _aux(b, rule, rest))
    b._split[key] = (inner, out)              # (inner kept alive: its id is the key)
    return out


def _one_byte_part(b: "NfaBuilder", expr: Expr) -> tuple[Expr | None, Expr | None]:
    """(the strings of ``expr`` one byte long, the others): a union of the two is ``expr``; None
    for an empty part. Only classes, literals, expanded rules and alternations of those are split;
    anything else is all "rest"."""
    if isinstance(expr, RuleRef) and expr.name in b.inline:
        return _one_byte_part(b, b.rules[expr.name])
    if isinstance(expr, (CharClass, AnyChar)):
        ranges = [(0, MAX_CODE_POINT)] if isinstance(expr, AnyChar) else expr.code_point_ranges()
        low = tuple((lo, min(hi, 0x7F)) for lo, hi in ranges if lo <= 0x7F)
        high = tuple((max(lo, 0x80), hi) for lo, hi in ranges if hi >= 0x80)
        return (CharClass(low) if low else None), (CharClass(high) if high else None)
    if isinstance(expr, Literal):
        data = expr.text.encode("utf-8", "surrogatepass")
        return (expr, None) if len(data) == 1 else (None, expr)
    if isinstance(expr, Alt):
        ones, rests = [], []
        for o in expr.options:
            one, rest = _one_byte_part(b, o)
            if one is not None:
                ones.append(one)
            if rest is not None:
                rests.append(rest)
        return (alt(*ones) if ones else None), (alt(*rests) if rests else None)
    return None, expr
