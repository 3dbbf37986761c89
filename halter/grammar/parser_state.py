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

A context is an int id into two tables of the ``StateSpace`` (``contexts.ContextTables``, which also
makes substitutions and unions): ``ctx_returns`` (its return pairs) and
``ctx_flags``. Items, a state's item tuples and its interning key are then tuples of ints, which
Python's cyclic garbage collector stops tracking: a state costs the collector its ``Node`` and
its row view, however many items and contexts it holds (see tests/test_state_space_gc.py).

A *node* (``Node``) is a whole parser state: the items that can still read a byte or a token, plus
two flags: ``accepting`` (the root may end here) and ``escaped`` (a rule started with the special
``OPAQUE`` context has ended here: used to precompute token masks per position without knowing the
stack). Nodes are interned too, so a node is its own canonical key and transitions are memoised per
(node, byte class) in one table, ``transitions[node id, byte class]``, the only memo of them: a
node's ``next`` is a view of its row (once warm, reading a byte is one lookup: indexing the whole
table by ``id * n_classes + class`` costs warm byte stepping a third of its speed), and the trie
walks read the table as a 2-D array (``transitions.py``).
"""
from __future__ import annotations

import threading

import numpy as np

from halter.grammar.automaton import RuleAutomata
from halter import limits
from halter.errors import LimitError
from halter.grammar.contexts import BOTTOM_ID, ENDS_ROOT, ESCAPES, OPAQUE_ID, WORK, ContextTables
from halter.grammar.earley import earley_closure, opaque_by_calls

__all__ = ["BOTTOM_ID", "ENDS_ROOT", "ESCAPES", "OPAQUE_ID", "Node", "StateSpace"]


class Node:
    """An interned parser state. ``scan`` items can read bytes, ``tok`` items can read token refs.

    ``scan`` and ``tok`` hold one item per position, sorted by position (``StateSpace.merge_items``).
    """
    __slots__ = ("id", "scan", "tok", "accepting", "escaped", "next")

    def __init__(self, nid: int, scan: tuple, tok: tuple, accepting: bool, escaped: bool,
                 row: memoryview) -> None:
        self.id = nid
        self.scan = scan            # ((position, context id), ...)
        self.tok = tok              # ((position, context id), ...)
        self.accepting = accepting
        self.escaped = escaped
        #: byte class -> next node's id (-1: not known yet): this node's row of ``StateSpace.transitions``
        self.next = row

    @property
    def dead(self) -> bool:
        return self.id == 0

    def __repr__(self) -> str:
        return f"Node({self.id}, items={len(self.scan) + len(self.tok)}, accepting={self.accepting})"


FIRST_ROWS = 64
"""Rows of the transition table a new state space starts with (it doubles as states are made)."""

MAX_CHAIN = 48
"""Completions chained deeper than this (callers whose rest may be empty) are closed by the Earley walk."""

TEMPLATE_BUDGET = 8
"""New contexts per closure built from opaque nodes, on average, past which a space walks instead."""

TEMPLATE_WARMUP = 64
"""The average is taken over at least this many closures (a few costly ones early do not count)."""


class _TooDeep(Exception):
    """A closure built from opaque nodes met a long or cyclic chain of completions."""


class StateSpace(ContextTables):
    """Builds, interns and steps parser states for one compiled grammar."""

    def __init__(self, automata: RuleAutomata, *, templates: bool = True,
                 template_budget: float | None = TEMPLATE_BUDGET) -> None:
        self.a = automata
        # Every cache below (nodes, contexts, transitions, and the masks of compiled grammars built
        # on this space) is filled under this lock; lookups of what is already known take none.
        self.lock = threading.RLock()
        self._tpl_closures = self._tpl_made = 0   # closures built from opaque nodes, contexts they made
        self.template_budget = template_budget    # None: never switch to the walk (tests)
        self.templates = templates     # build closures from opaque nodes (False: always the Earley walk)
        ContextTables.__init__(self)
        self._node_table: dict[tuple, Node] = {}
        self.nodes: list[Node] = []
        self._new_tables(FIRST_ROWS)
        self.dead = self.intern_node((), (), False, False)
        self.transitions[0] = 0
        self.class_of = automata.class_of
        self._opaque_nodes: dict[int, Node] = {}
        self._single: dict[tuple[int, int], Node] = {}     # item (position, context) -> its closure
        self._kernels: dict[tuple, Node] = {}               # items (2 or more) -> their closure
        self._call_rest: dict[tuple, tuple | bool] = {}   # a position's calls -> its opaque node's other items
        self._ret_items: dict[int, tuple] = {}             # context -> items of what it returns to
        self._ret_open: set[int] = set()                   # contexts whose _return_items is running
        #: position -> True where a call returning there is a tail call (the rule can only stop there)
        self.tail_returns: list[bool] = [automata.accepting[p] and not automata.has_bytes[p]
                                         and not automata.calls[p] and not automata.tokens[p]
                                         for p in range(automata.n_positions)]
        self.initial = self.closure([(automata.start[automata.root], BOTTOM_ID)])

    # -- the transition table ----------------------------------------------------------------
    def _new_tables(self, rows: int) -> None:
        """The one memo of transitions, ``transitions[state id, byte class] -> state id`` (-1: not
        known yet), with what vectorised walks read beside it: ``state_escaped`` and
        ``state_single_pos`` (the state's one position when it is that position with an unknown
        caller, else -1). Each node's ``next`` is a view of its row, which byte stepping reads."""
        old = self.__dict__.get("transitions")
        n_classes = self.a.n_classes
        table = np.full((rows, n_classes), -1, dtype=np.int32)
        escaped = np.zeros(rows, dtype=bool)
        single = np.full(rows, -1, dtype=np.int64)
        if old is not None:
            table[:len(old)] = old
            escaped[:len(old)] = self.state_escaped
            single[:len(old)] = self.state_single_pos
        self.transitions, self.state_escaped, self.state_single_pos = table, escaped, single
        flat = memoryview(table).cast("B").cast("i")
        self._rows = flat
        for node in self.nodes:
            node.next = flat[node.id * n_classes:(node.id + 1) * n_classes]

    def reserve(self, n: int) -> None:
        """Make room for state ids below ``n`` now (so that decoding does not pause to copy the table)."""
        with self.lock:
            if n > len(self.transitions):
                rows = len(self.transitions)
                while rows < n:
                    rows *= 2
                self._new_tables(rows)

    # -- interning ---------------------------------------------------------------------------
    def intern_node(self, scan: tuple, tok: tuple, accepting: bool, escaped: bool) -> Node:
        """The node with these items (merged, as ``merge_items`` gives them) and flags, made if new."""
        key = (scan, tok, accepting, escaped)
        node = self._node_table.get(key)
        if node is None:
            nid = len(self.nodes)
            if nid >= len(self.transitions):
                self.reserve(2 * nid)
            c = self.a.n_classes
            node = Node(nid, scan, tok, accepting, escaped, self._rows[nid * c:(nid + 1) * c])
            if escaped:
                self.state_escaped[nid] = True
            if len(scan) == 1 and scan[0][1] == OPAQUE_ID:
                self.state_single_pos[nid] = scan[0][0]
            self._node_table[key] = node
            self.nodes.append(node)
        return node

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
        with self.lock:
            return self._closure(kernel)

    def _closure(self, kernel) -> Node:
        a = self.a
        if len(kernel) == 1:
            d, c = kernel[0]
            if not a.calls[d] and (not a.accepting[d] or c == OPAQUE_ID):
                # one item that calls nothing: inside a literal, or (an unknown caller) where the rule
                # may end, which escapes and completes nothing known (the Earley walk's answer too)
                has_b, has_t, escaped = a.has_bytes[d], bool(a.tokens[d]), bool(a.accepting[d])
                if not has_b and not has_t and not escaped:
                    return self.dead
                item = (kernel[0],)
                return self.intern_node(item if has_b else (), item if has_t else (), False, escaped)
            if c == OPAQUE_ID and a.calls[d]:
                node = opaque_by_calls(self, d)
                if node is not None:
                    return node
            if c == OPAQUE_ID or not self.templates:
                return earley_closure(self, kernel)
        elif not self.templates or any(c == OPAQUE_ID for _, c in kernel):
            return earley_closure(self, kernel)
        scan: set = set()
        tok: set = set()
        accepting = escaped = False
        n_ctx = len(self.ctx_returns)
        try:
            for d, c in kernel:
                acc, esc = self._instance(d, c, scan, tok, 0)
                accepting, escaped = accepting or acc, escaped or esc
        except _TooDeep:                 # completions chained deeper than MAX_CHAIN, or in a cycle: walk instead
            return earley_closure(self, kernel)
        self._tpl_closures += 1
        if len(self.ctx_returns) != n_ctx:
            self._count_template(len(self.ctx_returns) - n_ctx)
        if not scan and not tok and not accepting and not escaped:
            return self.dead
        return self.intern_node(self.merge_items(scan), self.merge_items(tok), accepting, escaped)

    def _count_template(self, made: int) -> None:
        """Count the ``made`` contexts of a closure built from opaque nodes; past the budget, walk.

        Substitution copies the opaque node's contexts for every caller and merges the copies, which
        costs well under one new context per closure on JSON Schema and the shipped grammars (at most
        0.74 on a sample of JSONSchemaBench), but in heavily ambiguous left-recursive grammars (``root
        ::= "a" | r | ""``, ``r ::= (("b" | root | ""){1,3} (root "(" | root | "") ("c" | r)){1,2}``)
        copies of cyclic contexts pile up: hundreds per closure, growing with the input, where the
        Earley walk, which interns each rule's context by meaning, makes a few. Past
        ``template_budget`` contexts per closure on average (``TEMPLATE_BUDGET``) the space walks
        every closure from then on.
        """
        self._tpl_made += made
        budget = self.template_budget
        if budget is not None and self._tpl_made > budget * max(self._tpl_closures, TEMPLATE_WARMUP):
            self.templates = False

    def _instance(self, d: int, c: int, scan: set, tok: set, depth: int) -> tuple[bool, bool]:
        """Add the items of the closure of ``(d, c)`` to ``scan`` and ``tok``; (accepting, escaped)."""
        o = self._opaque_nodes.get(d)
        if o is None:
            o = self.opaque_node(d)
        subst = self._subst
        WORK.n += len(o.scan) + len(o.tok) + 1
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

    def union(self, a: Node, b: Node) -> Node:
        """The state holding both ``a``'s and ``b``'s items (one per position, as every node does)."""
        with self.lock:
            return self.intern_node(self.merge_items(set(a.scan + b.scan)), self.merge_items(set(a.tok + b.tok)),
                                   a.accepting or b.accepting, a.escaped or b.escaped)

    # -- stepping ----------------------------------------------------------------------------
    def step_class(self, node: Node, cls: int) -> Node:
        """The node after reading one byte of class ``cls`` (memoised)."""
        nid = node.next[cls]
        if nid >= 0:
            return self.nodes[nid]
        with self.lock:
            return self._step_class(node, cls)

    def _step_class(self, node: Node, cls: int) -> Node:
        nid = node.next[cls]             # another thread may have made it meanwhile
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
        elif kernel:                     # several items: states reading alike classes share the kernel
            key = tuple(kernel)
            nxt = self._kernels.get(key)
            if nxt is None:
                nxt = self._kernels[key] = self.closure(kernel)
        else:
            nxt = self.dead
        node.next[cls] = nxt.id
        return nxt

    def step_byte(self, node: Node, byte: int) -> Node:
        nid = node.next[self.class_of[byte]]
        return self.nodes[nid] if nid >= 0 else self.step_class(node, self.class_of[byte])

    def step_bytes(self, node: Node, data: bytes) -> Node:
        """The node after reading ``data``. States met for the first time cost parser work; a call
        may do at most ``Limits.match_work`` units of it per byte of ``data``, plus 16 bytes' worth
        (``LimitError`` past that: highly ambiguous grammars cost more per byte the longer the
        input; other grammars stay under 50 per byte)."""
        class_of, nodes = self.class_of, self.nodes
        budget = -1
        for i, b in enumerate(data):
            nid = node.next[class_of[b]]
            if nid > 0:
                node = nodes[nid]
            elif nid == 0:
                return self.dead
            else:
                if budget < 0:
                    start = WORK.n
                    budget = start + limits.LIMITS.match_work * (len(data) + 16)
                node = self.step_class(node, class_of[b])
                if node.id == 0:
                    return node
                if WORK.n > budget:
                    raise LimitError("match_work", (WORK.n - start) // (len(data) + 16), limits.LIMITS.match_work,
                                     where=f"byte {i} of {len(data)} read in one call",
                                     what="parser work per byte (a highly ambiguous grammar)")
        return node

    def step_token_ref(self, node: Node, matches) -> Node:
        """The node after consuming a whole token through token-reference edges (``matches(k)``)."""
        kernel = [(t, c) for d, c in node.tok for k, t in self.a.tokens[d] if matches(k)]
        return self.closure(kernel) if kernel else self.dead

    def opaque_node(self, position: int) -> Node:
        """The node for ``position`` with an unknown caller: where per-position masks start."""
        node = self._opaque_nodes.get(position)
        if node is None:
            with self.lock:
                node = self._opaque_nodes.get(position)
                if node is None:
                    node = self._opaque_nodes[position] = self.closure([(position, OPAQUE_ID)])
        return node

    def live_bytes(self, node: Node) -> list[int]:
        """Bytes that do not kill the parse from ``node``."""
        class_of = self.class_of
        live_cls = {c for c in range(self.a.n_classes) if self.step_class(node, c).id != 0}
        return [b for b in range(256) if class_of[b] in live_cls]
