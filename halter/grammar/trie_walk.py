"""Vectorised walks of the token trie from parser states, level by level with numpy.

A position's token tables (``compiled.py``) come from walking every token from the position's
opaque parser state (caller unknown): ``walk_trie_batch`` walks up to ``BATCH`` positions at once and
returns the tokens each accepts and its *escape points* (trie nodes where the position's rule ended
mid-token, so that longer tokens below depend on the caller). ``walk_subtrees`` walks just the
subtrees below given trie nodes, for the run-time masks (``state_masks.py``). Both read transitions
from a ``transitions.TransitionTable``; ``trie_kernel.py`` is the same walk compiled by numba.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.array_sets import sorted_unique
from halter.grammar.parser_state import Node
from halter.grammar.trie import TokenTrie

if TYPE_CHECKING:
    from halter.grammar.transitions import TransitionTable


BATCH = 64
"""Starts walked together by ``walk_trie_batch``: each owns one bit of a uint64 mask."""


def walk_trie_batch(tt: TransitionTable, trie: TokenTrie, starts: list[Node]):
    """Walk every token from each of ``starts`` (opaque nodes, at most ``BATCH``), one trie level at a time.

    The walk advances (trie node, parser state) pairs, each carrying a mask of the starts it came
    from. Pairs that reach the same trie node in the same state are merged, masks ORed, so their
    subtrees are walked once: the starts of one rule mostly fall into the same few states after a
    byte or two (every prefix of a known key, read past the key, is inside the same free string), so
    this walks a fraction of the pairs that one walk per start would.

    Returns ``(rows, row_owners)``: trie rows (tokens) that can be read, with the starts that read
    them as a uint64 mask (a row may come twice, from different states), and ``(esc_nodes,
    esc_owners)``: escape points, trie nodes (with children) where a start position's rule has just
    ended, so that longer tokens below them depend on the caller.
    """
    if len(starts) > BATCH:
        raise ValueError(f"at most {BATCH} starts per batch")
    for node in starts:
        tt.register(node)
    first = np.arange(trie.level_start[0], trie.level_start[1] if trie.n_nodes else 0, dtype=np.int64)
    n_first = len(first)
    level = np.tile(first, len(starts))
    owners = np.repeat(np.left_shift(np.uint64(1), np.arange(len(starts), dtype=np.uint64)), n_first)
    prev_states = np.repeat(np.array([n.id for n in starts], dtype=np.int32), n_first)
    ok_r, ok_m, esc_n, esc_m = [], [], [], []
    while len(level):
        st = tt.step(prev_states, tt.class_of[trie.byte[level]])
        live = st != 0
        level, st, owners = level[live], st[live], owners[live]
        if len(level) > 1:                              # merge equal (trie node, state) pairs
            pick, owners = or_by_key(level * (len(tt.table) + 1) + st, owners)
            level, st = level[pick], st[pick]
        rows = trie.node_row[level]
        ends = rows >= 0
        ok_r.append(rows[ends])
        ok_m.append(owners[ends])
        esc = tt.escaped[st]
        if esc.any():
            en = level[esc]
            keep = trie.child_hi[en] > trie.child_lo[en]
            esc_n.append(en[keep])
            esc_m.append(owners[esc][keep])
        counts = trie.child_hi[level] - trie.child_lo[level]
        if not counts.any():
            break
        prev_states = np.repeat(st, counts)
        owners = np.repeat(owners, counts)
        level = trie.children_of(level)
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt))
    return (cat(ok_r, np.int64), cat(ok_m, np.uint64)), (cat(esc_n, np.int64), cat(esc_m, np.uint64))


def or_by_key(key: np.ndarray, owners: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indices of one entry per distinct ``key``, in key order; each key's ``owners`` ORed).

    ``key`` must be non-empty. A stable sort: keys that are nearly sorted already cost little.
    """
    order = np.argsort(key, kind="stable")
    k = key[order]
    first_of = np.empty(len(k), dtype=bool)
    first_of[0] = True
    np.not_equal(k[1:], k[:-1], out=first_of[1:])
    if first_of.all():
        return order, owners[order]
    at = np.flatnonzero(first_of)
    return order[at], np.bitwise_or.reduceat(owners[order], at)


_T8 = [(np.uint64(7), np.uint64(0x00AA00AA00AA00AA)), (np.uint64(14), np.uint64(0x0000CCCC0000CCCC)),
       (np.uint64(28), np.uint64(0x00000000F0F0F0F0))]


def owners_to_rows(by_token: np.ndarray, n_owners: int) -> np.ndarray:
    """Per-token uint64 owner masks (length a multiple of 32) -> packed token masks per owner.

    Row ``j`` of the result (uint32 words, bit i of word w = token 32w+i) holds the tokens whose
    mask has bit ``j``: a transpose of a bit matrix, done 8x8 bits at a time inside uint64 words
    (three shift-and-mask rounds), which is ~10x faster than unpacking to one byte per bit.
    """
    n = len(by_token)
    cols = by_token.view(np.uint8).reshape(n, 8)          # [token, k]: bits of owners 8k..8k+7
    n_groups = (n_owners + 7) // 8
    out = np.empty((n_groups, 8, n // 8), np.uint8)        # [k, j, 8 tokens]
    for k in range(n_groups):
        x = np.ascontiguousarray(cols[:, k]).view("<u8")   # 8 tokens x 8 owners per word
        for shift, keep in _T8:
            t = (x ^ (x >> shift)) & keep
            x = x ^ t ^ (t << shift)
        out[k] = x.view(np.uint8).reshape(-1, 8).T        # now: 8 owners x 8 tokens per word
    return out.reshape(n_groups * 8, n // 8)[:n_owners].copy().view("<u4")


def owner_bits(masks: np.ndarray, n_owners: int) -> np.ndarray:
    """uint64 owner masks -> bool array ``(len(masks), n_owners)``: entry [i, j] = bit j of mask i."""
    as_bytes = np.ascontiguousarray(masks, dtype="<u8").view(np.uint8).reshape(-1, 8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :n_owners].astype(bool)


def walk_subtrees(tt: TransitionTable, trie: TokenTrie, start: Node, nodes: np.ndarray,
                  want_escapes: bool = False, first_bytes: np.ndarray | None = None):
    """Rows strictly below trie ``nodes`` whose bytes below that node can be read from ``start``.

    Each node's subtree is walked from ``start`` on its own (a node nested under another is walked
    twice, from two different offsets), all in one batch of (trie node, parser state) pairs; the
    state belongs to the pair, not to the trie node. Returns the row indices (may repeat) and, with
    ``want_escapes``, the escape points met on the way (as in ``walk_trie_batch``; ``start`` should
    then be an opaque node). ``first_bytes`` (sorted), when given, are the only bytes ``start`` can
    read: the first level then looks up just those children instead of expanding all of them.
    """
    found, escapes = [], []
    if start.id != 0 and len(nodes):
        tt.register(start)
        nodes = np.asarray(nodes, dtype=np.int64)
        if first_bytes is not None:
            level = trie.children_with_bytes(nodes, first_bytes)
        else:
            level = trie.children_of(nodes)
        prev_states = np.full(len(level), start.id, dtype=np.int32)
        while len(level):
            st = tt.step(prev_states, tt.class_of[trie.byte[level]])
            live = st != 0
            level, st = level[live], st[live]
            rows = trie.node_row[level]
            found.append(rows[rows >= 0])
            if want_escapes:
                esc = level[tt.escaped[st]]
                escapes.append(esc[trie.child_hi[esc] > trie.child_lo[esc]])
            counts = trie.child_hi[level] - trie.child_lo[level]
            if not counts.any():
                break
            prev_states = np.repeat(st, counts)
            level = trie.children_of(level)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))
    if want_escapes:
        return cat(found), sorted_unique(cat(escapes))
    return cat(found)
