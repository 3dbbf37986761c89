"""Per-state token masks at run time, assembled from per-position tables and memoised.

The mask of a parser state is the OR, over its items ``(position d, context c)``, of

* ``acc[d]``: tokens that stay inside ``d``'s rule (precomputed per position, ``compiled.py``);
* the tokens below ``d``'s *escape points* (the set ``N`` of trie nodes where the rule ends
  mid-token) whose rest can be read once the rule has returned to ``c``: ``ctx_bits(N, c)``.

Nothing is added for the caller's continuation where ``d``'s rule may end right here: a state is an
Earley closure, so it already holds the items the caller returns to (completion put them there), and
their own ``acc`` and escapes bring those tokens.

``ctx_bits(N, c)`` never builds the parser state ``c`` returns to. That state is the closure of
``c``'s returns, and what a set of items reads is the union of what each reads; ``(after, c')`` reads
what the *opaque* node of ``after`` reads (a state of the grammar alone, whatever the stack:
``opaque_bits(N, after)``, memoised for good and shared by every context) and, below the points
where ``after``'s rule ends in turn, what ``c'`` returns to. ``opaque_bits`` is split per item of
the opaque node: a walk from the opaque node of each item's position, memoised per ``(N, d')``.
Contexts change with every nesting level; positions repeat, so after a short warm-up a new state
costs a few dictionary lookups and ORs of packed words per escaping item, and only escapes go on up
the stack. The walks themselves go depth-first in Python when the continuation allows few bytes
(``narrow_walk.py``, the usual case below a key's closing quote) and level by level with numpy
otherwise.

Recursion only meets itself on ``ctx_bits`` with the same ``N`` (walks always go deeper), through
rules that end without reading; such a repeat adds nothing new, so it counts as empty and the
results computed while it was open are not memoised for good (``_tainted``). They are kept for the
rest of the one mask (``_scratch``): every part is a union over what a key reaches, so a result
short of what its open ancestors add still leaves the whole mask complete (they add it themselves),
and each key is computed once per mask. Without that, a cyclic grammar (``root ::= x | [a-z]``,
``x ::= root*``) recomputed the same keys along every path: seconds for one mask.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.array_sets import sorted_unique
from halter.grammar.trie_walk import walk_subtrees
from halter.grammar.narrow_walk import MAX_START_NODES, NarrowWalker
from halter.grammar.parser_state import ESCAPES, OPAQUE_ID, Node

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar


class MaskAssembler:
    """Memoised mask computation for one compiled grammar (one vocabulary)."""

    def __init__(self, cg: "CompiledGrammar") -> None:
        self.cg = cg
        self.space = cg.space
        self.zeros = np.zeros(cg.n_words, np.uint32)
        self.node_memo: dict[int, np.ndarray] = {}         # node id -> its mask (read-only, shared)
        self._distinct: dict[bytes, np.ndarray] = {}       # a mask's bytes -> the one array viewing them
        self._esc_memo: dict[tuple[int, int], np.ndarray] = {}
        self._acc_memo: dict[tuple[int, ...], np.ndarray] = {}
        self._opaque_memo: dict[tuple[int, int], tuple] = {}
        self._ctx_memo: dict[tuple[int, int], tuple] = {}
        self._walk_memo: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        self._node_sets: list[np.ndarray] = []
        self._node_set_ids: dict[bytes, int] = {}
        self._position_sets: dict[int, int] = {}
        self._in_progress: set = set()              # _ctx_bits keys being computed
        self._in_progress_nodes: set = set()        # _opaque_bits keys being computed
        self._tainted = False
        self._scratch: dict = {}                     # results of this mask not memoised for good
        self._narrow = NarrowWalker(cg.space, cg.trie)
        self._row_tokens = None

    # -- entry point -------------------------------------------------------------------------
    def node_bits(self, node: Node) -> np.ndarray:
        """The packed mask (uint32 words) of tokens allowed from ``node``."""
        bits = self.node_memo.get(node.id)
        if bits is None:
            # one mask at a time per state space: ``_tainted``, ``_scratch`` and the in-progress sets
            # belong to the mask being computed, and the walks fill shared tables
            with self.space.lock:
                bits = self.node_memo.get(node.id)
                if bits is None:
                    self._tainted = False       # set by a cycle among suffixes: their parts are not memoised
                    try:
                        bits = self.node_memo[node.id] = self._shared(self._compute(node))
                    finally:
                        self._scratch.clear()
        return bits

    def _shared(self, bits: np.ndarray) -> np.ndarray:
        """One read-only copy per distinct mask: states share masks (a schema's states ~3.5 to one),
        and the fewer distinct masks a generation copies out, the more of them stay in the CPU's
        caches. The array is a view of its own bytes, which are the key: no second copy."""
        key = bits.tobytes()
        shared = self._distinct.get(key)
        if shared is None:
            shared = self._distinct[key] = np.frombuffer(key, dtype=np.uint32)
        return shared

    def _compute(self, node: Node) -> np.ndarray:
        cg, a, zeros = self.cg, self.space.a, self.zeros
        scan = node.scan
        acc_of, esc_of = cg.pos_acc, cg.pos_esc
        for d, _ in scan:
            if acc_of[d] is None:                # a position met for the first time: build its tables
                cg.ensure_positions([d for d, _ in scan])
                break
        if len(scan) == 1:
            out = acc_of[scan[0][0]].copy()
        elif scan:
            ds = tuple(d for d, _ in scan)           # states that differ by their contexts alone share it
            acc = self._acc_memo.get(ds)
            if acc is None:
                if len(ds) <= 4:                     # a few rows: ORs in place beat a gather and reduce
                    acc = acc_of[ds[0]] | acc_of[ds[1]]
                    for d in ds[2:]:
                        np.bitwise_or(acc, acc_of[d], out=acc)
                else:
                    acc = np.bitwise_or.reduce([acc_of[d] for d in ds], axis=0)
                self._acc_memo[ds] = acc
            out = acc.copy()
        else:
            out = zeros.copy()
        ctx_returns = self.space.ctx_returns
        covered = self._covered(scan) if len(scan) > 1 else ()
        for d, ctx in scan:
            if len(esc_of[d]) and ctx_returns[ctx] and (d, ctx) not in covered:
                bits = self._escape_bits(d, ctx)
                if bits is not zeros:
                    np.bitwise_or(out, bits, out=out)
        for d, _ctx in node.tok:
            for k, _t in a.tokens[d]:
                np.bitwise_or(out, cg.token_ref_bits[k], out=out)
        if node.accepting:
            np.bitwise_or(out, cg.eog_bits, out=out)
        return out

    def _covered(self, scan: tuple) -> set:
        """Items of ``scan`` whose escapes add nothing: those the closure of another item ``(d, c)``
        put there. Such an item is ``(x, co)`` of ``d``'s opaque node with ``c`` substituted for the
        unknown caller; the walk that built ``d``'s tables went through it (its tokens are in
        ``acc[d]``, and where it leads out of ``d``'s rule is in ``d``'s escapes), so the escapes of
        ``(d, c)`` bring all it would. (A bounded repeat whose body is called as a rule makes one
        such item per count: ``repeats.py``.) Only contexts already made are looked up."""
        at = dict(scan)                      # position -> its item's context (one item per position)
        opaque = self.space._opaque_nodes
        by: dict = {}                        # position -> [(covering item, the context it gives), ...]
        for d, c in scan:
            o = opaque.get(d)
            if o is None:
                continue
            for x, co in o.scan:
                if x != d and x in at:
                    sub = self._subst_returns(co, c)
                    if sub is not None:
                        by.setdefault(x, []).append((d, sub))
        # an item merges the contexts of every item whose closure reached its position: it is covered
        # when each of its returns comes from one of them that is itself computed in full. Decided
        # in rounds from the items nothing covers; items left undecided (covering each other in a
        # cycle) are computed.
        returns, flags = self.space.ctx_returns, self.space.ctx_flags
        out: set = set()
        kept = {d for d, _ in scan if d not in by}
        undecided = set(by)
        while undecided:
            progress = False
            for x in list(undecided):
                have = set()
                for d, sub in by[x]:
                    if d in kept:
                        have.update(sub)
                if have and have.issuperset(returns[at[x]]) and not flags[at[x]] & ESCAPES:
                    out.add((x, at[x]))
                    undecided.discard(x)
                    progress = True
                elif all(d in kept or (d, at[d]) in out for d, _ in by[x]):
                    kept.add(x)                      # everything that could cover it is decided
                    undecided.discard(x)
                    progress = True
            if not progress:
                break
        return out

    def _subst_returns(self, co: int, c: int):
        """The returns ``co`` (a context of an opaque node) has with ``c`` for its unknown caller,
        made of contexts that exist already; None where one does not."""
        returns, flags = self.space.ctx_returns, self.space.ctx_flags
        if co == OPAQUE_ID:
            return returns[c]
        memo = self.space._subst_memo
        out = []
        for after, c2 in returns[co]:
            if c2 == OPAQUE_ID:
                out.append((after, c))
            else:
                sub = c2 if c == OPAQUE_ID else memo.get((c2, c))
                if sub is None:
                    return None
                out.append((after, sub))
        if flags[co] & ESCAPES:
            out.extend(returns[c])
        return out

    # -- escapes -----------------------------------------------------------------------------
    def _escape_bits(self, d: int, ctx: int) -> np.ndarray:
        """Tokens that end ``d``'s rule mid-token and go on in the caller ``ctx`` returns to.

        Nothing is added for the caller's continuation where the rule may end right here (``d``
        accepting): a node is an Earley closure, so it already holds the items ``ctx`` returns to
        (completion added them), and their tokens come from those items.
        """
        key = (d, ctx)
        bits = self._esc_memo.get(key)
        if bits is not None:
            return bits
        n_id = self._position_set(d)
        bits = self._ctx_bits(n_id, ctx)[0] if n_id >= 0 else self.zeros
        if not self._tainted:
            self._esc_memo[key] = bits
        return bits

    def _or(self, parts: list) -> np.ndarray:
        """OR of packed masks, skipping the shared all-zero mask (returned itself when nothing is left)."""
        zeros = self.zeros
        parts = [p for p in parts if p is not zeros]
        if not parts:
            return zeros
        if len(parts) == 1:
            return parts[0]
        return np.bitwise_or.reduce(parts, axis=0) if len(parts) > 2 else parts[0] | parts[1]

    def _ctx_bits(self, n_id: int, ctx: int) -> tuple[np.ndarray, tuple[int, ...]]:
        """(tokens below the trie nodes of set ``n_id`` whose rest can be read once a rule called in
        ``ctx`` has ended there; the node sets where the OPAQUE caller is reached on the way).

        The state after the rule ends is the closure of the returns of ``ctx``; what a set of items reads
        is the union of what each reads, and ``(after, c)`` reads what the opaque node of
        ``after`` reads (``_opaque_bits``, memoised per ``(n_id, after)`` and shared by every
        context) and then, below the points where ``after``'s rule ends, what ``c`` returns to. So
        no parser state is built for ``ctx``, and only the escapes go on up the stack.
        """
        key = (n_id, ctx)
        hit = self._ctx_memo.get(key)
        if hit is None and self._tainted:
            hit = self._scratch.get(("c", key))
        if hit is not None:
            return hit
        if key in self._in_progress:
            self._tainted = True
            return self.zeros, ()
        self._in_progress.add(key)
        try:
            space = self.space
            parts, escs = [], ({n_id} if space.ctx_flags[ctx] & ESCAPES else set())
            opaque_node = space.opaque_node
            for after, c in space.ctx_returns[ctx]:
                bits, ends = self._opaque_bits(n_id, opaque_node(after))
                parts.append(bits)
                for e in ends:
                    bits, up = self._ctx_bits(e, c)
                    parts.append(bits)
                    escs.update(up)
            hit = (self._or(parts), tuple(sorted(escs)) if escs else ())
        finally:
            self._in_progress.discard(key)
        if not self._tainted:
            self._ctx_memo[key] = hit
        else:
            self._scratch[("c", key)] = hit
        return hit

    def _opaque_bits(self, n_id: int, start: Node) -> tuple[np.ndarray, tuple[int, ...]]:
        """(tokens below node set ``n_id`` readable from ``start``, a node whose bottom context is
        OPAQUE; the node sets where that OPAQUE caller is reached).

        Split per item ``(d, c)`` of ``start``: the walk from ``d``'s opaque node is memoised per
        ``(n_id, d)``, and below its escapes the walk goes on from what ``c`` returns to.
        """
        key = (n_id, start.id)
        hit = self._opaque_memo.get(key)
        if hit is None and self._tainted:
            hit = self._scratch.get(("o", key))
        if hit is not None:
            return hit
        if key in self._in_progress_nodes:
            self._tainted = True
            return self.zeros, ()
        self._in_progress_nodes.add(key)
        try:
            parts, escs = [], ({n_id} if start.escaped else set())
            covered = self._covered(start.scan) if len(start.scan) > 1 else ()
            for d2, c2 in start.scan:
                if (d2, c2) in covered:
                    continue
                inside, n2_id = self._walk(n_id, d2)
                parts.append(inside)
                if n2_id >= 0:
                    bits, up = self._ctx_bits(n2_id, c2)
                    parts.append(bits)
                    escs.update(up)
            hit = (self._or(parts), tuple(sorted(escs)) if escs else ())
        finally:
            self._in_progress_nodes.discard(key)
        if not self._tainted:
            self._opaque_memo[key] = hit
        else:
            self._scratch[("o", key)] = hit
        return hit

    def _walk(self, n_id: int, d: int) -> tuple[np.ndarray, int]:
        """(rows below node set ``n_id`` read wholly inside ``d``'s rule, as bits; escape node set)."""
        key = (n_id, d)
        hit = self._walk_memo.get(key)
        if hit is None:
            cg = self.cg
            start, nodes = self.space.opaque_node(d), self._node_sets[n_id]
            node_list = nodes.tolist() if len(nodes) <= MAX_START_NODES else None
            if start.id == 0:
                rows, esc = [], []
            elif node_list is not None and self._narrow.is_narrow(start, node_list):
                rows, esc = self._narrow.walk(start, node_list, want_escapes=True)
            else:
                live = self._narrow.live_bytes(start)
                first = live if len(live) < 64 else None
                got = cg.kernel().walk_below(start, nodes, first) if cg.kernel() is not None else None
                if got is not None:
                    hit = self._walk_memo[key] = (self._shared(got[0]), self._intern(got[1]))
                    return hit
                rows, esc = walk_subtrees(cg.table, cg.trie, start, nodes, want_escapes=True, first_bytes=first)
            hit = self._walk_memo[key] = (self._bits_of_rows(rows), self._intern(esc))
        return hit

    def narrow_position_tables(self, start: Node) -> tuple[np.ndarray, np.ndarray] | None:
        """A position's tables (packed tokens, sorted escape points) from a depth-first walk in
        Python where its opaque node ``start`` reads a few bytes (``NarrowWalker.walk_whole``: the
        compiled walk's set-up costs more there), else None."""
        got = self._narrow.walk_whole(start)
        if got is None:
            return None
        rows, esc = got
        return self._bits_of_rows(rows), sorted_unique(np.asarray(esc, dtype=np.int64))

    def _bits_of_rows(self, rows) -> np.ndarray:
        """Packed mask of the tokens spelled by trie ``rows`` (a list or array; may repeat)."""
        if len(rows) == 0:
            return self.zeros
        trie = self.cg.trie
        if len(rows) > 64:
            return trie.rows_to_bits(np.asarray(rows, dtype=np.int64))
        if self._row_tokens is None:
            trie.tokens_of_rows(np.zeros(0, dtype=np.int64))       # builds the row -> tokens index
            self._row_tokens = (memoryview(trie._row_first).cast("B").cast("q"),
                                memoryview(trie._row_count).cast("B").cast("q"),
                                memoryview(trie._tok_sorted).cast("B").cast("q"))
        first, count, toks = self._row_tokens
        words: dict[int, int] = {}
        for r in rows:
            f = first[r]
            for t in toks[f:f + count[r]]:
                words[t >> 5] = words.get(t >> 5, 0) | (1 << (t & 31))
        bits = np.zeros(self.cg.n_words, np.uint32)
        if len(words) <= 16:                    # few words: item by item beats a fancy assignment
            for w, v in words.items():
                bits[w] = v
        else:
            bits[list(words)] = list(words.values())
        return bits

    # -- trie node sets ----------------------------------------------------------------------
    def _intern(self, nodes) -> int:
        """The id of a set of trie nodes (an array or list, may repeat); -1 for the empty set."""
        if not len(nodes):
            return -1
        if len(nodes) <= 256:
            uniq = sorted(set(nodes.tolist() if isinstance(nodes, np.ndarray) else nodes))
            key = tuple(uniq)
        else:
            uniq = np.asarray(nodes, dtype=np.int64)
            if not (uniq[1:] > uniq[:-1]).all():          # usually already sorted and distinct
                uniq = np.sort(uniq)
                uniq = uniq[np.concatenate(([True], uniq[1:] != uniq[:-1]))]
            key = uniq.tobytes()
        n_id = self._node_set_ids.get(key)
        if n_id is None:
            n_id = self._node_set_ids[key] = len(self._node_sets)
            self._node_sets.append(np.asarray(uniq, dtype=np.int64))
        return n_id

    def _position_set(self, d: int) -> int:
        n_id = self._position_sets.get(d)
        if n_id is None:
            n_id = self._position_sets[d] = self._intern(self.cg.pos_esc[d])
        return n_id
