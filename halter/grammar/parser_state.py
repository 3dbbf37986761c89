"""Parser states: Earley item sets over rule automata, hash-consed so that equal states are one object.

An *item* is ``(position, context)``: a place inside one rule's DFA, and what happens when that rule
ends. A *context* is the set of places to return to — ``(position after the call, context of the
caller)`` pairs — so contexts form a graph-structured stack. Contexts are interned by their meaning,
not by where they were created, and items at one position (returns to one place) merge into one
with the union of their contexts, so ambiguous grammars (``x? x? x? ...``, ``(a | a | aa)*``, left
recursion, ``root ::= r r``, ``r ::= "a" | "" | root* "a"``) keep states and contexts whose size is
bounded by the grammar, not by the input (recursive ambiguous grammars still make new contexts as
the input grows, as an Earley parser makes new items: linearly, not exponentially).

Closures come in two kinds. The *opaque node* of a position is the closure of that position with an
unknown caller (the OPAQUE context), made by the Earley walk (``earley.py``) once per position, at
compile time for most. Every other closure is an instance of opaque nodes: the caller substituted
for OPAQUE in their contexts (those contexts are then interned by what they were made from: the
opaque node's context and the caller), plus what the caller returns to where the position's rule
can end right away. That makes a state seen for the first time a few lookups per item.

A context is an int id into two tables of the ``StateSpace``: ``ctx_returns`` (its return pairs) and
``ctx_flags``. Items, a state's item tuples and its interning key are then tuples of ints, which
Python's cyclic garbage collector stops tracking: a state costs the collector its ``Node`` and
transition array, however many items and contexts it holds (see tests/test_state_space_gc.py). (One
transition array for the whole space would save the second object, but indexing it by
``id * n_classes + class`` costs warm byte stepping a third of its speed.)

A *node* (``Node``) is a whole parser state: the items that can still read a byte or a token, plus
two flags: ``accepting`` (the root may end here) and ``escaped`` (a rule started with the special
``OPAQUE`` context has ended here: used to precompute token masks per position without knowing the
stack). Nodes are interned too, so a node is its own canonical key and transitions are memoised per
(node, byte class) in the node's int array ``next``: once warm, reading a byte is one lookup.
"""
from __future__ import annotations

from array import array

from halter.grammar.automaton import RuleAutomata
from halter.grammar.contexts import BOTTOM_ID, ENDS_ROOT, ESCAPES, OPAQUE_ID, meaning_key
from halter.grammar.earley import earley_closure

__all__ = ["BOTTOM_ID", "ENDS_ROOT", "ESCAPES", "OPAQUE_ID", "Node", "StateSpace"]


class Node:
    """An interned parser state. ``scan`` items can read bytes, ``tok`` items can read token refs.

    ``scan`` and ``tok`` hold one item per position, sorted by position (``StateSpace._merge``).
    """
    __slots__ = ("id", "scan", "tok", "accepting", "escaped", "next")

    def __init__(self, nid: int, scan: tuple, tok: tuple, accepting: bool, escaped: bool,
                 unknown: array) -> None:
        self.id = nid
        self.scan = scan            # ((position, context id), ...)
        self.tok = tok              # ((position, context id), ...)
        self.accepting = accepting
        self.escaped = escaped
        self.next = unknown[:]      # byte class -> next node's id (memoised transitions; -1: not yet)

    @property
    def dead(self) -> bool:
        return self.id == 0

    def __repr__(self) -> str:
        return f"Node({self.id}, items={len(self.scan) + len(self.tok)}, accepting={self.accepting})"


MAX_CHAIN = 48
"""Completions chained deeper than this (callers whose rest may be empty) are closed by the Earley walk."""


class _TooDeep(Exception):
    """A closure built from opaque nodes met a long or cyclic chain of completions."""


class StateSpace:
    """Builds, interns and steps parser states for one compiled grammar."""

    def __init__(self, automata: RuleAutomata, *, templates: bool = True) -> None:
        self.a = automata
        self.templates = templates     # build closures from opaque nodes (False: always the Earley walk)
        self.ctx_returns: list[tuple[tuple[int, int], ...]] = [(), ()]   # context id -> ((after, context id), ...)
        self.ctx_flags: list[int] = [ENDS_ROOT, ESCAPES]                 # context id -> ENDS_ROOT | ESCAPES
        self._ctx_table: dict[tuple, int] = {meaning_key(ENDS_ROOT, ()): BOTTOM_ID, meaning_key(ESCAPES, ()): OPAQUE_ID}
        self._node_table: dict[tuple, Node] = {}
        self.nodes: list[Node] = []
        self._unknown = array("i", [-1]) * automata.n_classes    # a node's transitions, none known yet
        self.dead = self._make_node((), (), False, False)
        self.class_of = automata.class_of
        self._opaque_nodes: dict[int, Node] = {}
        self._single: dict[tuple[int, int], Node] = {}     # item (position, context) -> its closure
        self._subst_memo: dict[tuple[int, int], int] = {}  # (opaque node's context, caller) -> context
        self._ret_items: dict[int, tuple] = {}             # context -> items of what it returns to
        self._ret_open: set[int] = set()                   # contexts whose _return_items is running
        self._union_memo: dict[frozenset, int] = {}         # members -> their union
        self._members: dict[int, frozenset] = {}            # a union made by _union -> its members
        self._union_in: dict[frozenset, int] = {}           # contexts as given -> their union
        self._open_unions: set[int] = set()                 # unions whose returns are still being made
        # a call whose return position is a pure end (the rule can only stop there) is a tail call
        self._tail = [automata.accepting[p] and not automata.has_bytes[p] and not automata.calls[p]
                      and not automata.tokens[p] for p in range(automata.n_positions)]
        self.initial = self.closure([(automata.start[automata.root], BOTTOM_ID)])

    # -- interning ---------------------------------------------------------------------------
    def _make_node(self, scan: tuple, tok: tuple, accepting: bool, escaped: bool) -> Node:
        key = (scan, tok, accepting, escaped)
        node = self._node_table.get(key)
        if node is None:
            node = Node(len(self.nodes), scan, tok, accepting, escaped, self._unknown)
            self._node_table[key] = node
            self.nodes.append(node)
        return node

    def _new_ctx(self, returns: tuple, flags: int) -> int:
        cid = len(self.ctx_returns)
        self.ctx_returns.append(returns)
        self.ctx_flags.append(flags)
        return cid

    def closure(self, kernel) -> Node:
        """The interned node for the closure (predict + complete) of ``kernel`` items.

        A kernel with the OPAQUE context (a caller unknown) is closed by the Earley walk
        (``earley.py``). Any other is built from those: the closure of ``(d, c)`` is the opaque
        node of ``d`` with OPAQUE replaced by ``c`` (``_subst``), plus, if ``d``'s rule can end
        within it (the opaque node is ``escaped``), what ``c`` returns to (``_return_items``); the
        closure of several items is the union of theirs. Compiling the grammar made the opaque nodes
        of all positions that read bytes (the others are made when first needed), so a state met for
        the first time costs a few lookups per item instead of a walk of the grammar.
        """
        a = self.a
        if len(kernel) == 1:
            d, c = kernel[0]
            if not a.calls[d] and not a.accepting[d]:    # inside a literal: one item that neither calls nor ends
                has_b, has_t = a.has_bytes[d], bool(a.tokens[d])
                if not has_b and not has_t:
                    return self.dead
                item = (kernel[0],)
                return self._make_node(item if has_b else (), item if has_t else (), False, False)
            if c == OPAQUE_ID or not self.templates:
                return earley_closure(self, kernel)
        elif not self.templates or any(c == OPAQUE_ID for _, c in kernel):
            return earley_closure(self, kernel)
        scan: set = set()
        tok: set = set()
        accepting = escaped = False
        try:
            for d, c in kernel:
                acc, esc = self._instance(d, c, scan, tok, 0)
                accepting, escaped = accepting or acc, escaped or esc
        except _TooDeep:                 # completions chained deeper than MAX_CHAIN, or in a cycle: walk instead
            return earley_closure(self, kernel)
        if not scan and not tok and not accepting and not escaped:
            return self.dead
        return self._make_node(self._merge(scan), self._merge(tok), accepting, escaped)

    def _instance(self, d: int, c: int, scan: set, tok: set, depth: int) -> tuple[bool, bool]:
        """Add the items of the closure of ``(d, c)`` to ``scan`` and ``tok``; (accepting, escaped)."""
        o = self._opaque_nodes.get(d)
        if o is None:
            o = self.opaque_node(d)
        subst = self._subst
        scan.update([(x, subst(ctx, c)) for x, ctx in o.scan])
        if o.tok:
            tok.update([(x, subst(ctx, c)) for x, ctx in o.tok])
        if not o.escaped:
            return False, False
        flags = self.ctx_flags[c]
        r_scan, r_tok, r_acc, r_esc = self._return_items(c, depth + 1)
        scan.update(r_scan)
        tok.update(r_tok)
        return bool(flags & ENDS_ROOT) or r_acc, bool(flags & ESCAPES) or r_esc

    def _return_items(self, c: int, depth: int) -> tuple[tuple, tuple, bool, bool]:
        """(scan items, token items, accepting, escaped) of the closure of what ``c`` returns to.

        Memoised per context. A chain of completions (callers whose rest may be empty, one after
        the other) deeper than ``MAX_CHAIN``, or one that meets itself (a context that returns to
        itself), raises ``_TooDeep``: the Earley walk handles those.
        """
        hit = self._ret_items.get(c)
        if hit is not None:
            return hit
        if depth > MAX_CHAIN or c in self._ret_open:
            raise _TooDeep
        self._ret_open.add(c)
        try:
            scan: set = set()
            tok: set = set()
            accepting = escaped = False
            for after, c2 in self.ctx_returns[c]:
                acc, esc = self._instance(after, c2, scan, tok, depth)
                accepting, escaped = accepting or acc, escaped or esc
        finally:
            self._ret_open.discard(c)
        hit = self._ret_items[c] = (tuple(scan), tuple(tok), accepting, escaped)
        return hit

    def _subst(self, ctx: int, c: int) -> int:
        """``ctx`` (a context of an opaque node) with the OPAQUE caller replaced by ``c``.

        Made once per ``(ctx, c)``: its returns are ``ctx``'s with the substitution applied, plus
        ``c``'s own when ``ctx`` escapes to the unknown caller (then it takes ``c``'s flags too).
        The id is reserved before the returns are filled in, so cyclic contexts map to cycles.
        Once every context the substitution made is filled in, each one's returns to one place
        merge into one (``_merge``): a union of contexts reads their returns, so it must not
        meet a context still being filled.
        """
        if ctx == OPAQUE_ID:
            return c
        s = self._subst_memo.get((ctx, c))
        if s is None:
            made: list[int] = []
            s = self._subst_fill(ctx, c, made)
            ctx_returns, merge = self.ctx_returns, self._merge
            for x in made:
                ctx_returns[x] = merge(ctx_returns[x])
        return s

    def _subst_fill(self, ctx: int, c: int, made: list) -> int:
        if ctx == OPAQUE_ID:
            return c
        key = (ctx, c)
        s = self._subst_memo.get(key)
        if s is None:
            flags = self.ctx_flags[ctx]
            s = self._subst_memo[key] = self._new_ctx((), (flags & ~ESCAPES) | (self.ctx_flags[c] if flags & ESCAPES else 0))
            made.append(s)
            returns = {(after, self._subst_fill(c2, c, made)) for after, c2 in self.ctx_returns[ctx]}
            if flags & ESCAPES:
                returns.update(self.ctx_returns[c])
            self.ctx_returns[s] = tuple(sorted(returns))
        return s

    def union(self, a: Node, b: Node) -> Node:
        """The state holding both ``a``'s and ``b``'s items (one per position, as every node does)."""
        return self._make_node(self._merge(set(a.scan + b.scan)), self._merge(set(a.tok + b.tok)),
                               a.accepting or b.accepting, a.escaped or b.escaped)

    def _merge(self, items) -> tuple:
        """One item per position, sorted: items at the same position merge their contexts into a union.

        ``(d, c1)`` and ``(d, c2)`` read the same input and, when the rule ends, return to both; so
        they are ``(d, c1 | c2)``. This keeps a state's size bounded by the grammar's positions even
        for infinitely ambiguous grammars such as ``S ::= S S | "a"``. A context's returns
        (``(after, context)`` pairs) merge the same way where they are made by substitution and
        union, so that the places a rule returns to stay bounded by the grammar too.
        """
        out = sorted(items)
        for i in range(1, len(out)):
            if out[i][0] == out[i - 1][0]:
                break
        else:                            # the usual case: every position once
            return tuple(out)
        by_pos: dict[int, dict[int, None]] = {}
        for d, c in out:
            by_pos.setdefault(d, {})[c] = None
        return tuple((d, next(iter(cs)) if len(cs) == 1 else self._union(list(cs))) for d, cs in by_pos.items())

    def _union(self, ctxs: list[int]) -> int:
        """The context that returns wherever any of ``ctxs`` does (made once per set of members).

        Returns of the members to one place merge into one return with the union of their
        contexts, and so on down (a worklist, not recursion: unions of long stacks are deep): each
        such union is a new context, its id reserved before its returns are made, so cycles close,
        and its members kept (``_members``): a union of unions is the union of their members, which
        is what it is interned by. A union whose returns go to distinct places is interned by
        meaning. Without the merge, ambiguous recursions (``root ::= r r``, ``r ::= "a" | "" |
        root* "a"``) doubled the returns of a context at every byte.
        """
        pending: list = []
        u = self._union_of(ctxs, pending)
        ctx_returns, open_ = self.ctx_returns, self._open_unions
        while pending:
            v, returns = pending.pop()
            by_after: dict[int, list[int]] = {}
            for after, c in returns:
                by_after.setdefault(after, []).append(c)
            ctx_returns[v] = tuple(sorted((after, cs[0] if len(cs) == 1 else self._union_of(cs, pending))
                                          for after, cs in by_after.items()))
            open_.discard(v)
        return u

    def _union_of(self, ctxs: list[int], pending: list) -> int:
        """The union of ``ctxs``; a new one whose returns are still to merge is put on ``pending``.

        Interned by the set of members (contexts that are not themselves such unions). Its returns
        are read from ``ctxs`` as given, where a union among them already has its returns merged
        (one per place, so a few): reading every member's instead costs as many members as the
        union has, which in infinitely ambiguous grammars grows with the input. Only a union whose
        returns are still being made (``_open_unions``) is read through its members.
        """
        key = frozenset(ctxs)
        u = self._union_in.get(key)
        if u is not None:
            return u
        members_of = self._members
        members: set = set()
        for c in key:
            members.update(members_of.get(c, (c,)))
        if len(members) == 1:
            u = self._union_in[key] = next(iter(members))
            return u
        mkey = frozenset(members)
        u = self._union_memo.get(mkey)
        if u is None:
            flags, returns, has_union = 0, set(), False
            ctx_flags, ctx_returns, open_ = self.ctx_flags, self.ctx_returns, self._open_unions
            for c in key:
                flags |= ctx_flags[c]
                if c in open_:
                    for m in members_of[c]:
                        returns.update(ctx_returns[m])
                else:
                    returns.update(ctx_returns[c])
                has_union = has_union or c in members_of
            # a union among the inputs returns twice to one place through its members: never by meaning
            if not has_union and len({after for after, _ in returns}) == len(returns):
                u = self._union_memo[mkey] = self._by_meaning(flags, returns)
            else:
                u = self._union_memo[mkey] = self._new_ctx((), flags)
                members_of[u] = mkey
                open_.add(u)
                pending.append((u, returns))
        self._union_in[key] = u
        return u

    def _by_meaning(self, flags: int, returns) -> int:
        """The context that returns to ``returns`` (real contexts) with ``flags``, made if new."""
        key = meaning_key(flags, returns)
        ctx = self._ctx_table.get(key)
        if ctx is None:
            ctx = self._ctx_table[key] = self._new_ctx(key[2], flags)
        return ctx

    # -- stepping ----------------------------------------------------------------------------
    def step_class(self, node: Node, cls: int) -> Node:
        """The node after reading one byte of class ``cls`` (memoised)."""
        nid = node.next[cls]
        if nid >= 0:
            return self.nodes[nid]
        byte_next = self.a.byte_next
        kernel = []
        for d, c in node.scan:
            t = byte_next[d][cls]
            if t >= 0:
                kernel.append((t, c))
        if len(kernel) == 1:             # most steps: one item moves on; many states share it
            item = kernel[0]
            if item[1] == OPAQUE_ID:
                nxt = self.opaque_node(item[0])
            else:
                nxt = self._single.get(item)
                if nxt is None:
                    nxt = self._single[item] = self.closure(kernel)
        else:
            nxt = self.closure(kernel) if kernel else self.dead
        node.next[cls] = nxt.id
        return nxt

    def step_byte(self, node: Node, byte: int) -> Node:
        nid = node.next[self.class_of[byte]]
        return self.nodes[nid] if nid >= 0 else self.step_class(node, self.class_of[byte])

    def step_bytes(self, node: Node, data: bytes) -> Node:
        class_of, nodes = self.class_of, self.nodes
        for b in data:
            nid = node.next[class_of[b]]
            if nid > 0:
                node = nodes[nid]
            elif nid == 0:
                return self.dead
            else:
                node = self.step_class(node, class_of[b])
                if node.id == 0:
                    return node
        return node

    def step_token_ref(self, node: Node, matches) -> Node:
        """The node after consuming a whole token through token-reference edges (``matches(k)``)."""
        kernel = [(t, c) for d, c in node.tok for k, t in self.a.tokens[d] if matches(k)]
        return self.closure(kernel) if kernel else self.dead

    def opaque_node(self, position: int) -> Node:
        """The node for ``position`` with an unknown caller: where per-position masks start."""
        node = self._opaque_nodes.get(position)
        if node is None:
            node = self._opaque_nodes[position] = self.closure([(position, OPAQUE_ID)])
        return node

    def live_bytes(self, node: Node) -> list[int]:
        """Bytes that do not kill the parse from ``node``."""
        class_of = self.class_of
        live_cls = {c for c in range(self.a.n_classes) if self.step_class(node, c).id != 0}
        return [b for b in range(256) if class_of[b] in live_cls]
