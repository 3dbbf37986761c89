"""Parser states: Earley item sets over rule automata, hash-consed so that equal states are one object.

An *item* is ``(position, context)``: a place inside one rule's DFA, and what happens when that rule
ends. A *context* is the set of places to return to — ``(position after the call, context of the
caller)`` pairs — so contexts form a graph-structured stack. Contexts are interned by their meaning,
not by where they were created, so ambiguous grammars (``x? x? x? ...``, ``(a | a | aa)*``, left
recursion) keep a state whose size is bounded by the grammar, not by the input.

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

import numpy as np

from halter.grammar.automaton import RuleAutomata


class Node:
    """An interned parser state. ``scan`` items can read bytes, ``tok`` items can read token refs.

    ``scan`` and ``tok`` hold one item per position, sorted by position (``StateSpace._merge``).
    """
    __slots__ = ("id", "scan", "tok", "accepting", "escaped", "next", "mask")

    def __init__(self, nid: int, scan: tuple, tok: tuple, accepting: bool, escaped: bool,
                 unknown: array) -> None:
        self.id = nid
        self.scan = scan            # ((position, context id), ...)
        self.tok = tok              # ((position, context id), ...)
        self.accepting = accepting
        self.escaped = escaped
        self.next = unknown[:]      # byte class -> next node's id (memoised transitions; -1: not yet)
        self.mask = None            # memoised token bitmask (set by the token side)

    @property
    def dead(self) -> bool:
        return self.id == 0

    def __repr__(self) -> str:
        return f"Node({self.id}, items={len(self.scan) + len(self.tok)}, accepting={self.accepting})"


# The two special contexts, and the flags marking the special endings a context may include:
# ``ENDS_ROOT`` (the whole input may end: the BOTTOM context) and ``ESCAPES`` (an unknown caller:
# the OPAQUE context). A context can be the union of several, when items at one position merge.
BOTTOM_ID, OPAQUE_ID = 0, 1
ENDS_ROOT, ESCAPES = 1, 2


def _meaning(flags: int, returns) -> tuple:
    """The interning key of a context by what it does: its flags and the places it returns to."""
    return ("returns", flags, tuple(sorted(set(returns))))


def _same(ref: int) -> int:
    return ref


class StateSpace:
    """Builds, interns and steps parser states for one compiled grammar."""

    def __init__(self, automata: RuleAutomata) -> None:
        self.a = automata
        self.ctx_returns: list[tuple[tuple[int, int], ...]] = [(), ()]   # context id -> ((after, context id), ...)
        self.ctx_flags: list[int] = [ENDS_ROOT, ESCAPES]                 # context id -> ENDS_ROOT | ESCAPES
        self._ctx_table: dict[tuple, int] = {_meaning(ENDS_ROOT, ()): BOTTOM_ID, _meaning(ESCAPES, ()): OPAQUE_ID}
        self._node_table: dict[tuple, Node] = {}
        self.nodes: list[Node] = []
        self._unknown = array("i", [-1]) * automata.n_classes    # a node's transitions, none known yet
        self.dead = self._make_node((), (), False, False)
        self.class_of = automata.class_of
        self._ret_nodes: dict[int, Node] = {}
        self._opaque_nodes: dict[int, Node] = {}
        self._single: dict[tuple[int, int], Node] = {}     # item (position, context) -> its closure
        # a call whose return position is a pure end (the rule can only stop there) is a tail call
        self._tail = [automata.accepting[p] and not automata.has_bytes[p] and not automata.calls[p]
                      and not automata.tokens[p] for p in range(automata.n_positions)]
        self.opaque_ids = np.full(automata.n_positions, -1, dtype=np.int32)   # position -> opaque node id
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
        """The interned node for the Earley closure (predict + complete) of ``kernel`` items.

        Kernel items carry context ids (>= 0); a rule predicted here gets a *local* context, written
        ``~rule`` (< 0) until the closure is done, then interned (``_resolver``).
        """
        a = self.a
        calls, accepting_pos, nullable, start, tail = a.calls, a.accepting, a.nullable, a.start, self._tail
        if len(kernel) == 1:             # common inside a literal: one item that neither calls nor ends
            item = kernel[0]
            d = item[0]
            if not calls[d] and not accepting_pos[d]:
                has_b, has_t = a.has_bytes[d], bool(a.tokens[d])
                if not has_b and not has_t:
                    return self.dead
                item = (item,)
                return self._make_node(item if has_b else (), item if has_t else (), False, False)
        ctx_returns, ctx_flags = self.ctx_returns, self.ctx_flags
        seen: set = set()
        waiting: dict[int, set] = {}     # local ref -> places its rule returns to
        aliases: dict[int, set] = {}     # local ref -> contexts it was tail-called in: it returns where they do
        work = list(kernel)
        root_done = escaped = False
        while work:
            item = work.pop()
            if item in seen:
                continue
            seen.add(item)
            d, ref = item
            for rule, after in calls[d]:
                local = ~rule
                w = waiting.get(local)
                if w is None:
                    w = waiting[local] = set()
                    work.append((start[rule], local))
                ret = (after, ref)
                if tail[after]:
                    aliases.setdefault(local, set()).add(ref)
                    if nullable[rule]:
                        work.append(ret)
                elif ret not in w:
                    w.add(ret)
                    if nullable[rule]:
                        work.append(ret)
            if accepting_pos[d] and ref >= 0:   # (a local ref: an empty match, see nullable)
                flags = ctx_flags[ref]
                if flags:
                    root_done = root_done or bool(flags & ENDS_ROOT)
                    escaped = escaped or bool(flags & ESCAPES)
                work.extend(ctx_returns[ref])
        has_bytes, tokens = a.has_bytes, a.tokens
        scan_raw = [it for it in seen if has_bytes[it[0]]]
        tok_raw = [it for it in seen if tokens[it[0]]]
        if not scan_raw and not tok_raw and not root_done and not escaped:
            return self.dead
        resolve = self._resolver(waiting, aliases, scan_raw, tok_raw)
        scan = self._merge((d, resolve(r)) for d, r in scan_raw)
        tok = self._merge((d, resolve(r)) for d, r in tok_raw)
        return self._make_node(scan, tok, root_done, escaped)

    def union(self, a: Node, b: Node) -> Node:
        """The state holding both ``a``'s and ``b``'s items (one per position, as every node does)."""
        return self._make_node(self._merge(set(a.scan + b.scan)), self._merge(set(a.tok + b.tok)),
                               a.accepting or b.accepting, a.escaped or b.escaped)

    def _merge(self, items) -> tuple:
        """One item per position: items at the same position merge their contexts into a union.

        ``(d, c1)`` and ``(d, c2)`` read the same input and, when the rule ends, return to both; so
        they are ``(d, c1 | c2)``. This keeps a state's size bounded by the grammar's positions even
        for infinitely ambiguous grammars such as ``S ::= S S | "a"``.
        """
        by_pos: dict[int, list[int]] = {}
        for d, c in items:
            by_pos.setdefault(d, []).append(c)
        out = []
        for d in sorted(by_pos):
            ctxs = by_pos[d]
            out.append((d, ctxs[0] if len(ctxs) == 1 else self._union(ctxs)))
        return tuple(out)

    def _union(self, ctxs: list[int]) -> int:
        flags, returns = 0, set()
        for c in ctxs:
            flags |= self.ctx_flags[c]
            returns.update(self.ctx_returns[c])
        return self._by_meaning(flags, returns)

    def _by_meaning(self, flags: int, returns) -> int:
        """The context that returns to ``returns`` (real contexts) with ``flags``, made if new."""
        key = _meaning(flags, returns)
        ctx = self._ctx_table.get(key)
        if ctx is None:
            ctx = self._ctx_table[key] = self._new_ctx(key[2], flags)
        return ctx

    def _resolver(self, waiting: dict[int, set], aliases: dict[int, set], scan_raw: list, tok_raw: list):
        """Intern the local contexts the kept items need; return ref -> context id.

        A rule's context is where it returns: the ``waiting`` places, plus — for each context it
        was tail-called in (``aliases``: the call was the caller's last step) — wherever that one
        returns, so loops written as right recursion (``items ::= "," item items | "]"``) keep one
        context instead of growing the stack by a level per round.
        """
        if not aliases:                  # the common case: one local rule, returning to real contexts
            local = {r for _, r in scan_raw if r < 0}
            local.update(r for _, r in tok_raw if r < 0)
            if not local:
                return _same
            if len(local) == 1:
                (r,) = local
                returns = waiting[r]
                if all(ref >= 0 for _, ref in returns):
                    sig = tuple(sorted(returns))
                    key = (r, ((r, (0, sig)),))          # the key the general path below makes
                    ctx = self._ctx_table.get(key)
                    if ctx is None:
                        ctx = self._ctx_table[key] = self._new_ctx(sig, 0)
                    return lambda ref: ctx if ref < 0 else ref
        ctx_returns, ctx_flags = self.ctx_returns, self.ctx_flags
        needed: list[int] = []
        seen_rules: set[int] = set()
        eff: dict[int, set] = {}
        eff_flags: dict[int, int] = {}
        sole: dict[int, int] = {}
        stack = [r for _, r in scan_raw if r < 0] + [r for _, r in tok_raw if r < 0]
        while stack:
            r = stack.pop()
            if r in seen_rules:
                continue
            seen_rules.add(r)
            needed.append(r)
            returns, flags = set(waiting[r]), 0
            if r in aliases:                   # follow tail calls through local rules, then to real contexts
                done, todo, real = {r}, list(aliases[r]), set()
                while todo:
                    x = todo.pop()
                    if x < 0:
                        if x not in done:
                            done.add(x)
                            returns.update(waiting[x])
                            todo.extend(aliases.get(x, ()))
                    elif x not in real:
                        real.add(x)
                        returns.update(ctx_returns[x])
                        flags |= ctx_flags[x]
                if len(real) == 1 and all(not waiting[x] for x in done):
                    sole[r] = next(iter(real))  # only ever tail-called: it returns where its caller does
            eff[r], eff_flags[r] = returns, flags
            stack.extend(ref for _, ref in returns if ref < 0)
        if not needed:
            return _same
        local_sig = {r: (eff_flags[r], tuple(sorted(eff[r]))) for r in needed}
        resolved: dict[int, int] = {}
        fresh: list[int] = []
        for r in needed:
            if r in sole:
                resolved[r] = sole[r]
                continue
            if r in aliases and all(ref >= 0 for _, ref in eff[r]):
                resolved[r] = self._by_meaning(eff_flags[r], eff[r])
                continue
            reach, stack2 = set(), [r]
            while stack2:
                x = stack2.pop()
                if x in reach:
                    continue
                reach.add(x)
                stack2.extend(ref for _, ref in eff[x] if ref < 0)
            key = (r, tuple(sorted([(x, local_sig[x]) for x in reach])))
            ctx = self._ctx_table.get(key)
            if ctx is None:
                ctx = self._ctx_table[key] = self._new_ctx((), eff_flags[r])
                fresh.append(r)
            resolved[r] = ctx
        for r in fresh:
            ctx_returns[resolved[r]] = tuple(sorted((after, resolved[ref] if ref < 0 else ref) for after, ref in eff[r]))
        return lambda ref: resolved[ref] if ref < 0 else ref

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
            self.opaque_ids[position] = node.id
        return node

    def return_node(self, ctx: int) -> Node:
        """The node right after a rule called in context ``ctx`` ends (its callers advanced)."""
        node = self._ret_nodes.get(ctx)
        if node is None:
            returns = self.ctx_returns[ctx]
            node = self.closure(list(returns)) if returns else self.dead
            self._ret_nodes[ctx] = node
        return node

    def live_bytes(self, node: Node) -> list[int]:
        """Bytes that do not kill the parse from ``node``."""
        class_of = self.class_of
        live_cls = {c for c in range(self.a.n_classes) if self.step_class(node, c).id != 0}
        return [b for b in range(256) if class_of[b] in live_cls]
