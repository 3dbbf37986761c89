"""Byte-level BPE merging (llama.cpp's ``llm_tokenizer_bpe_session``): one pre-tokenized word -> token ids.

Each word is first mapped to GPT-2's byte characters, then adjacent symbols are merged lowest merge
rank first (leftmost on ties) until no listed merge applies. Results are cached per word.
"""
from __future__ import annotations

import heapq
from typing import Any, Mapping, Sequence

from halter.vocab.gguf_vocab import decode_pieces
from halter.vocab.vocabulary import gpt2_byte_encoder

__all__ = ["BPE", "parse_merges"]

_BYTE_CHARS = [c for _, c in sorted(gpt2_byte_encoder().items())]      # one table, in byte order
_CACHE_LIMIT = 100_000


def parse_merges(merges: Sequence[bytes | str]) -> dict[str, int]:
    """``tokenizer.ggml.merges`` ("left right", rank = position) -> {"left right": rank}.

    llama.cpp splits each line at the first space after its first character and looks pairs up
    as (left, right). The symbols a byte-level BPE word is made of never hold a space (each byte
    is one of GPT-2's byte characters, a space is ``Ġ``), so ``left + " " + right`` names the
    pair as well: the line itself, with no split needed. A line whose right side holds a space,
    or that has none, is then a key no pair of symbols can spell, as no pair can match its
    split. The first occurrence of a line keeps its rank.
    """
    lines = decode_pieces(merges) if set(map(type, merges)) <= {bytes} else \
        [m if isinstance(m, str) else m.decode("utf-8", errors="replace") for m in merges]
    return dict(zip(reversed(lines), range(len(lines) - 1, -1, -1)))


class BPE:
    """Merges words into token ids with a fixed merge table and token-text index."""

    def __init__(self, token_to_id: Mapping[str, int], ranks: Mapping[str, int], *,
                 ignore_merges: bool = False) -> None:
        self._ids = token_to_id
        self._ranks = ranks
        self._ignore_merges = ignore_merges
        self._cache: dict[str, list[int]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the token index (the owning ``Tokenizer`` links its own back in) and
        without the word cache."""
        return {**self.__dict__, "_ids": None, "_cache": {}}

    def encode_word(self, word: str) -> list[int]:
        """Token ids of one pre-tokenizer word (given as ordinary text)."""
        ids = self._cache.get(word)
        if ids is None:
            ids = self._encode(''.join([_BYTE_CHARS[b] for b in word.encode("utf-8")]))
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[word] = ids
        return ids

    def _encode(self, word: str) -> list[int]:
        ids = self._ids
        if self._ignore_merges and word in ids:
            return [ids[word]]
        pieces = self._merge(word)
        out: list[int] = []
        for piece in pieces:
            tid = ids.get(piece)
            if tid is not None:
                out.append(tid)
                continue
            # llama.cpp falls back to one token per UTF-8 byte of the piece, dropping bytes it cannot find
            for byte in piece.encode("utf-8"):
                tid = ids.get(chr(byte)) if byte < 0x80 else None
                if tid is not None:
                    out.append(tid)
        return out

    def _merge(self, word: str) -> list[str]:
        n = len(word)
        if n <= 1:
            return [word] if word else []
        ranks = self._ranks
        text = list(word)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap: list[tuple[int, int, int, str]] = []   # (rank, left, right, merged text)

        def push(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            rank = ranks.get(text[left] + " " + text[right])
            if rank is not None:
                heapq.heappush(heap, (rank, left, right, text[left] + text[right]))

        for i in range(n - 1):
            push(i, i + 1)
        while heap:
            _, left, right, merged = heapq.heappop(heap)
            if not text[left] or not text[right] or text[left] + text[right] != merged:
                continue   # outdated: one side was merged since
            text[left] = merged
            text[right] = ""
            nxt[left] = nxt[right]
            if nxt[left] >= 0:
                prev[nxt[left]] = left
            push(prev[left], left)
            push(left, nxt[left])
        return [t for t in text if t]
