"""Code point ranges -> UTF-8 byte-range sequences, so the automaton can run on raw bytes.

A range of code points becomes a small set of sequences of byte ranges, each sequence a product
(every combination of bytes in its ranges is a valid UTF-8 encoding of a code point in the range).
Surrogates (U+D800..U+DFFF) are not valid in UTF-8 and are dropped, so invalid UTF-8 never matches.
"""
from __future__ import annotations

from functools import lru_cache

_LENGTH_BOUNDARIES = (0x7F, 0x7FF, 0xFFFF)


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences matching exactly the UTF-8 encodings of code points lo..hi."""
    out: list[list[tuple[int, int]]] = []
    stack = [(lo, hi)]
    while stack:
        s, e = stack.pop()
        if s > e:
            continue
        if s <= 0xDFFF and e >= 0xD800:  # cut out the surrogates
            stack.append((s, 0xD7FF))
            stack.append((0xE000, e))
            continue
        split = next((b for b in _LENGTH_BOUNDARIES if s <= b < e), None)
        if split is not None:
            stack.append((s, split))
            stack.append((split + 1, e))
            continue
        if e <= 0x7F:
            out.append([(s, e)])
            continue
        n = len(_encode(s))
        for i in range(1, n):
            m = (1 << (6 * i)) - 1
            if s & ~m != e & ~m:
                if s & m != 0:
                    stack.append((s, s | m))
                    stack.append(((s | m) + 1, e))
                    break
                if e & m != m:
                    stack.append((s, (e & ~m) - 1))
                    stack.append((e & ~m, e))
                    break
        else:
            a, b = _encode(s), _encode(e)
            out.append(list(zip(a, b)))
    out.sort()
    return out


@lru_cache(maxsize=1 << 16)
def utf8_sequences_cached(lo: int, hi: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """``utf8_sequences`` as shared, immutable tuples: grammars repeat the same classes a lot."""
    return tuple(tuple(seq) for seq in utf8_sequences(lo, hi))
