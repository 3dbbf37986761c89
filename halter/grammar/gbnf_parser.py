"""GBNF text -> syntax tree (``halter.grammar.ast``), parsed with lark, with errors that point at the text.

The dialect is llama.cpp's (``grammars/README.md``): ``name ::= ...`` rules, ``|``, ``( )``, string
literals, character classes (``[a-z]``, ``[^...]``), ``.``, ``* + ? {m} {m,} {m,n} {,n}``, ``#``
comments, token references ``<[id]>`` / ``<text>`` and their negations. A newline ends a rule,
except inside parentheses and right after ``|`` or ``::=``.
"""
from __future__ import annotations

import functools
import re

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from halter.errors import GrammarError
from halter.grammar.ast import (MAX_CODE_POINT, AnyChar, CharClass, Expr, Literal, Repeat, RuleRef,
                                RuleSet, TokenRef, alt, seq)

MAX_REPEAT = 100_000

_GBNF_LARK = r"""
start: _NL* rule (_NL+ rule)* _NL*
rule: NAME DEFINE alternation
alternation: sequence (BAR sequence)*
sequence: item*
item: atom QUANT?
    | atom REPEAT -> repeat
?atom: NAME -> ref
     | STRING -> literal
     | CLASS -> charclass
     | DOT -> any
     | LPAR alternation RPAR -> group
     | TOKREF -> tokref

NAME: /[A-Za-z0-9_][A-Za-z0-9_\-]*/
DEFINE: "::="
BAR: "|"
DOT: "."
LPAR: "("
RPAR: ")"
QUANT: "*" | "+" | "?"
REPEAT: /\{[^}\n]*\}/
STRING: /"(\\[^\n]|[^"\\\n])*"/
CLASS: /\[(\\[^\n]|[^\]\\\n])*\]/
TOKREF: /!?<(\[[^\]\n]*\]|[^>\n]*)>/
_NL: /(\r?\n)+/
COMMENT: /#[^\n]*/
%ignore /[ \t]+/
%ignore COMMENT
"""


class _NewlinePostLex:
    """Drops newlines inside parentheses and right after ``|`` or ``::=`` (they do not end a rule)."""

    always_accept = ("_NL",)

    def process(self, stream):
        depth, prev = 0, None
        for tok in stream:
            if tok.type == "_NL":
                if depth > 0 or prev in ("BAR", "DEFINE", "LPAR"):
                    continue
            elif tok.type == "LPAR":
                depth += 1
            elif tok.type == "RPAR":
                depth = max(depth - 1, 0)
            prev = tok.type
            yield tok


@functools.cache
def _parser() -> Lark:
    """The LALR parser of GBNF, made on first use (~40 ms: a process that only converts schemas,
    whose syntax trees are built directly, never needs it)."""
    return Lark(_GBNF_LARK, parser="lalr", lexer="contextual", postlex=_NewlinePostLex(),
                propagate_positions=True, maybe_placeholders=False)

_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]",
                   "-": "-", "^": "^", "/": "/", "'": "'", ".": ".", "0": "\0",
                   "f": "\f", "v": "\v", "b": "\b", "a": "\a"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}


class _GrammarBuilder(Transformer):
    """Turns lark's parse tree into ``RuleSet``; positions come from the tokens."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def _err(self, message: str, tok: Token, offset: int = 0) -> GrammarError:
        return GrammarError(message, tok.line, tok.column + offset, self.text)

    def _decode(self, tok: Token, body: str, body_offset: int) -> list[int]:
        """Decode escapes in ``body`` (the text between delimiters) into code points."""
        out, i = [], 0
        while i < len(body):
            ch = body[i]
            if ch != "\\":
                out.append(ord(ch))
                i += 1
                continue
            if i + 1 >= len(body):
                raise self._err("bad escape: '\\' at the end", tok, body_offset + i)
            e = body[i + 1]
            if e in _HEX_LEN:
                n = _HEX_LEN[e]
                digits = body[i + 2:i + 2 + n]
                if len(digits) != n or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                    raise self._err(f"bad escape '\\{e}': expected {n} hex digits", tok, body_offset + i)
                cp = int(digits, 16)
                if cp > MAX_CODE_POINT:
                    raise self._err(f"bad escape '\\{e}{digits}': beyond U+10FFFF", tok, body_offset + i)
                out.append(cp)
                i += 2 + n
            elif e in _SIMPLE_ESCAPES:
                out.append(ord(_SIMPLE_ESCAPES[e]))
                i += 2
            else:
                raise self._err(f"bad escape '\\{e}'", tok, body_offset + i)
        return out

    @v_args(inline=True)
    def literal(self, tok: Token) -> Expr:
        return Literal("".join(chr(c) for c in self._decode(tok, tok.value[1:-1], 1)))

    @v_args(inline=True)
    def charclass(self, tok: Token) -> Expr:
        body, off = tok.value[1:-1], 1
        negated = body.startswith("^")
        if negated:
            body, off = body[1:], 2
        # Decode escapes while keeping track of which '-' are literal (escaped) and which are ranges.
        items: list[tuple[int, bool]] = []  # (code point, is_unescaped_dash)
        i = 0
        while i < len(body):
            if body[i] == "\\":
                j = i + 2 + _HEX_LEN.get(body[i + 1] if i + 1 < len(body) else "", 0)
                items.extend((cp, False) for cp in self._decode(tok, body[i:j], off + i))
                i = j
            else:
                items.append((ord(body[i]), body[i] == "-"))
                i += 1
        ranges, k = [], 0
        while k < len(items):
            lo = items[k][0]
            if k + 2 < len(items) and items[k + 1][1]:
                hi = items[k + 2][0]
                if hi < lo:
                    raise self._err(f"reversed range {chr(lo)!r}-{chr(hi)!r} in character class", tok)
                ranges.append((lo, hi))
                k += 3
            else:
                ranges.append((lo, lo))
                k += 1
        if not ranges and not negated:
            raise self._err("empty character class '[]' matches nothing", tok)
        return CharClass(tuple(ranges), negated)

    @v_args(inline=True)
    def any(self, _tok: Token) -> Expr:
        return AnyChar()

    @v_args(inline=True)
    def ref(self, tok: Token) -> Expr:
        return RuleRef(tok.value, tok.line, tok.column)

    @v_args(inline=True)
    def tokref(self, tok: Token) -> Expr:
        value = tok.value
        negated = value.startswith("!")
        inner = value[2:-1] if negated else value[1:-1]
        if inner.startswith("["):
            digits = inner[1:-1].strip()
            if not digits.isdigit():
                raise self._err(f"bad token id in token reference {value!r}: expected <[123]>", tok)
            return TokenRef(token_id=int(digits), negated=negated)
        if not inner:
            raise self._err("empty token reference '<>'", tok)
        return TokenRef(text="<" + inner + ">", negated=negated)

    @v_args(inline=True)
    def group(self, _l: Token, inner: Expr, _r: Token) -> Expr:
        return inner

    def item(self, children: list) -> Expr:
        if len(children) == 1:
            return children[0]
        expr, q = children
        return Repeat(expr, *{"*": (0, None), "+": (1, None), "?": (0, 1)}[q.value])

    def repeat(self, children: list) -> Expr:
        expr, tok = children
        m = re.fullmatch(r"\{\s*(\d*)\s*(,\s*(\d*)\s*)?\}", tok.value)
        if not m or (not m.group(1) and not m.group(2)) or (not m.group(1) and m.group(2) and not m.group(3)):
            raise self._err(f"bad repetition bounds {tok.value!r}: expected {{m}}, {{m,}}, {{m,n}} or {{,n}}", tok)
        lo = int(m.group(1)) if m.group(1) else 0
        hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
        if hi is not None and hi < lo:
            raise self._err(f"reversed repetition bounds {tok.value!r}: {lo} > {hi}", tok)
        if lo > MAX_REPEAT or (hi or 0) > MAX_REPEAT:
            raise self._err(f"repetition bound in {tok.value!r} is too large (limit {MAX_REPEAT})", tok)
        return Repeat(expr, lo, hi)

    def sequence(self, children: list) -> Expr:
        return seq(*children) if children else Literal("")

    def alternation(self, children: list) -> Expr:
        return alt(*[c for c in children if not isinstance(c, Token)])

    def rule(self, children: list) -> tuple:
        name_tok, _define, body = children
        return name_tok, body

    def start(self, children: list) -> RuleSet:
        rs = RuleSet()
        for name_tok, body in children:
            name = name_tok.value
            if name in rs.rules:
                first = rs.positions[name]
                raise self._err(f"rule '{name}' is defined twice (first at line {first[0]})", name_tok)
            rs.rules[name] = body
            rs.positions[name] = (name_tok.line, name_tok.column)
        return rs


def _describe_unexpected(err: UnexpectedInput, text: str) -> GrammarError:
    line, col = err.line, err.column
    if isinstance(err, UnexpectedCharacters):
        ch = text[err.pos_in_stream] if err.pos_in_stream < len(text) else ""
        if ch == '"':
            return GrammarError("unterminated string literal", line, col, text)
        if ch == "[":
            return GrammarError("unterminated character class", line, col, text)
        if ch in "<!":
            return GrammarError("bad token reference: expected <[123]>, <text>, !<[123]> or !<text>", line, col, text)
        if ch == "{":
            return GrammarError("unterminated repetition bounds", line, col, text)
        if ch == ":":
            return GrammarError("expected '::=' after the rule name", line, col, text)
        return GrammarError(f"unexpected character {ch!r}", line, col, text)
    if isinstance(err, UnexpectedEOF):
        return GrammarError("unexpected end of grammar: unclosed '(' or a rule without a body",
                            len(text.splitlines()) or 1, 1, text)
    if isinstance(err, UnexpectedToken):
        tok = err.token
        if tok.type == "$END":
            if "RPAR" in err.expected:
                return GrammarError("unclosed '(': expected ')' before the end of the grammar",
                                    *_end_position(text), text)
            return GrammarError("unexpected end of grammar", *_end_position(text), text)
        if tok.type == "RPAR":
            return GrammarError("unbalanced ')'", line, col, text)
        if tok.type == "_NL" and "RPAR" in err.expected:
            return GrammarError("unclosed '(' at the end of the line", line, col, text)
        if "DEFINE" in err.expected:
            return GrammarError(f"expected '::=' after rule name, found {tok.value!r}", line, col, text)
        if tok.type == "DEFINE":
            return GrammarError("'::=' without a rule name before it (is a newline missing?)", line, col, text)
        if tok.type in ("QUANT", "REPEAT"):
            return GrammarError(f"repetition {tok.value!r} has nothing to repeat", line, col, text)
        return GrammarError(f"unexpected {tok.value!r}", line, col, text)
    return GrammarError(str(err), line, col, text)


def _end_position(text: str) -> tuple[int, int]:
    lines = text.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def parse_gbnf(text: str) -> RuleSet:
    """Parse GBNF text into rules; raise ``GrammarError`` with line and column on bad input."""
    if not isinstance(text, str):
        raise TypeError(f"GBNF grammar must be a str, not {type(text).__name__}")
    if not re.sub(r"#[^\n]*", "", text).strip():
        raise GrammarError("empty grammar: no rules defined", 1, 1, text)
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as err:
        raise _describe_unexpected(err, text) from None
    try:
        return _GrammarBuilder(text).transform(tree)
    except VisitError as err:
        if isinstance(err.orig_exc, GrammarError):
            raise err.orig_exc from None
        raise


def check_references(rs: RuleSet, root: str, text: str | None = None) -> None:
    """Every referenced rule must exist, and so must the root."""
    from halter.grammar.ast import rule_refs
    for name, body in rs.rules.items():
        for ref in rule_refs(body):
            if ref.name not in rs.rules:
                raise GrammarError(f"undefined rule '{ref.name}' (used in rule '{name}')",
                                   ref.line or None, ref.column or None, text)
    if root not in rs.rules:
        raise GrammarError(f"missing root rule: no rule named '{root}'", 1, 1, text)
