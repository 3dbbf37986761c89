"""Regex syntax trees (regex.py) -> grammar expressions and GBNF text.

``split_anchors`` turns a parsed pattern into its anchored/unanchored variants so that a schema
pattern can "match anywhere", as the JSON Schema spec means it; ``regex_to_expr`` builds the
grammar expression (whole-text or match-anywhere) and ``regex_to_gbnf`` the GBNF text. Anchors
anywhere but the edges of a match raise ``UnsupportedRegexError``.
"""
from __future__ import annotations

from halter.grammar.ast import (MAX_CODE_POINT, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, alt,
                                contains, format_grammar, seq)
from halter.schemas.regex import Anchor, UnsupportedRegexError, parse_regex


def split_anchors(expr, pattern: str = "", pointer: str = "") -> list[tuple[bool, bool, Expr]]:
    """Variants ``(anchored_at_start, anchored_at_end, expr_without_anchors)`` of a pattern.

    Anchors are only allowed where they can take effect at the edges of the match (first/last
    item of a top-level alternative, possibly inside groups); anywhere else they raise.
    """
    if isinstance(expr, Anchor):
        return [(expr.start, not expr.start, Literal(""))]
    if isinstance(expr, Alt):
        out = []
        for o in expr.options:
            out.extend(split_anchors(o, pattern, pointer))
        return out
    if isinstance(expr, Seq):
        items = list(expr.items)
        lead: list[tuple[bool, bool, Expr]] = [(False, False, Literal(""))]
        if items and _has_anchor(items[0]):
            lead = split_anchors(items[0], pattern, pointer)
            items = items[1:]
        trail: list[tuple[bool, bool, Expr]] = [(False, False, Literal(""))]
        if items and _has_anchor(items[-1]):
            trail = split_anchors(items[-1], pattern, pointer)
            items = items[:-1]
        for it in items:
            if _has_anchor(it):
                raise UnsupportedRegexError("an anchor in the middle of a pattern is not supported",
                                            pattern, 0, pointer)
        middle = seq(*items)
        out = []
        for ls, le, lx in lead:
            for ts, te, tx in trail:
                if le and (items or not _nullable_pair(tx)) or ts and (items or not _nullable_pair(lx)):
                    raise UnsupportedRegexError(
                        "an anchor in the middle of a pattern is not supported", pattern, 0, pointer)
                out.append((ls or ts, le or te, seq(lx, middle, tx)))
        return out
    if isinstance(expr, Repeat) and _has_anchor(expr.expr):
        raise UnsupportedRegexError("a repeated anchor is not supported", pattern, 0, pointer)
    return [(False, False, expr)]


def _nullable_pair(expr: Expr) -> bool:
    return isinstance(expr, Literal) and expr.text == ""


def _has_anchor(expr) -> bool:
    return contains(expr, lambda e: isinstance(e, Anchor))


def regex_to_expr(pattern: str, *, anchored: bool = True, any_char: Expr | None = None,
                  pointer: str = "") -> Expr:
    """A grammar expression over code points for ``pattern``.

    ``anchored=True``: the whole text must match (edge anchors are then redundant).
    ``anchored=False``: the pattern may match anywhere, as ``re.search`` / JSON Schema mean it;
    ``any_char`` is what the unanchored ends may consume (default: any character).
    """
    tree = parse_regex(pattern, pointer)
    variants = split_anchors(tree, pattern, pointer)
    filler = Repeat(any_char if any_char is not None else CharClass(((0, MAX_CODE_POINT),)), 0, None)
    options = []
    for start, end, body in variants:
        if anchored:
            options.append(body)
        else:
            options.append(seq(*(() if start else (filler,)), body, *(() if end else (filler,))))
    return alt(*_dedupe(options))


def _dedupe(options: list[Expr]) -> list[Expr]:
    seen, out = set(), []
    for o in options:
        if o not in seen:
            seen.add(o)
            out.append(o)
    return out


def regex_to_gbnf(pattern: str, *, anchored: bool = True, split_groups: bool = False) -> str:
    """GBNF text whose ``root`` matches exactly the strings ``pattern`` matches.

    ``anchored=True`` (default) means the whole output must match, as in ``re.fullmatch``;
    ``anchored=False`` means the pattern may match anywhere in the output (``re.search``).
    ``split_groups=True`` gives every repeated group a rule of its own: the engine then builds one
    small automaton per group instead of one for the whole pattern, whose determinisation can
    explode with nested repeats (``Grammar.from_regex`` retries that way when it does).
    Raises ``RegexError`` for malformed patterns and ``UnsupportedRegexError`` for constructs a
    grammar cannot express.
    """
    from halter.schemas.rules import tidy_rules
    rules: dict[str, Expr] = {"root": Literal("")}
    root = regex_to_expr(pattern, anchored=anchored)
    rules["root"] = _split_groups(root, rules) if split_groups else root
    return format_grammar(tidy_rules(rules))


def _split_groups(expr: Expr, rules: dict[str, Expr]) -> Expr:
    """``expr`` with the body of every repeat that is more than a character or a literal moved
    into a rule of its own (``group-N``), innermost first."""
    if isinstance(expr, Seq):
        return seq(*(_split_groups(i, rules) for i in expr.items))
    if isinstance(expr, Alt):
        return alt(*(_split_groups(o, rules) for o in expr.options))
    if isinstance(expr, Repeat):
        body = _split_groups(expr.expr, rules)
        if not isinstance(body, (Literal, CharClass, RuleRef)):
            name = next((n for n, b in rules.items() if b == body and n != "root"), f"group-{len(rules)}")
            rules[name] = body
            body = RuleRef(name)
        return Repeat(body, expr.min, expr.max)
    return expr
