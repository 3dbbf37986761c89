"""Checks beside the grammar: conditions on the text that no context-free grammar can express.

A ``Grammar`` may carry a ``TextCheck`` (JSON Schema's ``uniqueItems`` over open item sets is the
one halter has: ``halter.schemas.unique_check``). Both matchers feed its tracker every byte the
grammar accepted, and refuse input the tracker refuses; token masks drop the tokens it would
refuse. A tracker is mutable but cheap to snapshot, so rollback and trying candidate tokens are
snapshot/restore pairs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar


class CheckTracker(Protocol):
    def feed(self, data: bytes) -> bool:
        """Read ``data``; False (and nothing changed) if the text so far breaks the condition."""

    def snapshot(self) -> object:
        """An opaque state ``restore`` returns to."""

    def restore(self, snap: object) -> None: ...

    def copy(self) -> "CheckTracker": ...

    def trigger_bytes(self) -> bytes | None:
        """Bytes one of which any refused input contains; None when nothing can be refused now."""


class TextCheck(Protocol):
    def tracker(self) -> CheckTracker:
        """A tracker at the start of the text."""


def filter_token_bits(bits: np.ndarray, tracker: CheckTracker, cg: "CompiledGrammar") -> np.ndarray:
    """``bits`` (a packed grammar mask) without the tokens ``tracker`` would refuse next.

    Only tokens that contain one of the tracker's trigger bytes are tried, each by feeding its
    bytes and restoring the snapshot; the grammar mask is never changed in place.
    """
    trigger = tracker.trigger_bytes()
    if not trigger:
        return bits
    candidates = bits & _tokens_with_any(cg, trigger)
    if not candidates.any():
        return bits
    ids = np.flatnonzero(np.unpackbits(candidates.view(np.uint8), bitorder="little"))
    out = bits.copy()
    snap = tracker.snapshot()
    token_bytes, text_token = cg.vocab.token_bytes, cg.text_token
    for tid in ids.tolist():
        if tid >= cg.vocab_size or not text_token[tid]:
            continue
        if tracker.feed(token_bytes[tid]):
            tracker.restore(snap)
        else:
            out[tid >> 5] &= ~np.uint32(1 << (tid & 31))
    return out


def _tokens_with_any(cg: "CompiledGrammar", trigger: bytes) -> np.ndarray:
    """Packed bits of the text tokens containing any byte of ``trigger`` (memoised per vocabulary)."""
    memo = cg.__dict__.setdefault("_tokens_with_byte", {})
    got = memo.get(trigger)
    if got is None:
        parts = []
        for b in trigger:
            one = memo.get(b)
            if one is None:
                hit = np.zeros(cg.n_words * 32, dtype=bool)
                needle = bytes([b])
                hit[[i for i, t in enumerate(cg.vocab.token_bytes) if needle in t]] = True
                one = memo[b] = np.packbits(hit, bitorder="little").view("<u4").astype(np.uint32)
            parts.append(one)
        got = memo[trigger] = np.bitwise_or.reduce(parts)
    return got
