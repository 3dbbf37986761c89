"""The token trie: every distinct token byte string, as flat numpy arrays walked one level at a time.

Rows are the distinct non-empty token byte strings in sorted order; trie nodes are numbered level by
level (all depth-1 nodes, then depth-2, ...), and within a level in row order, so the children of a
node are contiguous and the rows under a node are a contiguous range ``[row_lo, row_hi)``.
Everything is built with numpy operations per level, never a Python loop over tokens per level.
"""
from __future__ import annotations

import numpy as np


class TokenTrie:
    """Flat trie over the text tokens of a vocabulary (special, end-of-generation and empty ones left out)."""

    def __init__(self, token_bytes: list[bytes], include: np.ndarray) -> None:
        n_vocab = len(token_bytes)
        ids = [i for i in np.flatnonzero(include) if token_bytes[i]]
        uniq = sorted({token_bytes[i] for i in ids})
        self.n_vocab = n_vocab
        self.n_rows = len(uniq)
        row_index = {b: r for r, b in enumerate(uniq)}
        self.row_of_token = np.full(n_vocab, -1, dtype=np.int64)
        for i in ids:
            self.row_of_token[i] = row_index[token_bytes[i]]
        lens = np.fromiter((len(b) for b in uniq), dtype=np.int64, count=len(uniq))
        self.row_len = lens
        self.row_off = np.zeros(len(uniq) + 1, dtype=np.int64)
        np.cumsum(lens, out=self.row_off[1:])
        self.flat = np.frombuffer(b"".join(uniq), dtype=np.uint8)
        self._build_levels()

    def _build_levels(self) -> None:
        lens, n = self.row_len, self.n_rows
        max_len = int(lens.max()) if n else 0
        parents, bytes_, lo_list, hi_list, depth_list = [], [], [], [], []
        self.level_start = [0]
        node_of_row = np.zeros(n, dtype=np.int64) - 1      # node of each row at the previous depth
        same = np.zeros(n, dtype=bool)                      # row shares its prefix with the row before
        total = 0
        self.row_end_node = np.full(n, -1, dtype=np.int64)
        for j in range(max_len):
            active = np.flatnonzero(lens > j)
            col = self.flat[self.row_off[active] + j]
            if j == 0:
                same_a = np.ones(len(active), dtype=bool)
            else:
                prev_ok = np.zeros(len(active), dtype=bool)
                prev_ok[1:] = active[:-1] == active[1:] - 1      # row before is active too
                same_a = same[active] & prev_ok
            same_a[1:] &= col[1:] == col[:-1]
            same_a[0] = False
            same[:] = False
            same[active] = same_a
            starts = np.flatnonzero(~same_a)
            run_id = np.cumsum(~same_a) - 1
            nodes = total + run_id
            n_new = len(starts)
            parents.append(node_of_row[active[starts]] if j > 0 else np.full(n_new, -1, dtype=np.int64))
            bytes_.append(col[starts])
            lo_list.append(active[starts])
            ends = np.append(starts[1:], len(active)) - 1
            hi_list.append(active[ends] + 1)
            depth_list.append(np.full(n_new, j + 1, dtype=np.int64))
            node_of_row[:] = -1
            node_of_row[active] = nodes
            ending = active[lens[active] == j + 1]
            self.row_end_node[ending] = node_of_row[ending]
            total += n_new
            self.level_start.append(total)
        cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dtype=dt))
        self.parent = cat(parents, np.int64)
        self.byte = cat(bytes_, np.uint8)
        self.row_lo = cat(lo_list, np.int64)
        self.row_hi = cat(hi_list, np.int64)
        self.depth = cat(depth_list, np.int64)
        self.n_nodes = total
        self.node_row = np.full(total, -1, dtype=np.int64)       # the row ending at each node, if any
        has_end = self.row_end_node >= 0
        self.node_row[self.row_end_node[has_end]] = np.flatnonzero(has_end)
        # children of each node: contiguous in the next level
        self.child_lo = np.zeros(total, dtype=np.int64)
        self.child_hi = np.zeros(total, dtype=np.int64)
        if total:
            has_parent = self.parent >= 0
            kids = np.flatnonzero(has_parent)
            par = self.parent[kids]
            # kids are sorted by parent within each level, so first/last occurrences give the ranges
            first = np.ones(len(kids), dtype=bool)
            first[1:] = par[1:] != par[:-1]
            last = np.ones(len(kids), dtype=bool)
            last[:-1] = par[1:] != par[:-1]
            self.child_lo[par[first]] = kids[first]
            self.child_hi[par[last]] = kids[last] + 1

    _ARRAYS = ("row_of_token", "row_len", "row_off", "flat", "parent", "byte", "row_lo", "row_hi", "depth",
               "child_lo", "child_hi", "row_end_node", "node_row", "level_start")

    def save(self, path) -> None:
        """Write the trie's arrays to an ``.npz`` file."""
        with open(path, "wb") as f:
            np.savez(f, **{k: np.asarray(getattr(self, k)) for k in self._ARRAYS})

    @classmethod
    def load(cls, path) -> "TokenTrie":
        t = cls.__new__(cls)
        with np.load(path) as z:
            for k in cls._ARRAYS:
                setattr(t, k, z[k])
        t.level_start = t.level_start.tolist()
        t.n_vocab, t.n_rows, t.n_nodes = len(t.row_of_token), len(t.row_len), len(t.parent)
        return t

    def children_of(self, nodes: np.ndarray) -> np.ndarray:
        """All children of ``nodes`` (a sorted array), as one array."""
        lo, hi = self.child_lo[nodes], self.child_hi[nodes]
        counts = hi - lo
        total = int(counts.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64)
        starts = np.repeat(lo - np.cumsum(counts) + counts, counts)
        return starts + np.arange(total, dtype=np.int64)

    def children_with_bytes(self, nodes: np.ndarray, byte_values) -> np.ndarray:
        """The children of ``nodes`` whose byte is one of ``byte_values`` (sorted), as one sorted array.

        Nodes are numbered level by level with siblings in byte order, so ``(parent, byte)`` is sorted
        over all nodes and each wanted child is one binary search away.
        """
        bv = np.asarray(byte_values, dtype=np.int64)
        nodes = np.asarray(nodes, dtype=np.int64)
        if len(nodes) > 256 and (nodes[1:] >= nodes[:-1]).all():
            on_bytes = [self.nodes_on_byte(int(b)) for b in bv.tolist()]
            if sum(len(k) for k in on_bytes) < len(nodes):
                # many nodes (a position that may end after every character): look the nodes on
                # the wanted bytes up among them, not the other way round
                hits = []
                for kids in on_bytes:
                    par = self.parent[kids]
                    at = np.minimum(np.searchsorted(nodes, par), len(nodes) - 1)
                    hits.append(kids[nodes[at] == par])
                return np.sort(np.concatenate(hits)) if len(hits) > 1 else hits[0]
        n_kids = int((self.child_hi[nodes] - self.child_lo[nodes]).sum())
        if n_kids <= 8 * len(nodes) * len(bv):
            # fewer children than binary searches would cost: take them all, keep the wanted bytes
            kids = self.children_of(nodes)
            wanted = np.zeros(256, dtype=bool)
            wanted[bv] = True
            kids = kids[wanted[self.byte[kids]]]
            return kids if (kids[1:] > kids[:-1]).all() else np.sort(kids)
        if not hasattr(self, "_parent_byte"):
            self._parent_byte = (self.parent + 1) * 256 + self.byte
        want = ((np.asarray(nodes, dtype=np.int64) + 1) * 256)[:, None] + bv[None, :]
        want = want.ravel()
        at = np.searchsorted(self._parent_byte, want)
        at = np.minimum(at, len(self._parent_byte) - 1)
        hit = at[self._parent_byte[at] == want]
        return np.sort(hit)

    def nodes_on_byte(self, b: int) -> np.ndarray:
        """The trie nodes whose last byte is ``b``, sorted (so their parents are sorted too: nodes
        are numbered level by level, and within a level by parent). Made once per byte."""
        index = self.__dict__.setdefault("_on_byte", {})
        got = index.get(b)
        if got is None:
            got = index[b] = np.flatnonzero(self.byte == b)
        return got

    def tokens_with_byte(self, b: int) -> np.ndarray:
        """Packed bits (uint32 words) of the tokens whose bytes contain byte ``b``: the rows below
        the nodes on ``b`` (``nodes_on_byte``; each node's rows are one range), made once per byte."""
        index = self.__dict__.setdefault("_with_byte", {})
        got = index.get(b)
        if got is None:
            nodes = self.nodes_on_byte(b)
            edges = np.zeros(self.n_rows + 1, dtype=np.int64)        # +1 where a range starts, -1 past it
            np.add.at(edges, self.row_lo[nodes], 1)
            np.add.at(edges, self.row_hi[nodes], -1)
            got = index[b] = self.rows_to_bits(np.flatnonzero(np.cumsum(edges[:-1]) > 0)).astype(np.uint32)
        return got

    def prefix_tokens(self, data: bytes) -> list[tuple[int, int]]:
        """(length, token id) of every token that spells a beginning of ``data``, shortest first
        (for a spelling shared by several tokens, the lowest id): one walk down the trie."""
        if not hasattr(self, "_row_first"):
            self.tokens_of_rows(np.zeros(0, dtype=np.int64))
        out = []
        lo, hi = self.level_start[0], (self.level_start[1] if len(self.level_start) > 1 else 0)
        for k, b in enumerate(data):
            at = lo + int(np.searchsorted(self.byte[lo:hi], b))
            if at >= hi or self.byte[at] != b:
                break
            r = int(self.node_row[at])
            if r >= 0:
                out.append((k + 1, int(self._tok_sorted[self._row_first[r]])))
            lo, hi = int(self.child_lo[at]), int(self.child_hi[at])
            if hi <= lo:
                break
        return out

    def tokens_of_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, index into ``rows`` of each) for rows given by index: duplicates expand."""
        if not hasattr(self, "_row_first"):
            in_trie = np.flatnonzero(self.row_of_token >= 0)
            order = np.argsort(self.row_of_token[in_trie], kind="stable")
            self._tok_sorted = in_trie[order]                   # token ids grouped by row
            by_row = self.row_of_token[self._tok_sorted]
            self._row_first = np.searchsorted(by_row, np.arange(self.n_rows))
            self._row_count = np.searchsorted(by_row, np.arange(self.n_rows), side="right") - self._row_first
        counts = self._row_count[rows]
        idx = np.repeat(self._row_first[rows] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
        return self._tok_sorted[idx], np.repeat(np.arange(len(rows)), counts)

    def rows_to_bits(self, rows: np.ndarray) -> np.ndarray:
        """Packed token bitmask (uint32 words, bit i of word j = token 32j+i) of rows given by index."""
        n_words = (self.n_vocab + 31) // 32
        mask = np.zeros(n_words * 32, dtype=bool)
        mask[self.tokens_of_rows(rows)[0]] = True
        return np.packbits(mask, bitorder="little").view("<u4")
