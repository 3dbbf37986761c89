"""Per-state token masks at run time, assembled from per-position tables and memoised.

The mask of a parser state is the OR, over its items ``(position d, context c)``, of

* ``acc[d]``: tokens that stay inside ``d``'s rule (precomputed per position, ``compiled.py``);
* if ``d``'s rule may end right here: the mask of the caller's continuation ``ret(c)``;
* the tokens below ``d``'s *escape points* (trie nodes where the rule ends mid-token) whose rest
  can be read from ``ret(c)``: ``suffix_bits(N, ret(c))`` for that set of trie nodes ``N``.

``suffix_bits(N, E)`` is split the same way, which is what keeps cold states cheap: for each item
``(d', c')`` of ``E``, the rows below ``N`` whose rest stays inside ``d'``'s rule depend only on
``(N, d')`` — a walk from the opaque node of ``d'``, memoised for good — and only the rows that
escape ``d'``'s rule again are carried on to ``ret(c')``. Contexts change with every nesting level;
positions repeat, so after a short warm-up a new state costs a few ORs of packed words.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.masks import walk_subtrees
from halter.grammar.parser_state import Node

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar


class MaskAssembler:
    """Memoised mask computation for one compiled grammar (one vocabulary)."""

    def __init__(self, cg: "CompiledGrammar") -> None:
        self.cg = cg
        self.space = cg.space
        self.zeros = np.zeros(cg.n_words, np.uint32)
        self.node_memo: dict[int, np.ndarray] = {}
        self._esc_memo: dict[tuple[int, int], np.ndarray] = {}
        self._suffix_memo: dict[tuple[int, int], np.ndarray] = {}
        self._walk_memo: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        self._node_sets: list[np.ndarray] = []
        self._node_set_ids: dict[bytes, int] = {}
        self._position_sets: dict[int, int] = {}
        self._in_progress: set = set()
        self._tainted = False

    # -- entry point -------------------------------------------------------------------------
    def node_bits(self, node: Node) -> np.ndarray:
        """The packed mask (uint32 words) of tokens allowed from ``node``."""
        bits = self.node_memo.get(node.id)
        if bits is not None:
            return bits
        outer = not self._in_progress
        if outer:
            self._tainted = False
        self._in_progress.add(node.id)
        try:
            bits = self._compute(node)
        finally:
            self._in_progress.discard(node.id)
        if outer or not self._tainted:
            self.node_memo[node.id] = bits
        return bits

    def _compute(self, node: Node) -> np.ndarray:
        cg, a = self.cg, self.space.a
        ds = [d for d, _ in node.scan]
        bits = np.bitwise_or.reduce(cg.acc_bits[ds], axis=0) if ds else self.zeros
        for d, ctx in node.scan:
            if ctx.returns and (a.accepting[d] or cg.esc_start[d + 1] > cg.esc_start[d]):
                bits = bits | self._escape_bits(d, ctx)
        for d, _ctx in node.tok:
            for k, _t in a.tokens[d]:
                bits = bits | cg.token_ref_bits[k]
        if node.accepting:
            bits = bits | cg.eog_bits
        return bits

    # -- escapes -----------------------------------------------------------------------------
    def _escape_bits(self, d: int, ctx) -> np.ndarray:
        key = (d, ctx.id)
        bits = self._esc_memo.get(key)
        if bits is not None:
            return bits
        ret = self.space.return_node(ctx)
        bits = self.zeros
        if ret.id != 0:
            if self.space.a.accepting[d]:
                if ret.id in self._in_progress:
                    self._tainted = True             # a cycle: its share arrives through the outer call
                else:
                    bits = bits | self.node_bits(ret)
            n_id = self._position_set(d)
            if n_id >= 0:
                bits = bits | self._suffix_bits(n_id, ret)
        if not self._tainted:
            self._esc_memo[key] = bits
        return bits

    def _suffix_bits(self, n_id: int, start: Node) -> np.ndarray:
        """Tokens below the trie nodes of set ``n_id`` whose rest can be read from ``start``."""
        key = (n_id, start.id)
        bits = self._suffix_memo.get(key)
        if bits is not None:
            return bits
        if key in self._in_progress:
            self._tainted = True
            return self.zeros
        self._in_progress.add(key)
        try:
            bits = self.zeros
            accepting = self.space.a.accepting
            for d2, c2 in start.scan:
                inside, n2_id = self._walk(n_id, d2)
                bits = bits | inside
                if not c2.returns or (n2_id < 0 and not accepting[d2]):
                    continue
                ret = self.space.return_node(c2)
                if ret.id == 0:
                    continue
                if n2_id >= 0:
                    bits = bits | self._suffix_bits(n2_id, ret)
                if accepting[d2]:
                    bits = bits | self._suffix_bits(n_id, ret)
        finally:
            self._in_progress.discard(key)
        if not self._tainted:
            self._suffix_memo[key] = bits
        return bits

    def _walk(self, n_id: int, d: int) -> tuple[np.ndarray, int]:
        """(rows below node set ``n_id`` read wholly inside ``d``'s rule, as bits; escape node set)."""
        key = (n_id, d)
        hit = self._walk_memo.get(key)
        if hit is None:
            cg = self.cg
            rows, esc = walk_subtrees(cg.table, cg.trie, self.space.opaque_node(d), self._node_sets[n_id],
                                      want_escapes=True)
            hit = self._walk_memo[key] = (cg.trie.rows_to_bits(rows), self._intern(esc))
        return hit

    # -- trie node sets ----------------------------------------------------------------------
    def _intern(self, nodes: np.ndarray) -> int:
        if not len(nodes):
            return -1
        nodes = np.unique(nodes)
        key = nodes.tobytes()
        n_id = self._node_set_ids.get(key)
        if n_id is None:
            n_id = self._node_set_ids[key] = len(self._node_sets)
            self._node_sets.append(nodes)
        return n_id

    def _position_set(self, d: int) -> int:
        n_id = self._position_sets.get(d)
        if n_id is None:
            cg = self.cg
            n_id = self._position_sets[d] = self._intern(cg.esc_nodes[cg.esc_start[d]:cg.esc_start[d + 1]])
        return n_id
