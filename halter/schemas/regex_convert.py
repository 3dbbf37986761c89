"""Regex syntax trees (regex.py) -> grammar expressions and GBNF text.

``split_anchors`` turns a parsed pattern into its anchored/unanchored variants so that a schema
pattern can "match anywhere", as the JSON Schema spec means it; ``regex_to_expr`` builds the
grammar expression (whole-text or match-anywhere) and ``regex_to_gbnf`` the GBNF text. Anchors
may stand anywhere (an anchor repeated more than 16 times raises ``UnsupportedRegexError``).
"""
from __future__ import annotations

from halter.grammar.ast import (MAX_CODE_POINT, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, alt,
                                contains, seq)
from halter.grammar.gbnf_format import format_grammar
from halter.schemas.regex import Anchor, UnsupportedRegexError, parse_regex


Variant = tuple[bool, bool, Expr]
"""``(anchored_at_start, anchored_at_end, body)``: ``body`` (no anchors) matched at an offset that
must be 0 when the first flag is set and must end the text when the second is."""

MAX_ANCHORED_COPIES = 16
"""A repeat holding an anchor is spelled as its copies: at most this many (``(^a){3,5}``: 5)."""


def split_anchors(expr, pattern: str = "", pointer: str = "") -> list[Variant]:
    """Variants ``(anchored_at_start, anchored_at_end, expr_without_anchors)`` of a pattern, at most
    one per pair of flags, whose union is the pattern.

    Anchors may stand anywhere: ``^`` holds at offset 0 and ``$`` at the end of the text, so in a
    sequence a piece anchored at the end leaves only the empty string to what follows it, and a
    piece anchored at the start only the empty string to what precedes it (``a^b`` matches
    nothing, ``(a|^)b`` is ``ab`` anywhere or ``b`` at the start, ``a$[0-9]*`` is ``a`` at the end).
    """
    if isinstance(expr, Anchor):
        return [(expr.start, not expr.start, Literal(""))]
    if not _has_anchor(expr):
        return [(False, False, expr)]
    if isinstance(expr, Alt):
        return _grouped([v for o in expr.options for v in split_anchors(o, pattern, pointer)])
    if isinstance(expr, Seq):
        return _seq_variants([split_anchors(i, pattern, pointer) for i in expr.items])
    if isinstance(expr, Repeat):
        return _repeat_variants(expr, split_anchors(expr.expr, pattern, pointer), pattern, pointer)
    return [(False, False, expr)]


def _seq_variants(parts: list[list[Variant]]) -> list[Variant]:
    acc: list[Variant] = [(False, False, Literal(""))]
    for variants in parts:
        acc = _grouped([v for x in acc for y in variants for v in _join(x, y)])
    return acc


def _join(x: Variant, y: Variant) -> list[Variant]:
    """``x`` then ``y``: an end anchor before ``y`` leaves it the empty string, a start anchor in
    ``y`` leaves ``x`` the empty string (both: the text is empty)."""
    (s1, e1, b1), (s2, e2, b2) = x, y
    if not e1 and not s2:
        return [(s1, e2, seq(b1, b2))]
    if e1 and not s2:
        return [(s1, True, b1)] if _nullable(b2) else []
    if s2 and not e1:
        return [(True, e2, b2)] if _nullable(b1) else []
    return [(True, True, Literal(""))] if _nullable(b1) and _nullable(b2) else []


def _repeat_variants(expr: Repeat, inner: list[Variant], pattern: str, pointer: str) -> list[Variant]:
    """A repeat whose body holds an anchor: ``x{m,n}`` as m copies and n - m optional ones, and an
    unbounded tail as ``x+`` in closed form (see ``_plus``)."""
    lo, hi = expr.min, expr.max
    if lo > MAX_ANCHORED_COPIES or (hi is not None and hi - lo > MAX_ANCHORED_COPIES):
        raise UnsupportedRegexError(f"a repeat of more than {MAX_ANCHORED_COPIES} copies holding an anchor "
                                    "is not supported", pattern, 0, pointer)
    empty: list[Variant] = [(False, False, Literal(""))]
    tail = [_grouped(inner + empty)] * (hi - lo) if hi is not None else [_grouped(_plus(inner) + empty)]
    return _seq_variants([inner] * lo + tail)


def _plus(inner: list[Variant]) -> list[Variant]:
    """``x+``. Iterations that read nothing only add conditions, so of the rest only the first
    can carry a start anchor and only the last an end anchor: P+, S P*, P* E, and S P* E or a
    single B (P, S, E, B: the bodies with no anchor, a start, an end, both)."""
    by = {(s, e): b for s, e, b in inner}
    p, s, e, b = by.get((False, False)), by.get((True, False)), by.get((False, True)), by.get((True, True))
    p_star = Repeat(p, 0, None) if p is not None else Literal("")
    out: list[Variant] = []
    if p is not None:
        out.append((False, False, Repeat(p, 1, None)))
    if s is not None:
        out.append((True, False, seq(s, p_star)))
    if e is not None:
        out.append((False, True, seq(p_star, e)))
    if s is not None and e is not None:
        out.append((True, True, seq(s, p_star, e)))
    if b is not None:
        out.append((True, True, b))
    return _grouped(out)


def _grouped(variants: list[Variant]) -> list[Variant]:
    """One variant per pair of flags (their bodies as alternatives)."""
    by: dict[tuple[bool, bool], list[Expr]] = {}
    for s, e, body in variants:
        by.setdefault((s, e), []).append(body)
    return [(s, e, alt(*_dedupe(bodies))) for (s, e), bodies in by.items()]


def _nullable(expr: Expr) -> bool:
    """Does an anchor-free regex tree match the empty string?"""
    if isinstance(expr, Literal):
        return expr.text == ""
    if isinstance(expr, Seq):
        return all(_nullable(i) for i in expr.items)
    if isinstance(expr, Alt):
        return any(_nullable(o) for o in expr.options)
    if isinstance(expr, Repeat):
        return expr.min == 0 or _nullable(expr.expr)
    return False


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
    if not options:                  # anchors no text can satisfy (a^b): nothing matches
        return CharClass(())
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
