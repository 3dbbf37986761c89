"""GBNF text -> syntax tree (``halter.grammar.ast``), read exactly as llama.cpp's parser reads it.

The reader follows ``llama-grammar.cpp`` (``llama_grammar_parser``) character by character, so
that a grammar llama.cpp accepts is accepted here with the same language, and one it refuses is
refused here too, with a ``GrammarError`` naming line and column. Its rules, in short:

* a rule is ``name ::= body``; names are ASCII letters, digits and ``-`` (no ``_``); a line break
  (``\\n``, ``\\r\\n`` or a lone ``\\r``) ends a rule, except inside ``( )`` and after ``|``/``::=``;
* literals ``"..."`` and classes ``[...]`` know the escapes ``\\x.. \\u.... \\U........ \\t \\n \\r
  \\\\ \\" \\[ \\] \\-`` and no others; a raw line break inside them is part of them;
* ``* + ?`` and ``{m}``, ``{m,}``, ``{m,n}`` apply to the item before them, and a second one applies
  to the result (``"a"+?`` is ``("a"+)?``); ``{,n}`` is refused; a count above 2000 is refused, an
  upper bound above 2000 means no upper bound, and so does llama.cpp's limit on the rules a
  repetition may copy (2000);
* a rule defined twice: the later definition wins;
* ``[]`` and ``[^]`` match the empty string; a reversed range ``[z-a]`` and a code point above
  U+10FFFF match nothing.

Constructs llama.cpp accepts that are traps (they silently match nothing, or something other
than they seem) are accepted and reported as ``GrammarWarning`` with line and column
(``ParseResult.warnings``). The reader uses an explicit stack, so nesting depth is bounded by
``halter.limits`` (``nesting_depth``), never by Python's stack. ``gbnf_checks.py`` holds the
checks that run on the whole grammar afterwards (undefined rules, left recursion), ``gbnf_lexer.py``
the lexical pieces (spaces, names, numbers, escapes) and line/column positions.
"""
from __future__ import annotations

from halter import limits
from halter.errors import GrammarError
from halter.grammar.gbnf_checks import check_llama_tables, nesting_depth
from halter.grammar.gbnf_lexer import WORD, Scanner, show_code_point
from halter.grammar.ast import (MAX_CODE_POINT, AnyChar, CharClass, Expr, Literal, Repeat, RuleRef,
                                RuleSet, TokenRef, alt, seq)

#: llama.cpp's MAX_REPETITION_THRESHOLD: the largest repetition count, and the most rule copies
#: one repetition may make (counts multiply along stacked repetitions).
MAX_REPEAT = 2000
_UNBOUNDED = None
_T = -1     # a terminal element in the mirror of llama.cpp's rule elements (see _Symbols)


class _Symbols:
    """llama.cpp's symbol table and rule elements, mirrored: what decides which grammars it refuses.

    Each rule is a list of alternatives, each a list of elements: ``_T`` for a terminal run or
    a symbol id for a rule reference. Ids are given in llama.cpp's order (names at first
    mention; groups and repetition rules as it makes them).
    """

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.names: list[str | None] = []
        self.first_use: dict[int, int] = {}         # id -> text offset of its first mention
        self.stored: dict[int, list[list[int]]] = {}
        self.owner: dict[int, str] = {}             # generated id -> the rule it was made in
        self.current = ""

    def get(self, name: str, offset: int) -> int:
        sid = self.ids.get(name)
        if sid is None:
            sid = self.ids[name] = len(self.names)
            self.names.append(name)
            self.first_use[sid] = offset
        return sid

    def generate(self) -> int:
        self.names.append(None)
        self.owner[len(self.names) - 1] = self.current
        return len(self.names) - 1


def _push(elems: list[int], e: int) -> None:
    if not (e == _T and elems and elems[-1] == _T):
        elems.append(e)


class _Frame:
    """One ``parse_alternates`` in progress: the rule body (``group`` None) or a parenthesised group."""

    __slots__ = ("nested", "group", "open_at", "symbols_before", "alts", "alt_elems",
                 "items", "elems", "last_start", "n_prev", "last_empty")

    def __init__(self, nested: bool, group: int | None = None, open_at: int = 0,
                 symbols_before: int = 0) -> None:
        self.nested, self.group, self.open_at, self.symbols_before = nested, group, open_at, symbols_before
        self.alts: list[Expr] = []
        self.alt_elems: list[list[int]] = []
        self.new_sequence()

    def new_sequence(self) -> None:
        self.items: list[Expr] = []
        self.elems: list[int] = []
        self.last_start: int | None = None      # where the last item's elements start; None: nothing to repeat
        self.n_prev = 1
        self.last_empty = False                 # the last item matches only "" (llama.cpp: nothing to repeat)

    def end_sequence(self) -> None:
        self.alts.append(seq(*self.items) if self.items else Literal(""))
        self.alt_elems.append(self.elems)


class ParseResult(RuleSet):
    """``RuleSet`` plus what the reader saw: warnings (message, line, column) and llama.cpp's tables."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: list[tuple[str, int, int, str]] = []     # (message, line, column, kind)
        self.spans: list[tuple[int, str]] = []                  # (offset where a rule starts, its name)
        self.symbols = _Symbols()


class _Reader(Scanner):
    """The grammar level of llama.cpp's parser: rules, alternatives, groups, repetitions."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.out = ParseResult()
        self.sym = self.out.symbols

    def warn(self, message: str, offset: int, kind: str = "trap") -> None:
        self.out.warnings.append((message, *self.where(offset), kind))

    # -- grammar --------------------------------------------------------------------------
    def parse(self) -> ParseResult:
        if "\0" in self.s:
            raise self.err("NUL character in the grammar (llama.cpp would stop reading there)", self.s.index("\0"))
        pos = self.space(0, True)
        while pos < self.n:
            pos = self.rule(pos)
        if not self.out.rules:
            raise GrammarError("empty grammar: no rules defined", 1, 1, self.s)
        return self.out

    def rule(self, start: int) -> int:
        end = self.name_end(start)
        if end == start:
            c = self.ch(start)
            if c == "_":
                raise self.err("a rule name cannot contain '_' (GBNF names are letters, digits and '-')", start)
            if c == "|":
                raise self.err("'|' at the start of a line: put it at the end of the previous line "
                               "or inside ( )", start)
            if c in "*+?{":
                raise self.err(f"repetition {c!r} at the start of a line has nothing to repeat "
                               "(a line break ends a rule outside ( ))", start)
            raise self.err(f"expected a rule name, found {c!r}", start)
        name = self.s[start:end]
        pos = self.space(end, False)
        if self.s[pos:pos + 3] != "::=":
            if self.ch(pos) == "_":
                raise self.err("a rule name cannot contain '_' (GBNF names are letters, digits and '-')", pos)
            found = self.ch(pos)
            raise self.err(f"expected '::=' after rule name, found {found!r}" if found else
                           "expected '::=' after rule name, found the end of the grammar", pos)
        rule_id = self.sym.get(name, start)
        self.out.spans.append((start, name))
        self.sym.current = name
        pos = self.space(pos + 3, True)
        body, elems, pos = self.alternates(pos)
        if name in self.out.rules:
            line = self.out.positions[name][0]
            self.warn(f"rule '{name}' is defined again (first at line {line}): the later definition "
                      "replaces the earlier one, as in llama.cpp", start, "redefined")
            del self.out.rules[name]            # (keeps definition order: the later place counts)
        depth = nesting_depth(body)
        if depth > limits.LIMITS.nesting_depth:
            line, col = self.where(start)
            limits.check("nesting_depth", depth, f"rule '{name}' (line {line}, column {col})",
                         "grammar nesting depth")
        self.out.rules[name] = body
        self.out.positions[name] = self.where(start)
        self.sym.stored[rule_id] = elems
        c = self.ch(pos)
        if c == "\r":
            pos += 2 if self.ch(pos + 1) == "\n" else 1
        elif c == "\n":
            pos += 1
        elif c:
            raise self._unexpected(pos)
        return self.space(pos, True)

    def _unexpected(self, pos: int) -> GrammarError:
        c = self.ch(pos)
        if c == ")":
            return self.err("unbalanced ')'", pos)
        if c == "_":
            return self.err("a rule name cannot contain '_' (GBNF names are letters, digits and '-')", pos)
        if c == ":":
            return self.err("'::=' without a rule name before it (is a line break missing?)", pos)
        if c == "!":
            return self.err("bad token reference: expected <[123]>, <text>, !<[123]> or !<text>", pos)
        return self.err(f"unexpected character {c!r}", pos)

    def alternates(self, pos: int) -> tuple[Expr, list[list[int]], int]:
        """A rule body: llama.cpp's parse_alternates/parse_sequence, with groups on an explicit stack."""
        stack = [_Frame(nested=False)]
        depth_limit = limits.LIMITS.nesting_depth
        s, sym = self.s, self.sym
        while True:
            f = stack[-1]
            c = self.ch(pos)
            if c == '"':
                start = pos
                pos += 1
                cps: list[int] = []
                while self.ch(pos) != '"':
                    if pos >= self.n:
                        raise self.err("unterminated string literal", start)
                    cp, pos = self.char(pos, "string literal")
                    cps.append(cp)
                self._atom(f, self._literal(cps, start), bool(cps), start)
                pos = self.space(pos + 1, f.nested)
            elif c == "[":
                start = pos
                expr, nonempty, pos = self._char_class(pos)
                self._atom(f, expr, nonempty, start)
                pos = self.space(pos + 1, f.nested)
            elif c == "<" or c == "!":
                start = pos
                expr, pos = self._token(pos)
                self._atom(f, expr, True, start)
                pos = self.space(pos, f.nested)
            elif c and c in WORD:
                end = self.name_end(pos)
                if self.ch(end) == "_":
                    raise self.err("a rule name cannot contain '_' (GBNF names are letters, digits and '-')", end)
                name = s[pos:end]
                ref = sym.get(name, pos)
                line, col = self.where(pos)
                self._atom(f, RuleRef(name, line, col), True, pos, ref)
                pos = self.space(end, f.nested)
            elif c == "(":
                if len(stack) > depth_limit:
                    limits.check("nesting_depth", len(stack), "line {}, column {}".format(*self.where(pos)),
                                 "grammar nesting depth")
                before = len(sym.names)
                group = sym.generate()
                stack.append(_Frame(nested=True, group=group, open_at=pos, symbols_before=before))
                pos = self.space(pos + 1, True)
            elif c == "|":
                f.end_sequence()
                f.new_sequence()
                pos = self.space(pos + 1, True)
            elif c == ".":
                self._atom(f, AnyChar(), True, pos)
                pos = self.space(pos + 1, f.nested)
            elif c in ("*", "+", "?"):
                at = pos
                pos = self.space(pos + 1, f.nested)
                self._repeat(f, {"*": 0, "+": 1, "?": 0}[c], 1 if c == "?" else _UNBOUNDED, at, c)
            elif c == "{":
                pos = self._braces(f, pos)
            else:
                f.end_sequence()
                if f.group is None:
                    return alt(*f.alts), f.alt_elems, pos
                if c != ")":
                    line, col = self.where(f.open_at)
                    if not c:
                        raise self.err(f"unclosed '(' (opened at line {line}, column {col}): "
                                       "expected ')' before the end of the grammar", pos)
                    raise self.err(f"expected ')' to close the '(' at line {line}, column {col}, "
                                   f"found {c!r}", pos)
                stack.pop()
                sym.stored[f.group] = f.alt_elems
                parent = stack[-1]
                self._atom(parent, alt(*f.alts), True, f.open_at, f.group)
                parent.n_prev = max(1, len(sym.names) - f.symbols_before)
                pos = self.space(pos + 1, parent.nested)

    def _atom(self, f: _Frame, expr: Expr, nonempty: bool, at: int, ref: int | None = None) -> None:
        f.last_start = len(f.elems) if nonempty else None
        f.n_prev = 1
        f.last_empty = not nonempty
        if nonempty:
            f.items.append(expr)
            f.elems.append(_T if ref is None else ref)

    def _literal(self, cps: list[int], at: int) -> Expr:
        if any(0xD800 <= cp <= 0xDFFF for cp in cps):
            self.warn("a lone surrogate in this literal: no valid text contains it, so the literal never "
                      "matches (llama.cpp accepts it)", at, "dead-end")
        if all(cp <= MAX_CODE_POINT for cp in cps):
            return Literal("".join(map(chr, cps)))
        self.warn("a code point above U+10FFFF in this literal matches nothing, so the literal never "
                  "matches (llama.cpp accepts it)", at, "dead-end")
        return seq(*[Literal(chr(cp)) if cp <= MAX_CODE_POINT else CharClass(()) for cp in cps])

    def _char_class(self, pos: int) -> tuple[Expr, bool, int]:
        start = pos
        pos += 1
        negated = self.ch(pos) == "^"
        if negated:
            pos += 1
        ranges: list[tuple[int, int]] = []
        count = 0
        while self.ch(pos) != "]":
            if pos >= self.n:
                raise self.err("unterminated character class", start)
            lo, pos = self.char(pos, "character class")
            hi = lo
            if self.ch(pos) == "-" and self.ch(pos + 1) != "]":
                if pos + 1 >= self.n:
                    raise self.err("unterminated character class", start)
                at = pos
                hi, pos = self.char(pos + 1, "character class")
                if hi < lo:
                    self.warn(f"reversed range {show_code_point(lo)}-{show_code_point(hi)} matches no character "
                              "(llama.cpp accepts it)", at, "trap" if negated else "dead-end")
            count += 1
            if lo > MAX_CODE_POINT and lo <= hi:
                self.warn("a code point above U+10FFFF in a character class matches nothing", pos - 1, "dead-end")
            lo, hi = lo, min(hi, MAX_CODE_POINT)
            if lo <= hi:
                ranges.append((lo, hi))
        if count == 0:
            self.warn(f"'{'[^]' if negated else '[]'}' is empty: llama.cpp reads it as the empty string "
                      "(it matches no character, and nothing to repeat)", start, "empty-class")
            return Literal(""), False, pos
        if not negated and all(0xD800 <= lo and hi <= 0xDFFF for lo, hi in ranges):
            self.warn("this character class matches no character of valid text", start, "dead-end")
        return CharClass(tuple(ranges), negated), True, pos

    def _token(self, pos: int) -> tuple[Expr, int]:
        start = pos
        negated = self.ch(pos) == "!"
        if negated:
            pos += 1
        if self.ch(pos) != "<":
            raise self.err("bad token reference: expected <[123]>, <text>, !<[123]> or !<text>", start)
        pos += 1
        if self.ch(pos) == "[":
            if not self.ch(pos + 1).isdigit():
                raise self.err("bad token id in token reference: expected <[123]>", start)
            token_id, pos = self.integer(pos + 1, "a token reference <[id]>")
            if token_id > 0xFFFFFFFF:
                raise self.err("token id in <[id]> is too large", start)
            if self.s[pos:pos + 2] != "]>":
                raise self.err("bad token reference: expected <[123]>", start)
            return TokenRef(token_id=token_id, negated=negated), pos + 2
        end = self.s.find(">", pos)
        if end < 0:
            raise self.err("bad token reference: no closing '>'", start)
        return TokenRef(text=self.s[pos - 1:end + 1], negated=negated), end + 1

    def _braces(self, f: _Frame, pos: int) -> int:
        at = pos
        pos = self.space(pos + 1, f.nested)
        if not self.ch(pos).isdigit() or self.ch(pos) not in "0123456789":
            if self.ch(pos) == ",":
                raise self.err("bad repetition bounds: '{,n}' is not GBNF (llama.cpp refuses it): write {0,n}", at)
            raise self.err("bad repetition bounds: expected {m}, {m,} or {m,n}", at)
        lo, pos = self.integer(pos, "repetition bounds")
        pos = self.space(pos, f.nested)
        hi: int | None
        if self.ch(pos) == "}":
            hi = lo
        elif self.ch(pos) == ",":
            pos = self.space(pos + 1, f.nested)
            hi = _UNBOUNDED
            if self.ch(pos) and self.ch(pos) in "0123456789":
                hi, pos = self.integer(pos, "repetition bounds")
                pos = self.space(pos, f.nested)
            if self.ch(pos) != "}":
                raise self.err("bad repetition bounds: expected '}'", at)
        else:
            raise self.err("bad repetition bounds: expected ',' or '}'", at)
        pos = self.space(pos + 1, f.nested)
        text = self.s[at:pos].rstrip()
        if lo > MAX_REPEAT:
            raise self.err(f"repetition count {lo} in {text!r} is above llama.cpp's limit of {MAX_REPEAT}", at)
        if hi is not None and hi < lo:
            raise self.err(f"reversed repetition bounds {text!r}: {lo} > {hi}", at)
        if hi is not None and hi > MAX_REPEAT:
            self.warn(f"upper bound {hi} in {text!r} is above llama.cpp's limit of {MAX_REPEAT}: it reads "
                      f"{{{lo},{hi}}} as {{{lo},}} (no upper bound), and so does halter", at, "unbounded")
            hi = _UNBOUNDED
        self._repeat(f, lo, hi, at, text)
        return pos

    def _repeat(self, f: _Frame, lo: int, hi: int | None, at: int, shown: str) -> None:
        """llama.cpp's handle_repetitions on the last item (and its mirror of rule elements)."""
        if f.last_start is None:
            raise self.err(f"repetition {shown!r} has nothing to repeat" + (
                ": the item before it matches only the empty string (llama.cpp refuses this)"
                if f.last_empty else ""), at)
        total = hi if hi is not None and hi > 0 else (lo if lo > 0 else 1)
        if f.n_prev * total > MAX_REPEAT:
            raise self.err(f"repetition {shown!r} is too large for llama.cpp: it would copy "
                           f"{f.n_prev * total} rules (limit {MAX_REPEAT}); put the repeated part in a rule "
                           "of its own", at)
        prev = f.elems[f.last_start:]
        if lo == 0:
            del f.elems[f.last_start:]
        else:
            for _ in range(lo - 1):
                for e in prev:
                    _push(f.elems, e)
        n_opt = 1 if hi is None else hi - lo
        last_rec = -2
        for i in range(n_opt):
            rec = self.sym.generate()
            first = list(prev)
            if i > 0 or hi is None:
                first.append(rec if hi is None else last_rec)
            self.sym.stored[rec] = [first, []]
            last_rec = rec
        if n_opt > 0:
            f.elems.append(last_rec)
        f.n_prev *= total
        if lo == 0 and hi == 0:
            f.items.pop()
            f.last_start = None
            f.last_empty = True
        else:
            f.items[-1] = Repeat(f.items[-1], lo, hi)




def parse_gbnf(text: str) -> ParseResult:
    """Parse GBNF text into rules as llama.cpp reads it; ``GrammarError`` with line and column on bad
    input. The result's ``warnings`` list the traps llama.cpp accepts silently."""
    if not isinstance(text, str):
        raise TypeError(f"GBNF grammar must be a str, not {type(text).__name__}")
    result = _Reader(text).parse()
    check_llama_tables(result, text)
    return result


def check_references(rs: RuleSet, root: str, text: str | None = None) -> None:
    """Every referenced rule must exist, and so must the root."""
    from halter.grammar.ast import rule_refs
    for name, body in rs.rules.items():
        for ref in rule_refs(body, distinct=True):
            if ref.name not in rs.rules:
                raise GrammarError(f"undefined rule '{ref.name}' (used in rule '{name}')",
                                   ref.line or None, ref.column or None, text)
    if root not in rs.rules:
        raise GrammarError(f"missing root rule: no rule named '{root}'", 1, 1, text)
