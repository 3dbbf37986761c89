"""A rule too large for one automaton, rewritten with its repeated parts as rules of their own.

halter builds one DFA per rule. ``x ::= [ab]* "a" [ab]{16}`` needs a DFA that remembers the last
17 characters (2^17 states, past ``MAX_DFA_STATES``), while llama.cpp, which runs every rule as a
stack machine, accepts it. When a rule's DFA grows too large, ``build_automata`` rewrites that
rule with ``split_repeats``: the body of every repeat becomes a rule of its own, and an unbounded
repeat a right-recursive rule (``r ::= body r | ""``, the way llama.cpp expands ``x*``), so the
rule's DFA only counts calls and the parser tracks the alternatives a DFA would have merged; a
very long literal is cut into rules of ``LITERAL_CHUNK`` characters and a very wide alternation
into rules of ``ALT_CHUNK`` options. The language is the same; token masks inside such a rule cost
more. The user's rules are not changed:
the new rules exist only in the automata (named ``<rule>--split-<n>``).
"""
from __future__ import annotations

from halter.grammar.ast import Alt, Expr, Literal, Repeat, RuleRef, Seq, alt, children, seq

LITERAL_CHUNK = 4096        # characters of a literal per rule
ALT_CHUNK = 64              # options of an alternation per rule


def split_repeats(rules: dict[str, Expr], name: str) -> dict[str, Expr]:
    """A copy of ``rules`` in which rule ``name``'s repeats call rules of their own."""
    out = dict(rules)
    serial = [0]

    def fresh() -> str:
        while True:
            serial[0] += 1
            candidate = f"{name}--split-{serial[0]}"
            if candidate not in out:
                return candidate

    def as_rule(expr: Expr) -> RuleRef:
        if isinstance(expr, RuleRef):
            return expr
        aux = fresh()
        out[aux] = expr
        return RuleRef(aux)

    def rebuild(expr: Expr, parts: list[Expr]) -> Expr:
        if isinstance(expr, Seq):
            return seq(*parts)
        if isinstance(expr, Alt):
            if len(parts) <= ALT_CHUNK:
                return alt(*parts)
            return alt(*(as_rule(alt(*parts[i:i + ALT_CHUNK])) for i in range(0, len(parts), ALT_CHUNK)))
        body = as_rule(parts[0])                  # a Repeat
        if expr.max is not None:
            return Repeat(body, expr.min, expr.max)
        loop = fresh()
        out[loop] = alt(seq(body, RuleRef(loop)), Literal(""))
        return seq(*([body] * expr.min), RuleRef(loop))

    # post-order without recursion: a rule may nest as deep as the limits allow
    done: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(rules[name], False)]
    while stack:
        expr, expanded = stack.pop()
        kids = children(expr)
        if not kids:
            if isinstance(expr, Literal) and len(expr.text) > LITERAL_CHUNK:
                expr = seq(*(as_rule(Literal(expr.text[i:i + LITERAL_CHUNK]))
                             for i in range(0, len(expr.text), LITERAL_CHUNK)))
            done.append(expr)
        elif expanded:
            parts = done[len(done) - len(kids):]
            del done[len(done) - len(kids):]
            done.append(rebuild(expr, parts))
        else:
            stack.append((expr, True))
            stack.extend((k, False) for k in reversed(kids))
    out[name] = done[0]
    return out
