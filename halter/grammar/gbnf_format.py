"""Printing a grammar's syntax tree back as normalized GBNF text (``format_grammar``) that
llama.cpp and halter read as the same grammar.
"""
from __future__ import annotations

from halter.grammar.ast import AnyChar, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, TokenRef

_ESCAPES = {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t", ord("\\"): "\\\\"}


def _escape_char(cp: int, specials: str) -> str:
    if cp in _ESCAPES:
        return _ESCAPES[cp]
    ch = chr(cp)
    if ch in specials:
        return "\\" + ch
    if cp < 0x20 or cp == 0x7F:
        return f"\\x{cp:02X}"
    if 0xD800 <= cp <= 0xDFFF or not ch.isprintable() and cp > 0x7F:
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return ch


_GBNF_MAX_REPEAT = 2000       # llama.cpp's MAX_REPETITION_THRESHOLD (see gbnf_parser.py)


def format_expr(expr: Expr, parent_prec: int = 0) -> str:
    """GBNF text for ``expr``; precedence 0 = alternation, 1 = sequence, 2 = atom.

    (Repetitions are printed as written; ``format_grammar`` also keeps them within llama.cpp's
    limits.)"""
    return _Printer({}, "").expr(expr, parent_prec)


class _Printer:
    """Prints rules as GBNF that llama.cpp (and halter) read back as the same grammar.

    Nested repetitions get parentheses (``("a"?)?``, never ``"a"??``); the repeated item of an
    empty literal too (``("")*``). A repetition llama.cpp would refuse or read differently (a
    count above 2000, or more than 2000 rule copies for the item) is written with auxiliary
    rules named ``<rule>-x<k>`` instead: the same language in GBNF llama.cpp takes.
    """

    def __init__(self, rules: dict[str, Expr] | set[str], rule: str) -> None:
        self.names = rules if isinstance(rules, set) else set(rules)
        self.rule = rule
        self.extra: list[tuple[str, str]] = []
        self._k = 0

    def aux(self, body: str) -> str:
        while True:
            self._k += 1
            name = f"{self.rule}-x{self._k}"
            if name not in self.names:
                break
        self.names.add(name)
        self.extra.append((name, body))
        return name

    def expr(self, expr: Expr, parent_prec: int = 0) -> str:
        if isinstance(expr, Literal):
            return '"' + "".join(_escape_char(ord(c), '"') for c in expr.text) + '"'
        if isinstance(expr, CharClass):
            if not expr.ranges:         # GBNF's "[]" and "[^]" are the empty string: spell them out
                return "[\\x00-\\U0010FFFF]" if expr.negated else "[^\\x00-\\U0010FFFF]"
            body = []
            for lo, hi in expr.ranges:
                body.append(_escape_class_char(lo, first=not body and not expr.negated))
                if hi != lo:
                    body.append("-" + _escape_class_char(hi, first=False))
            return "[" + ("^" if expr.negated else "") + "".join(body) + "]"
        if isinstance(expr, AnyChar):
            return "."
        if isinstance(expr, RuleRef):
            return expr.name
        if isinstance(expr, TokenRef):
            inner = f"<[{expr.token_id}]>" if expr.token_id is not None else expr.text
            return ("!" if expr.negated else "") + inner
        if isinstance(expr, Seq):
            text = " ".join(self.expr(i, 1) for i in expr.items)
            return f"({text})" if parent_prec > 1 else text
        if isinstance(expr, Alt):
            text = " | ".join(self.expr(o, 1) for o in expr.options)
            return f"({text})" if parent_prec > 0 else text
        if isinstance(expr, Repeat):
            return self.repeat(expr)
        raise TypeError(f"not a grammar expression: {expr!r}")

    def repeat(self, rep: Repeat) -> str:
        inner, lo, hi = rep.expr, rep.min, rep.max
        wrap = isinstance(inner, Repeat) or (isinstance(inner, Literal) and not inner.text)
        grouped = wrap or isinstance(inner, (Seq, Alt))     # printed in ( ): a rule of llama.cpp's
        n_prev = 1 + _symbols(inner) if grouped else 1
        total = hi if hi is not None and hi > 0 else (lo if lo > 0 else 1)
        if n_prev * total > _GBNF_MAX_REPEAT and n_prev > 1:
            item = self.aux(self.expr(inner, 0))
        elif wrap:
            item = "(" + self.expr(inner, 0) + ")"
        else:
            item = self.expr(inner, 2)
        return self.counted(item, lo, hi)

    def counted(self, item: str, lo: int, hi: int | None) -> str:
        """``item{lo,hi}`` for an item llama.cpp counts as one rule, any counts."""
        m = _GBNF_MAX_REPEAT
        if lo <= m and (hi is None or hi <= m):
            return item + _suffix(lo, hi)
        parts = []
        if lo > 0:
            parts.append(self.exactly(item, lo))
        if hi is None:
            parts.append(item + "*")
        elif hi > lo:
            parts.append(self.at_most(item, hi - lo))
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"

    def exactly(self, item: str, n: int) -> str:
        m = _GBNF_MAX_REPEAT
        if n <= m:
            return item + _suffix(n, n)
        q, r = divmod(n, m)
        block = self.aux(item + _suffix(m, m))
        text = self.exactly(block, q)
        return text if r == 0 else text + " " + item + _suffix(r, r)

    def at_most(self, item: str, n: int) -> str:
        m = _GBNF_MAX_REPEAT
        if n <= m:
            return item + _suffix(0, n)
        q, r = divmod(n, m)
        block = self.aux(item + _suffix(0, m))
        text = self.at_most(block, q)
        return text if r == 0 else text + " " + item + _suffix(0, r)


def _suffix(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


def _escape_class_char(cp: int, first: bool) -> str:
    """A class character; GBNF has no escape for ``^``, so a leading one is written ``\\x5E``."""
    if cp == 0x5E:
        return "\\x5E" if first else "^"
    return _escape_char(cp, "]-[")


def _symbols(expr: Expr) -> int:
    """An upper bound of the symbols llama.cpp makes while reading ``expr`` as printed inside a
    group: groups, repetition rules, and rule names (counted as if first mentioned there)."""
    count, stack = 0, [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, RuleRef):
            count += 1
        elif isinstance(e, (Seq, Alt)):
            items = e.items if isinstance(e, Seq) else e.options
            count += 1
            stack.extend(items)
        elif isinstance(e, Repeat):
            count += 2 + (1 if e.max is None else e.max - e.min)
            stack.append(e.expr)
    return count


def format_grammar(rules: dict[str, Expr]) -> str:
    """Normalized GBNF text for a whole grammar, one rule per line, in definition order.

    llama.cpp reads the text as the same grammar, and so does ``Grammar.from_gbnf`` (printing
    it again gives the same text)."""
    import sys
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))       # printing recurses along nesting (<= limits)
    try:
        out = []
        taken = set(rules)
        for name, expr in rules.items():
            p = _Printer(taken, name)
            out.append(f"{name} ::= {p.expr(expr)}\n")
            out.extend(f"{n} ::= {body}\n" for n, body in p.extra)
        return "".join(out)
    finally:
        sys.setrecursionlimit(limit)
