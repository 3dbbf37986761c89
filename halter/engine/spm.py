"""SentencePiece BPE (llama.cpp's ``llm_tokenizer_spm_session``): text -> token ids by score-ordered merges.

Start from single characters; repeatedly merge the adjacent pair whose concatenation is a token with
the highest score (leftmost on ties). Characters that end up in no token fall back to byte tokens.
"""
from __future__ import annotations

import heapq
from typing import Mapping, Sequence

__all__ = ["spm_encode"]


def spm_encode(text: str, token_to_id: Mapping[str, int], scores: Sequence[float],
               byte_ids: Sequence[int | None], unk_id: int | None) -> list[int]:
    """Token ids for ``text`` (spaces already replaced by ``▁`` by the caller)."""
    n = len(text)
    if n == 0:
        return []
    start = list(range(n))
    size = [1] * n                      # length in characters; 0 once merged away
    prev = list(range(-1, n - 1))
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    heap: list[tuple[float, int, int, int]] = []   # (-score, left, right, merged length)

    def push(left: int, right: int) -> None:
        if left < 0 or right < 0:
            return
        length = size[left] + size[right]
        tid = token_to_id.get(text[start[left]:start[left] + length])
        if tid is not None:
            heapq.heappush(heap, (-scores[tid], left, right, length))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, left, right, length = heapq.heappop(heap)
        if not size[left] or not size[right] or size[left] + size[right] != length:
            continue
        size[left] = length
        size[right] = 0
        nxt[left] = nxt[right]
        if nxt[left] >= 0:
            prev[nxt[left]] = left
        push(prev[left], left)
        push(left, nxt[left])

    out: list[int] = []
    i = 0
    while i != -1:
        piece = text[start[i]:start[i] + size[i]]
        tid = token_to_id.get(piece)
        if tid is not None:
            out.append(tid)
        else:
            for byte in piece.encode("utf-8"):
                bid = byte_ids[byte]
                if bid is None:
                    bid = unk_id
                if bid is not None:
                    out.append(bid)
        i = nxt[i]
    return out
