"""Token slices: per-vocabulary sets of tokens made of one character class, for first-time walks.

A position's token tables come from walking the whole token trie from the position
(``trie_kernel.TrieKernel.walk_position``). Inside a JSON string, a key or an identifier almost every
token survives its first byte, so that walk visits most of the trie (~200k nodes on a 100k
vocabulary). Most of those tokens are made only of characters the position reads in a loop. A
*slice* is such a class (``SLICES``): string characters (no ``"``, no ``\\``, no control character,
valid UTF-8), word characters (``[A-Za-z0-9_]``), identifiers (no digit first), words or
identifiers after one space (byte-level tokenizers' words), and identifiers after exactly one space
(after a keyword: ``int x``). Per vocabulary and slice, computed once:

* the *character length* of every token that is all made of the class's characters (others: ``NOT``);
* per trie node, the longest such length among the tokens below it (``NOT`` where one is not in
  the class): ``node_max``.

Per grammar position (parser state), the *depth* of a slice is how many characters of the class
the state reads whatever they are: every string of that many class characters (and each prefix of
one, mid-character too) leaves the parser alive (``slice_depth.SliceDepth``: a search over the
parser's own memoised transitions, one level per character; a state that loops on the class has
the full depth, a count with ``r`` left has ``r``). Every class token no longer than the depth is
then accepted, so the walk sets them all at once (``covered_bits``) and skips every trie node whose
``node_max`` is within the depth: below such a node every token is accepted already. The walk goes
on below the other nodes (tokens with a quote, a backslash, a byte of a split character, or longer
than the depth), and finds exactly the tokens and escape points it found before, except escape points
below which every token is accepted anyway (those add nothing to a mask: ``state_masks.py`` ORs a
position's accepted tokens wherever its escapes are read). Where every longer string of the class
dies right after the depth (a count), the walk skips every subtree of class tokens and takes their
escape points from ``TrieSlices.escape_nodes``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from halter.grammar.trie import TokenTrie

NOT = np.int32(1 << 30)
"""Character length of a token not (wholly) in a slice's class, and ``node_max`` above one."""

# The byte automaton of UTF-8 text over a class: state 0 is between characters, the others wait for
# continuation bytes. 1: one more (80-BF), 2: two more, 3: three more, 4: after E0 (A0-BF, then
# one), 5: after ED (80-9F: no surrogates, then one), 6: after F0 (90-BF, then two), 7: after F4
# (80-8F, then two). Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF.
N_UTF8 = 8
DEAD = N_UTF8


def _utf8_table(one_byte: np.ndarray, multi_byte: bool) -> np.ndarray:
    """``[state, byte] -> state`` (``DEAD``: not in the class) of UTF-8 over a class: the one-byte
    characters ``one_byte`` (bool per byte < 0x80), and every multi-byte character if ``multi_byte``."""
    t = np.full((N_UTF8 + 1, 256), DEAD, dtype=np.int8)
    t[0, :128][one_byte[:128]] = 0
    if multi_byte:
        t[0, 0xC2:0xE0] = 1
        t[0, 0xE0] = 4
        t[0, 0xE1:0xED] = 2
        t[0, 0xED] = 5
        t[0, 0xEE:0xF0] = 2
        t[0, 0xF0] = 6
        t[0, 0xF1:0xF4] = 3
        t[0, 0xF4] = 7
        t[1, 0x80:0xC0] = 0
        t[2, 0x80:0xC0] = 1
        t[3, 0x80:0xC0] = 2
        t[4, 0xA0:0xC0] = 1
        t[5, 0x80:0xA0] = 1
        t[6, 0x90:0xC0] = 2
        t[7, 0x80:0x90] = 2
    return t


def _string_bytes() -> np.ndarray:
    ok = np.zeros(256, dtype=bool)
    ok[0x20:0x80] = True
    ok[[ord('"'), ord("\\")]] = False
    return ok


def _word_bytes() -> np.ndarray:
    ok = np.zeros(256, dtype=bool)
    for lo, hi in (("a", "z"), ("A", "Z"), ("0", "9"), ("_", "_")):
        ok[ord(lo):ord(hi) + 1] = True
    return ok


def _word_start_table(first: np.ndarray, spaced: bool, space_needed: bool = False) -> np.ndarray:
    """Words whose first character is in ``first`` (from state 0; after one space if ``spaced``:
    state 2; only after one if ``space_needed``), then word characters (state 1)."""
    t = np.full((N_UTF8 + 1, 256), DEAD, dtype=np.int8)
    if not space_needed:
        t[0, first] = 1
    if spaced or space_needed:
        t[0, ord(" ")] = 2
        t[2, first] = 1
    t[1, _word_bytes()] = 1
    return t


def _ident_first() -> np.ndarray:
    first = _word_bytes()
    first[ord("0"):ord("9") + 1] = False
    return first


class Slice:
    """A character class as a byte automaton: UTF-8 states, the state before the first character
    (0) and those between characters (``boundary``: a token may end there)."""

    def __init__(self, name: str, table: np.ndarray, boundary: tuple[int, ...]) -> None:
        self.name, self.table = name, table
        self.boundary = np.zeros(N_UTF8 + 1, dtype=bool)
        self.boundary[list(boundary)] = True
        self.uniform = bool(self.boundary[0])     # every character alike: a suffix of a token is one too


SLICES: tuple[Slice, ...] = (
    Slice("string", _utf8_table(_string_bytes(), True), (0,)),             # JSON string characters, unescaped
    Slice("word", _utf8_table(_word_bytes(), False), (0,)),                # words, numbers, identifier rests
    Slice("ident", _word_start_table(_ident_first(), False), (1,)),        # identifiers: no digit first
    Slice("spaced word", _word_start_table(_word_bytes(), True), (1,)),    # a word after one space, or none
    Slice("spaced ident", _word_start_table(_ident_first(), True), (1,)),  # an identifier after one space, or none
    Slice("space ident", _word_start_table(_ident_first(), False, True), (1,)),  # one space, then an identifier
)
"""The slices, in the order ``slice_depth.SliceDepth.best`` tries them."""


class TrieSlices:
    """The slices of one token trie: per slice, ``node_max`` and the tokens' character lengths."""

    def __init__(self, trie: "TokenTrie") -> None:
        self.n_words = (trie.n_vocab + 31) // 32
        self.node_max: list[np.ndarray] = []
        self.prefix_len: list[np.ndarray] = []   # per node: its bytes' length in characters, or NOT
        self.token_len: list[np.ndarray] = []
        self.max_len: list[int] = []             # the longest token in the class (0: none)
        self._bits: dict[tuple[int, int], np.ndarray] = {}
        self._n_covered: dict[tuple[int, int], int] = {}
        self._esc: dict[tuple, np.ndarray] = {}
        for sl in SLICES:
            node_max, row_len, prefix_len = _lengths(trie, sl)
            self.prefix_len.append(prefix_len if sl.uniform else None)
            tok = np.full(trie.n_vocab, NOT, dtype=np.int32)
            has_row = trie.row_of_token >= 0
            tok[has_row] = row_len[trie.row_of_token[has_row]]
            self.node_max.append(node_max)
            self.token_len.append(tok)
            in_class = row_len[row_len < NOT]
            self.max_len.append(int(in_class.max()) if len(in_class) else 0)
        self._by_prefix: list = [self._prefix_index(k) if sl.uniform else None for k, sl in enumerate(SLICES)]

    def covered_bits(self, k: int, depth: int) -> np.ndarray:
        """Packed mask (uint32 words) of the tokens of slice ``k`` at most ``depth`` characters long
        (read-only, memoised)."""
        depth = min(depth, self.max_len[k])
        bits = self._bits.get((k, depth))
        if bits is None:
            mask = np.zeros(self.n_words * 32, dtype=bool)
            mask[:len(self.token_len[k])] = self.token_len[k] <= depth
            bits = np.packbits(mask, bitorder="little").view("<u4")
            bits.flags.writeable = False
            self._bits[(k, depth)] = bits
        return bits

    def _prefix_index(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The nodes on a slice's tokens with a longer one below, by their own length, then by the
        longest below (for ``escape_nodes``), with their own lengths and both lengths as one key."""
        pl, nm = self.prefix_len[k], self.node_max[k]
        cand = np.flatnonzero((pl < NOT) & (nm < NOT) & (nm > pl))
        order = cand[np.lexsort((nm[cand], pl[cand]))]
        return order, pl[order], pl[order].astype(np.int64) * (1 << 31) + nm[order]

    def escape_nodes(self, k: int, ends: tuple[int, ...], depth: int) -> np.ndarray:
        """The nodes (sorted) whose bytes are ``j`` characters of slice ``k`` (a uniform one), for
        ``j`` in ``ends``, with a token of the slice longer than ``depth`` below: where a walk that
        takes the slice's subtrees whole (``slice_depth.SliceDepth.exact``) has its rule end mid-token.
        Read-only, memoised: along a counted string most counts ask the same question."""
        key = (k, ends, depth)
        got = self._esc.get(key)
        if got is None:
            order, pls, both = self._by_prefix[k]
            j = np.asarray(ends, dtype=np.int64)
            # the candidates are sorted by (own length, longest below): per j, the run of own
            # length j past the ones with nothing longer than ``depth`` below
            lo = np.searchsorted(both, j * (1 << 31) + depth, side="right")
            hi = np.searchsorted(pls, j, side="right")
            n = np.maximum(hi - lo, 0)
            if n.sum():
                at = np.repeat(lo - np.cumsum(n) + n, n) + np.arange(n.sum())
                got = np.sort(order[at])
            else:
                got = np.zeros(0, dtype=np.int64)
            got.flags.writeable = False
            self._esc[key] = got
        return got

    def n_covered(self, k: int, depth: int) -> int:
        """How many tokens ``covered_bits(k, depth)`` holds (memoised)."""
        depth = min(depth, self.max_len[k])
        n = self._n_covered.get((k, depth))
        if n is None:
            n = self._n_covered[(k, depth)] = int(np.count_nonzero(self.token_len[k] <= depth))
        return n


def _lengths(trie: "TokenTrie", sl: Slice) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``node_max`` per trie node, character length per row or ``NOT``, the same per node's own
    bytes) for one slice, from the
    trie's levels: the UTF-8 automaton state and the character count of every node's prefix are
    its parent's, stepped by its byte; maxima go up the levels (children are contiguous)."""
    n, table = trie.n_nodes, sl.table
    state = np.zeros(n, dtype=np.int8)
    chars = np.zeros(n, dtype=np.int32)
    starts = trie.level_start
    new_char = np.zeros(256, dtype=np.int32)          # 1: the byte starts a character
    new_char[:0x80] = 1
    new_char[0xC0:] = 1
    for lv in range(len(starts) - 1):
        lo, hi = starts[lv], starts[lv + 1]
        b = trie.byte[lo:hi]
        if lv == 0:
            state[lo:hi] = table[0, b]
            chars[lo:hi] = new_char[b]
        else:
            p = trie.parent[lo:hi]
            state[lo:hi] = table[state[p], b]
            chars[lo:hi] = chars[p] + new_char[b]
    own = np.where(sl.boundary[state], chars, NOT).astype(np.int32)       # the prefix as a token
    row_len = own[trie.row_end_node] if trie.n_rows else np.zeros(0, dtype=np.int32)
    node_max = np.zeros(n, dtype=np.int32)
    has_row = trie.node_row >= 0
    node_max[has_row] = own[has_row]
    for lv in range(len(starts) - 2, 0, -1):           # children's maxima into their parents
        lo, hi = starts[lv], starts[lv + 1]
        if hi == lo:
            continue
        p = trie.parent[lo:hi]
        first = np.flatnonzero(np.concatenate(([True], p[1:] != p[:-1])))
        parents = p[first]                            # distinct: siblings are contiguous
        node_max[parents] = np.maximum(node_max[parents], np.maximum.reduceat(node_max[lo:hi], first))
    return node_max, row_len, own


def trie_slices(trie: "TokenTrie") -> TrieSlices:
    """The slices of ``trie`` (made once per trie, ~0.1 s on a 100k vocabulary)."""
    got = getattr(trie, "_slices", None)
    if got is None:
        got = trie._slices = TrieSlices(trie)
    return got
