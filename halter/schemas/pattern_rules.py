"""A pattern too large for one automaton, spelled as JSON text with rules of its own.

The grammar engine builds one DFA per rule. An unanchored pattern is ``.* body .*``, and a DFA for
``.* a .{0,12} b`` must remember every ``a`` of the last 13 characters: 2^13 states, more than the
engine allows (``RuleTooComplex``). Nested or long repeats of wide classes (``\\p{L}{50}``, each
character spelled raw in UTF-8 or as ``\\uXXXX`` escapes) grow the same way. Written with rules the
engine never determinises across them: the unanchored start becomes a right-recursive search rule
(``s ::= body .* | any s``, which the parser runs as the nondeterministic automaton it is) and the
body of every repeat becomes a rule, so each rule's DFA stays small. Same language, slower token
masks: the parser then tracks the alternatives a DFA would have merged.
"""
from __future__ import annotations

from halter.grammar.ast import Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, alt
from halter.schemas.json_text import JsonText, cat


def spelled_with_rules(js: JsonText, expr: Expr, any_char: CharClass, hint: str) -> Expr:
    """JSON-string spelling of the code-point ``expr`` (an unanchored pattern starts with
    ``any_char*``), with the search and every repeated part as separate rules."""
    filler = Repeat(any_char, 0, None)
    out = []
    for option in (expr.options if isinstance(expr, Alt) else (expr,)):
        items = list(option.items) if isinstance(option, Seq) else [option]
        if items and items[0] == filler:
            body = _grouped(js, Seq(tuple(items[1:])) if len(items) > 2 else items[1], hint)
            name = js.rules.reserve(f"{hint}-search")
            js.rules.define(name, alt(body, cat(js.encode_class(any_char.code_point_ranges()), RuleRef(name))))
            out.append(RuleRef(name))
        else:
            out.append(_grouped(js, option, hint))
    return alt(*out)


def _grouped(js: JsonText, expr: Expr, hint: str) -> Expr:
    if isinstance(expr, Seq):
        return cat(*(_grouped(js, i, hint) for i in expr.items))
    if isinstance(expr, Alt):
        return alt(*(_grouped(js, o, hint) for o in expr.options))
    if isinstance(expr, Repeat):
        body = _grouped(js, expr.expr, hint)
        if not (isinstance(expr.expr, Literal) and len(expr.expr.text) == 1 and expr.expr.text.isascii()):
            body = js.rules.add(f"{hint}-part", body)
        return Repeat(body, expr.min, expr.max)
    return js.encode_expr(expr)
