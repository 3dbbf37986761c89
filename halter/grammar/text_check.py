"""Checks beside the grammar: the hook for conditions on the text that no context-free grammar can express.

A ``Grammar`` may carry a ``TextCheck``; the grammar core calls it through this protocol only and
knows nothing of what it checks (front ends above supply them: the JSON Schema converter's
``uniqueItems`` check, ``halter.schemas.unique_check``). Both matchers feed its tracker every byte the
grammar accepted, and refuse input the tracker refuses; token masks drop the tokens it would
refuse, and the tokens after which it would refuse every continuation the grammar allows (a
bounded search), so generation does not walk into a dead end. A tracker is mutable but cheap to
snapshot, so rollback and trying candidate tokens are snapshot/restore pairs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar
    from halter.grammar.parser_state import Node, StateSpace


class CheckTracker(Protocol):
    def feed(self, data: bytes) -> bool:
        """Read ``data``; False (and nothing changed) if the text so far breaks the condition."""

    def snapshot(self) -> object:
        """An opaque state ``restore`` returns to."""

    def restore(self, snap: object) -> None: ...

    def copy(self) -> "CheckTracker": ...

    def trigger_bytes(self) -> bytes | None:
        """Bytes one of which any refused input contains; None when nothing can be refused now."""

    def risky_prefixes(self) -> list[bytes]:
        """Texts whose beginnings, written now, could lead where the tracker refuses every ending
        the grammar allows (``has_way_out`` then decides); [] when there is no such risk."""

    def mark(self) -> object:
        """The current unit of text (e.g. a JSON item) whose completion ``settled`` recognises."""

    def settled(self, mark: object) -> bool: ...

    def way_out_bytes(self) -> bytes:
        """Bytes a search for a way out tries first, in order (the usual ways to close a unit)."""


class TextCheck(Protocol):
    def tracker(self) -> CheckTracker:
        """A tracker at the start of the text."""


WAY_OUT_BUDGET = 256
"""Bytes a search for a way out may try before it gives up and assumes there is one."""


def filter_token_bits(bits: np.ndarray, tracker: CheckTracker, cg: "CompiledGrammar", node: "Node") -> np.ndarray:
    """``bits`` (a packed grammar mask at parser state ``node``) without the tokens ``tracker``
    would refuse next, nor those after which it would refuse every way the grammar allows to go on.

    Only tokens that contain one of the tracker's trigger bytes are fed to it (restoring its
    snapshot after each), and only tokens that spell a beginning of one of its risky prefixes are
    searched for a way out; the grammar mask is never changed in place.
    """
    out = bits
    trigger = tracker.trigger_bytes()
    token_bytes, text_token = cg.vocab.token_bytes, cg.text_token
    if trigger:
        candidates = bits & _tokens_with_any(cg, trigger)
        if candidates.any():
            out = bits.copy()
            snap = tracker.snapshot()
            for tid in _ids(candidates, cg).tolist():
                if not text_token[tid]:
                    continue
                if tracker.feed(token_bytes[tid]):
                    tracker.restore(snap)
                else:
                    out[tid >> 5] &= ~np.uint32(1 << (tid & 31))
    risky = tracker.risky_prefixes()
    if risky:
        space, mark = cg.space, tracker.mark()
        snap = tracker.snapshot()
        for text in risky:
            for k, tid in cg.trie.prefix_tokens(text[:256]):
                if not text_token[tid] or not (out[tid >> 5] >> (tid & 31)) & 1:
                    continue
                if not has_way_out(space, space.step_bytes(node, text[:k]), tracker, text[:k], mark):
                    if out is bits:
                        out = bits.copy()
                    out[tid >> 5] &= ~np.uint32(1 << (tid & 31))
                tracker.restore(snap)
    return out


def token_allowed(tracker: CheckTracker, cg: "CompiledGrammar", node: "Node", tid: int) -> bool:
    """One token's verdict, the same as ``filter_token_bits`` gives it (the grammar allows it)."""
    if not cg.text_token[tid]:
        return True
    data = bytes(cg.vocab.token_bytes[tid])
    snap = tracker.snapshot()
    try:
        if any(text.startswith(data) for text in tracker.risky_prefixes()):
            mark = tracker.mark()
            return has_way_out(cg.space, cg.space.step_bytes(node, data), tracker, data, mark)
        return tracker.feed(data)
    finally:
        tracker.restore(snap)


def has_way_out(space: "StateSpace", node: "Node", tracker: CheckTracker, data: bytes, mark: object) -> bool:
    """After ``data`` (already stepped to ``node``), can the text go on until the tracker's current
    unit is complete? A depth-first search over the bytes the grammar allows; a search longer than
    ``WAY_OUT_BUDGET`` bytes assumes yes. Leaves the tracker fed with ``data`` (the caller restores)."""
    if node.id == 0 or not tracker.feed(data):
        return False
    budget = [WAY_OUT_BUDGET]
    first = tracker.way_out_bytes()

    def search(node: "Node") -> bool:
        if tracker.settled(mark):
            return True
        for b in first:               # the tracker's usual ways out, before the rest
            after = space.step_byte(node, b)
            if after.id != 0:
                snap = tracker.snapshot()
                if tracker.feed(bytes((b,))):
                    found = search(after)
                    tracker.restore(snap)
                    if found:
                        return True
        for b in space.live_bytes(node):
            if b in first:
                continue
            budget[0] -= 1
            if budget[0] < 0:
                return True
            snap = tracker.snapshot()
            if tracker.feed(bytes((b,))):
                found = search(space.step_byte(node, b))
                tracker.restore(snap)
                if found:
                    return True
        return False

    return search(node)


def _ids(packed: np.ndarray, cg: "CompiledGrammar") -> np.ndarray:
    ids = np.flatnonzero(np.unpackbits(packed.view(np.uint8), bitorder="little"))
    return ids[ids < cg.vocab_size]


def _tokens_with_any(cg: "CompiledGrammar", trigger: bytes) -> np.ndarray:
    """Packed bits of the text tokens containing any byte of ``trigger`` (per byte, the token trie
    keeps them for every grammar of the vocabulary)."""
    memo = cg.__dict__.setdefault("_tokens_with_trigger", {})
    got = memo.get(trigger)
    if got is None:
        got = memo[trigger] = np.bitwise_or.reduce([cg.trie.tokens_with_byte(b) for b in trigger])
    return got
