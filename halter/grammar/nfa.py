"""Syntax tree -> one NFA per rule over bytes, rule calls and token references.

Character classes become UTF-8 byte-range paths (``utf8.py``); repetitions are unrolled, or call an
auxiliary rule when unrolling would be large (``repeats.py``); small non-recursive rules are expanded in place of
their calls. ``automaton.py`` determinizes and minimizes the result.
"""
from __future__ import annotations

import functools
import heapq
import re
import sys

from halter.grammar.ast import (AnyChar, Alt, CharClass, Expr, Literal, Repeat, RuleRef, Seq, TokenRef,
                                MAX_CODE_POINT, rule_refs)
from halter.grammar import rule_memo
from halter.grammar.repeats import emit_repeat
from halter.grammar.graphs import strongly_connected_components
from halter.grammar.utf8 import utf8_sequences_cached

EPS, BYTES, CALL, TOKEN = 0, 1, 2, 3
INLINE_MAX_STATES = 400          # non-recursive rules this small are expanded where they are used
INLINE_ONCE_MAX_STATES = 4000    # ... and bigger ones too when they are used only once
INLINE_TINY_STATES = 24          # rules this small are expanded even when they call big leaf rules
WIDE_CLASS_STATES = 64           # classes bigger than this (in UTF-8 states) are "wide": see below
WIDE_COPIES_BUDGET = 400_000     # NFA states the expanded copies of wide classes may add in all
SHARE_MIN_STATES = 16            # subexpressions this big are built once per (expression, end state)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _one(_name: str) -> int:
    return 1


@functools.lru_cache(maxsize=4096)
def _class_states(ranges: tuple[tuple[int, int], ...]) -> int:
    """NFA states and edges one copy of a character class makes: a first-byte edge per UTF-8
    sequence and a state per distinct continuation tail (``[^"]`` 19, ``\\p{L}`` ~2,200)."""
    seqs = [seq for lo, hi in ranges for seq in utf8_sequences_cached(lo, hi)]
    return len(seqs) + len({seq[k:] for seq in seqs for k in range(1, len(seq))}) + 1


@functools.lru_cache(maxsize=4096)
def _class_sequences(expr: "CharClass | AnyChar") -> tuple[tuple[tuple[int, int], ...], ...]:
    """The UTF-8 byte-range sequences spelling a class (a class recurs in many rules and
    grammars: its ranges are merged and encoded once)."""
    ranges = [(0, MAX_CODE_POINT)] if isinstance(expr, AnyChar) else expr.code_point_ranges()
    return tuple(seq for lo, hi in ranges for seq in utf8_sequences_cached(lo, hi))


class Nfa:
    def __init__(self) -> None:
        self.edges: list[list[tuple[int, object, int]]] = []
        # (id of expression, end state) or (UTF-8 tail ranges, end state) -> the state starting it
        self.shared: dict[tuple, int] = {}
        self.called: list[str] = []         # the rules it calls, in the order emission met them

    def new(self) -> int:
        self.edges.append([])
        return len(self.edges) - 1

    def add(self, a: int, kind: int, label: object, b: int) -> None:
        self.edges[a].append((kind, label, b))


class NfaBuilder:
    """Builds the NFA of every rule, adding auxiliary rules for large repetitions."""

    def __init__(self, rules: dict[str, Expr]) -> None:
        self.rules = dict(rules)
        self.user_rules = frozenset(rules)        # (not the auxiliary rules emission adds)
        self.memo_hits: dict[int, tuple] = {}     # rule id -> the rule_memo entry it was built from
        self.memo_keys: dict[int, tuple] = {}     # rule id -> the rule_memo key to keep its DFA under
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.nfas: list[tuple[Nfa, int, int]] = []
        self.token_refs: list[TokenRef] = []
        self.token_index: dict[TokenRef, int] = {}
        self._size_cache: dict[int, int] = {}
        self.inline: set[str] = set()
        self._emitted: dict[int, int] = {}        # id of expression -> NFA states emitting it makes
        self._emitted_keep: list[Expr] = []       # (the expressions those ids belong to)
        self._split: dict[int, tuple[Expr, Expr]] = {}    # id of a repeat body -> (body, split body)
        self._aux: dict[int, tuple[Expr, RuleRef]] = {}   # id of a repeat body -> (body, the rule calling it)

    def rule_id(self, name: str) -> int:
        if name not in self.index:
            self.index[name] = len(self.names)
            self.names.append(name)
        return self.index[name]

    def plan_inlining(self, root: str) -> None:
        """Choose the rules to expand in place of their calls: small, non-recursive leaves, tiny
        rules that call only leaves (``ws``), and big rules used once.

        Inlining a leaf like ``char ::= [^"\\] | "\\" ...`` into ``string ::= "\"" char* "\""`` keeps
        the string body inside one DFA, so tokens never leave and re-enter a rule at every character
        (which would make masks depend on the caller at every step).
        """
        refs = {n: [r.name for r in rule_refs(e)] for n, e in self.rules.items()}
        counts: dict[str, int] = {}
        for n, rs in refs.items():
            for r in rs:
                counts[r] = counts.get(r, 0) + 1
        recursive = _recursive_rules(refs)
        expanded: dict[str, int] = {}

        def exp_size(n: str) -> int:
            if n not in expanded:
                expanded[n] = 1 << 30          # guard (recursive rules are never expanded)
                expanded[n] = self.size(self.rules[n], lambda r: exp_size(r) if r in self.inline else 1)
            return expanded[n]

        # Only rules that are leaves once their own callees are expanded: expanding a rule that still
        # calls others would copy its positions into every caller (an object's key/value rule into
        # each of the many "properties seen so far" rules a schema makes) for no gain.
        # One exception, decided first: a *tiny* rule whose callees are leaves, one of them too big
        # to expand (``ws ::= ([\t ] ws-blank | ws-nl)?``). Expanding it lets the common tokens run
        # through it (`` "``, ``": "``) without leaving the caller, and so without masks that depend
        # on the caller; its callees are expanded into it only if it stays tiny.
        self.inline = set()
        callers: dict[str, set[str]] = {}
        for n, rs in refs.items():
            for r in rs:
                callers.setdefault(r, set()).add(n)
        tiny: set[str] = set()
        for n in self.rules:
            if n != root and n not in recursive and refs[n] and not any(refs.get(r) for r in refs[n]) \
                    and any(self.size(self.rules[r]) > INLINE_MAX_STATES for r in refs[n]) \
                    and self.size(self.rules[n]) <= INLINE_TINY_STATES:
                tiny.add(n)
        self.inline |= tiny
        leaves_out: dict[str, bool] = {}

        def calls_out(n: str) -> bool:
            """Does rule ``n``, with its inlined callees expanded, still call other rules?"""
            hit = leaves_out.get(n)
            if hit is None:
                hit = leaves_out[n] = any(r not in self.inline or calls_out(r) for r in refs[n])
            return hit

        order = {n: i for i, n in enumerate(self.rules)}

        def forget(n: str) -> None:
            """Drop memoised sizes and verdicts of ``n``'s callers (transitively): they counted it
            as a call."""
            stack = [n]
            while stack:
                for c in callers.get(stack.pop(), ()):
                    if c in expanded or c in leaves_out:
                        expanded.pop(c, None)
                        leaves_out.pop(c, None)
                        stack.append(c)

        # rules are taken in definition order, and after one is expanded its callers are looked at
        # again (a worklist: linear in the rules, where rescanning all of them was quadratic)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 100_000))      # sizes recurse along chains of expanded rules
        try:
            for once in (False, True):      # rules used once, however big, only after the small ones
                heap = list(range(len(order)))
                queued = set(heap)
                names = list(self.rules)
                while heap:
                    n = names[heapq.heappop(heap)]
                    queued.discard(order[n])
                    if n in self.inline or n == root or n in recursive or calls_out(n):
                        continue
                    size = exp_size(n)
                    if any(c in tiny for c in callers.get(n, ())) and size > INLINE_TINY_STATES:
                        continue
                    if once:
                        if counts.get(n, 0) != 1 or size > INLINE_ONCE_MAX_STATES \
                                or any(c in self.inline for c in callers.get(n, ())):
                            continue
                    elif size > INLINE_MAX_STATES:
                        continue
                    self.inline.add(n)
                    forget(n)
                    for c in callers.get(n, ()):
                        if c in order and order[c] not in queued:
                            queued.add(order[c])
                            heapq.heappush(heap, order[c])
            self._limit_wide_copies()
        finally:
            sys.setrecursionlimit(limit)
            # the two recursive helpers hold themselves (and ``self``) in cycles: clearing their
            # cells lets reference counting free the builder and its NFAs when the build ends,
            # instead of the cyclic collector walking every edge tuple first
            del exp_size, calls_out

    def _limit_wide_copies(self) -> None:
        """Stop expanding rules whose wide classes would be copied too often.

        The plan above counts every class as 8 states (what the mask code's thresholds were tuned
        with). A wide Unicode class (``\\p{L}``: ~2,200 states) expanded into every caller can
        make the automata huge: a pattern like ``\\p{L}{10}`` under ``maxLength: 40`` is ~60 rules
        with ~20 copies each (a 25 s build). While the expanded copies of wide classes add more
        than WIDE_COPIES_BUDGET states, the expanded rule adding the most stops being expanded
        (its callers call it; tokens then cross rule ends inside such strings, so first-time masks
        there cost more: a trade taken only past the budget)."""
        if not any(self._has_wide_class(rule) for n, rule in self.rules.items() if n in self.inline):
            return      # the usual case (JSON's string characters are not wide): nothing to count

        def sizes(wide: bool) -> dict[str, int]:
            memo: dict[str, int] = {}

            def of(n: str) -> int:
                if n not in memo:
                    memo[n] = 1 << 30
                    memo[n] = self._size(self.rules[n], lambda r: of(r) if r in self.inline else 1, {}, wide)
                return memo[n]
            return {n: of(n) for n in self.rules}

        while True:
            flat, real = sizes(False), sizes(True)
            extra = {n: real[n] - flat[n] for n in self.rules}
            if sum(extra[n] for n in self.rules if n not in self.inline) <= WIDE_COPIES_BUDGET:
                return
            uses: dict[str, int] = {}
            for n in self.rules:
                if n not in self.inline:
                    for r in rule_refs(self.rules[n]):
                        uses[r.name] = uses.get(r.name, 0) + 1
            worst = max((n for n in self.inline if extra[n] > 0), default=None,
                        key=lambda n: (extra[n] * uses.get(n, 0), n))
            if worst is None:
                return
            self.inline.discard(worst)

    @staticmethod
    def _has_wide_class(expr: Expr) -> bool:
        """Does ``expr`` (not its callees) hold a class over WIDE_CLASS_STATES?"""
        stack = [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, CharClass):
                if _class_states(tuple(e.code_point_ranges())) > WIDE_CLASS_STATES:
                    return True
            elif isinstance(e, Seq):        # (AnyChar is 17 states: never wide)
                stack.extend(e.items)
            elif isinstance(e, Alt):
                stack.extend(e.options)
            elif isinstance(e, Repeat):
                stack.append(e.expr)
        return False

    def build_all(self, root: str, inline: bool = True) -> None:
        if inline:
            self.plan_inlining(root)
        self.rule_id(root)
        # emission recurses along the syntax tree: a JSON Schema key trie nests one Alt/Seq pair
        # per character, a few frames each (Python 3.11+ frames do not use the C stack)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 100_000))
        try:
            i = 0
            while i < len(self.names):            # rules are numbered as they are first referenced
                name = self.names[i]
                nfa = Nfa()
                s, e = nfa.new(), nfa.new()
                self.nfas.append((nfa, s, e))
                key = rule_memo.key_of(self, name) if inline else None
                entry = rule_memo.lookup(key)
                if entry is not None:             # built by an earlier grammar: number its callees
                    self.memo_hits[i] = entry
                    for callee in entry[4]:
                        self.rule_id(callee)
                else:
                    before = len(self.rules)
                    self.emit(nfa, self.rules[name], s, e, name)
                    if key is not None and rule_memo.keepable(self, nfa, before):
                        self.memo_keys[i] = key
                i += 1
        finally:
            sys.setrecursionlimit(limit)

    def size(self, expr: Expr, ref_size=None) -> int:
        """Estimated NFA states of ``expr``; a rule call counts ``ref_size(name)`` (default 1), so
        inlined callees count once per occurrence, repeats included."""
        if ref_size is not None:
            return self._size(expr, ref_size, {})
        n = self._size_cache.get(id(expr))
        if n is None:                    # the cache is the memo: subtrees are sized once, not per ancestor
            n = self._size(expr, _one, self._size_cache)
        return n

    def _size(self, expr: Expr, ref_size, memo: dict, wide: bool = False) -> int:
        """``wide``: classes count what they make when that is over WIDE_CLASS_STATES (else 8)."""
        key = id(expr)
        n = memo.get(key)
        if n is None:
            if isinstance(expr, Literal):
                n = len(expr.text.encode("utf-8", "surrogatepass")) + 1     # (a lone surrogate: see _emit)
            elif isinstance(expr, (CharClass, AnyChar)):
                n = 8
                if wide and isinstance(expr, CharClass):      # (AnyChar is 17 states: never wide)
                    real = _class_states(tuple(expr.code_point_ranges()))
                    n = real if real > WIDE_CLASS_STATES else 8
            elif isinstance(expr, Seq):
                n = sum(self._size(i, ref_size, memo, wide) for i in expr.items)
            elif isinstance(expr, Alt):
                n = sum(self._size(i, ref_size, memo, wide) for i in expr.options) + 2
            elif isinstance(expr, Repeat):
                # (sizes for the inlining plan count the copies emit_repeat makes: ``x+`` is two,
                # so rules expanded into ``(... r ...)+`` one inside another cannot double unseen)
                copies = max(expr.min, expr.max or 1, 1) if ref_size is _one else \
                    max(expr.max if expr.max is not None else expr.min + 1, 1)
                n = self._size(expr.expr, ref_size, memo, wide) * copies + 2
            elif isinstance(expr, RuleRef):
                n = ref_size(expr.name)
            else:
                n = 1
            memo[key] = n
        return n

    def emit(self, nfa: Nfa, expr: Expr, s: int, e: int, rule: str) -> None:
        """Add paths from ``s`` to ``e`` spelling ``expr``.

        Emission only adds edges out of ``s`` and into ``e`` (plus edges among states it creates),
        never into ``s`` nor out of ``e``. So a subexpression ending at the same ``e`` twice (the
        "rest of the string" after every branch of a key complement's trie, an inlined rule used
        in several alternatives) can be built once and entered by an epsilon edge: the paths from
        its start are the same whoever enters it. That keeps NFAs, and the subsets built from them,
        small.
        """
        if isinstance(expr, RuleRef) and expr.name in self.inline:
            expr = self.rules[expr.name]
        if isinstance(expr, (Seq, Alt, Repeat)) and self.size(expr) >= SHARE_MIN_STATES:
            nfa.add(s, EPS, None, self.start_of(nfa, expr, e, rule))
            return
        self._emit(nfa, expr, s, e, rule)

    def start_of(self, nfa: Nfa, expr: Expr, e: int, rule: str) -> int:
        """A state from which exactly ``expr`` leads to ``e``: built once per (expression, ``e``)."""
        if isinstance(expr, RuleRef) and expr.name in self.inline:
            expr = self.rules[expr.name]
        key = (id(expr), e)
        start = nfa.shared.get(key)
        if start is None:
            start = nfa.shared[key] = nfa.new()
            self._emit(nfa, expr, start, e, rule)
        return start

    def _emit(self, nfa: Nfa, expr: Expr, s: int, e: int, rule: str) -> None:
        if isinstance(expr, Literal):
            if _SURROGATE.search(expr.text):
                return      # like a class's surrogates (utf8.py): no valid UTF-8 spells it
            data = expr.text.encode("utf-8")
            n = len(data)
            if not n:
                nfa.add(s, EPS, None, e)
                return
            # s -> a new state per inner byte -> e (written out: literals are most of a schema's NFA)
            edges = nfa.edges
            first = len(edges)
            edges[s].append((BYTES, (data[0], data[0]), e if n == 1 else first))
            for i in range(1, n):
                b = data[i]
                edges.append([(BYTES, (b, b), e if i == n - 1 else first + i)])
        elif isinstance(expr, (CharClass, AnyChar)):
            for byte_seq in _class_sequences(expr):
                # continuation bytes lead through states shared per (remaining ranges, e):
                # classes ending at the same place share their UTF-8 tails
                end = e
                for k in range(len(byte_seq) - 1, 0, -1):
                    key = (byte_seq[k:], end)
                    nxt = nfa.shared.get(key)      # type: ignore[call-overload]
                    if nxt is None:
                        nxt = nfa.shared[key] = nfa.new()   # type: ignore[index]
                        nfa.add(nxt, BYTES, byte_seq[k], end)
                    end = nxt
                nfa.add(s, BYTES, byte_seq[0], end)
        elif isinstance(expr, RuleRef):
            if expr.name in self.inline:
                self.emit(nfa, self.rules[expr.name], s, e, rule)
            else:
                nfa.add(s, CALL, self.rule_id(expr.name), e)
                nfa.called.append(expr.name)
        elif isinstance(expr, TokenRef):
            if expr not in self.token_index:
                self.token_index[expr] = len(self.token_refs)
                self.token_refs.append(expr)
            nfa.add(s, TOKEN, self.token_index[expr], e)
        elif isinstance(expr, Seq):
            # right to left: the state between two items is the shared start of the rest, so
            # sequences with a common tail (`[^a] rest`, `[^b] rest`, ...) end in one copy of it
            end = e
            for item in reversed(expr.items[1:]):
                end = self.start_of(nfa, item, end, rule)
            if expr.items:
                self.emit(nfa, expr.items[0], s, end, rule)
        elif isinstance(expr, Alt):
            for opt in expr.options:       # straight from s to e: see emit() on why that is safe
                self.emit(nfa, opt, s, e, rule)
        elif isinstance(expr, Repeat):
            self.emit_repeat(nfa, expr, s, e, rule)
        else:
            raise TypeError(f"unknown grammar expression {expr!r}")

    def emit_repeat(self, nfa: Nfa, rep: Repeat, s: int, e: int, rule: str) -> None:
        emit_repeat(self, nfa, rep, s, e, rule)


def _recursive_rules(refs: dict[str, list[str]]) -> set[str]:
    """Rules that can call themselves (directly or through others): the rules of a strongly
    connected component of more than one rule, or calling themselves."""
    succs = {v: [w for w in dict.fromkeys(calls) if w in refs] for v, calls in refs.items()}   # once per rule
    out: set[str] = set()
    for comp in strongly_connected_components(list(refs), succs.__getitem__):
        if len(comp) > 1 or comp[0] in succs[comp[0]]:
            out.update(comp)
    return out
