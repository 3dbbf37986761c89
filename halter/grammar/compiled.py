"""``CompiledGrammar``: a grammar's token tables for one vocabulary, built per position on first need.

Compiling resolves token references and finds the vocabulary's token trie; nothing is walked. The
first time a parser state needs a grammar position's tables (the tokens that stay inside the
position's rule, and the trie nodes where the rule ends mid-token), the trie is walked from that
position and the result kept for the life of the compiled grammar, so a document pays for the
positions it visits, not for every position of the grammar. The positions a state needs at once are
walked together (see ``trie_walk.walk_trie_batch``). ``precompute()`` builds every position's tables
(``save`` writes what has been built; ``load`` reads it back).
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from halter import cache as halter_cache
from halter.errors import GrammarError
from halter.grammar import trie_kernel
from halter.grammar.automaton import AUTOMATON_VERSION
from halter.grammar.bitmask import pack_bits
from halter.grammar.transitions import TransitionTable
from halter.grammar.array_sets import sorted_unique
from halter.grammar.trie_walk import BATCH, or_by_key, owner_bits, owners_to_rows, walk_trie_batch
from halter.grammar.parser_state import Node
from halter.grammar.state_masks import MaskAssembler
from halter.grammar.trie import TokenTrie

if TYPE_CHECKING:
    from halter.grammar.grammar import Grammar
    from halter.grammar.token_matcher import TokenMatcher
    from halter.vocab.vocabulary import Vocabulary

CACHE_VERSION = f"tables-3/automaton-{AUTOMATON_VERSION}"


def cache_dir() -> Path:
    """halter's cache directory (``halter.cache.directory()``)."""
    return halter_cache.directory()


def require_vocabulary(vocab: object) -> None:
    """A clear ``TypeError`` for anything but a ``halter.Vocabulary``."""
    from halter.vocab.vocabulary import Vocabulary
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"compile() takes a halter.Vocabulary, not {type(vocab).__name__}: build one with "
                        "Vocabulary.from_gguf(path) or Vocabulary.from_token_bytes([...])")


class CompiledGrammar:
    """A grammar compiled for a vocabulary: per-position accepted masks and escaping tokens.

    ``CompiledGrammar(grammar, vocab)`` is what ``grammar.compile(vocab, cache=...)`` builds (that
    one also keeps it on the grammar, one per vocabulary): token references resolved, the token trie
    found, tables an earlier ``store()`` wrote loaded (with ``cache``), room made for the states
    decoding meets. Position tables are built when a matcher first needs them, so every way of
    making one gives a complete compiled grammar.
    """

    def __init__(self, grammar: "Grammar", vocab: "Vocabulary", *, cache: bool = True) -> None:
        from halter.grammar.grammar import Grammar
        if not isinstance(grammar, Grammar):
            raise TypeError(f"CompiledGrammar takes a halter.Grammar, not {type(grammar).__name__}")
        require_vocabulary(vocab)
        t0 = time.perf_counter()
        self.grammar = grammar
        self.vocab = vocab
        self.vocab_size = vocab.size
        self.n_words = (vocab.size + 31) // 32
        self.space = grammar._space
        a = self.space.a
        if not hasattr(self.space, "table"):
            self.space.table = TransitionTable(self.space)
        self.table: TransitionTable = self.space.table
        eog = np.zeros(vocab.size, dtype=bool)
        eog[[i for i in vocab.eog_ids if i < vocab.size]] = True
        special = np.zeros(vocab.size, dtype=bool)
        special[[i for i in vocab.special_ids if i < vocab.size]] = True
        self.eog_mask = eog
        self.eog_bits = pack_bits(eog)
        self.text_token = ~(eog | special)
        self.token_ref_ids, self.token_ref_bits = self._resolve_token_refs(a.token_refs, eog)
        self.trie = _trie_for(vocab, self.text_token)
        n_pos = a.n_positions
        self.zeros = np.zeros(self.n_words, np.uint32)
        self.zeros.flags.writeable = False
        self._no_esc = np.zeros(0, dtype=np.int64)
        # per position, once built: the tokens that stay inside its rule (packed), and the trie nodes
        # (sorted) where its rule ends inside a token; positions that read no byte need no walk
        self.pos_acc: list[np.ndarray | None] = [None if a.has_bytes[d] else self.zeros for d in range(n_pos)]
        self.pos_esc: list[np.ndarray | None] = [None if a.has_bytes[d] else self._no_esc for d in range(n_pos)]
        self.walk_seconds = 0.0                           # time spent building position tables
        self.use_kernel = True            # the compiled walk where numba is installed (False: numpy)
        self._kernel: trie_kernel.TrieKernel | None = None
        self._masks = MaskAssembler(self)
        self._mask_memo = self._masks.node_memo      # read by TokenMatcher.is_allowed
        self.from_cache = False
        if cache:
            path = self.cache_path()
            if path.exists() and self._load_tables(path):
                self.from_cache = True
                halter_cache.touch(path)
        self.table.reserve(len(self.space.nodes) * 2 + min(RESERVED_STATES, 2 * n_pos + 256))
        self.compile_seconds = time.perf_counter() - t0

    # -- building ----------------------------------------------------------------------------
    def _resolve_token_refs(self, refs, eog: np.ndarray):
        ids, bits = [], []
        for ref in refs:
            if ref.token_id is not None:
                tid = ref.token_id
                if not 0 <= tid < self.vocab_size:
                    raise GrammarError(f"token reference <[{tid}]> is outside the vocabulary "
                                       f"(size {self.vocab_size})")
            else:
                tid = self.vocab.find_token(ref.text)
                if tid is None:
                    raise GrammarError(f"token reference {ref.text} is not a single token of this vocabulary")
            mask = np.zeros(self.vocab_size, dtype=bool)
            if ref.negated:
                mask[:] = ~eog
                mask[tid] = False
            else:
                mask[tid] = True
            ids.append((tid, ref.negated))
            bits.append(pack_bits(mask))
        return ids, bits

    def ensure_positions(self, positions) -> None:
        """Build the tables of those of ``positions`` not built yet (walked together, 64 at a time)."""
        acc = self.pos_acc
        missing = [d for d in positions if acc[d] is None]
        if missing:
            with self.space.lock:
                self._build(sorted({d for d in missing if acc[d] is None}), None)

    def precompute(self, progress: bool | None = None) -> None:
        """Build every position's tables now (what compiling did before tables were built on need)."""
        with self.space.lock:
            self._build([d for d in range(len(self.pos_acc)) if self.pos_acc[d] is None], progress)

    def _build(self, positions: list[int], progress: bool | None) -> None:
        t0 = time.perf_counter()
        kernel = self.kernel()
        if kernel is not None:
            opaque = self.space.opaque_node
            narrow = self._masks.narrow_position_tables       # (a position reading a few bytes)
            for i, d in enumerate(positions):
                start = opaque(d)
                got = narrow(start)
                self.pos_acc[d], self.pos_esc[d] = got if got is not None else kernel.walk_position(start)
                if progress and (i % 64 == 63 or i == len(positions) - 1):
                    print(f"halter: building token tables for {self.vocab_size} tokens: "
                          f"{i + 1}/{len(positions)} positions, {time.perf_counter() - t0:.1f}s",
                          end="\n" if i == len(positions) - 1 else "\r", file=sys.stderr, flush=True)
        else:
            self._build_batches(positions, progress, t0)
        self.walk_seconds += time.perf_counter() - t0

    def kernel(self) -> "trie_kernel.TrieKernel | None":
        """The compiled trie walk for this grammar and vocabulary (None: numba missing, or
        ``use_kernel`` switched off, and the numpy walks run instead)."""
        if self._kernel is None and self.use_kernel and trie_kernel.available():
            self._kernel = trie_kernel.TrieKernel(self.trie, self.table)
        return self._kernel if self.use_kernel else None

    def _build_batches(self, positions: list[int], progress: bool | None, t0: float) -> None:
        """The numpy walk: positions 64 at a time, equal (trie node, state) pairs merged."""
        space, trie = self.space, self.trie
        n_bits = self.n_words * 32
        for b0 in range(0, len(positions), BATCH):
            chunk = positions[b0:b0 + BATCH]
            (rows, row_owners), (en, en_owners) = walk_trie_batch(self.table, trie, [space.opaque_node(d) for d in chunk])
            if len(rows) > 1:                 # a row reached in several states: one mask, ORed
                pick, row_owners = or_by_key(rows, row_owners)
                rows = rows[pick]
            if len(chunk) == 1:
                bits = trie.rows_to_bits(rows) if len(rows) else self.zeros
                per_pos = [bits]
            else:
                tok, which = trie.tokens_of_rows(rows)
                by_token = np.zeros(n_bits, dtype=np.uint64)          # per token: the starts that read it
                by_token[tok] = row_owners[which]
                per_pos = list(owners_to_rows(by_token, len(chunk)))
            owned = owner_bits(en_owners, len(chunk)) if len(en) else None
            for j, d in enumerate(chunk):
                self.pos_esc[d] = sorted_unique(en[owned[:, j]]) if owned is not None else self._no_esc
                self.pos_acc[d] = per_pos[j]
            elapsed = time.perf_counter() - t0
            done = b0 + BATCH >= len(positions)
            if progress or (progress is None and elapsed > 1.0):
                print(f"halter: building token tables for {self.vocab_size} tokens: "
                      f"{min(b0 + BATCH, len(positions))}/{len(positions)} positions, {elapsed:.1f}s",
                      end="\n" if done else "\r", file=sys.stderr, flush=True)

    @property
    def n_built(self) -> int:
        """How many positions that read bytes have their tables built."""
        a = self.space.a
        return sum(1 for d, x in enumerate(self.pos_acc) if x is not None and a.has_bytes[d])

    # -- whole tables (built in full on first use: tests, ``halter compile``, saving) ---------
    @property
    def acc_bits(self) -> np.ndarray:
        """Every position's accepted tokens as one ``(positions, words)`` array (builds them all)."""
        self.precompute(False)
        return np.stack(self.pos_acc) if self.pos_acc else np.zeros((0, self.n_words), np.uint32)

    @property
    def esc_start(self) -> np.ndarray:
        """Offsets into ``esc_nodes`` per position (builds every position's tables)."""
        self.precompute(False)
        out = np.zeros(len(self.pos_esc) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in self.pos_esc], out=out[1:])
        return out

    @property
    def esc_nodes(self) -> np.ndarray:
        """Every position's escape points, concatenated (see ``esc_start``; builds them all)."""
        self.precompute(False)
        return np.concatenate(self.pos_esc) if self.pos_esc else self._no_esc

    # -- masks at run time -------------------------------------------------------------------
    def node_bits(self, node: Node) -> np.ndarray:
        """The packed mask (uint32 words) of tokens the grammar allows from ``node`` (memoised)."""
        bits = self._masks.node_memo.get(node.id)
        return bits if bits is not None else self._masks.node_bits(node)

    def matcher(self) -> "TokenMatcher":
        """A fresh token matcher at the start of the grammar."""
        from halter.grammar.token_matcher import TokenMatcher
        return TokenMatcher(self)

    # -- persistence -------------------------------------------------------------------------
    def cache_key(self) -> str:
        h = hashlib.sha256()
        for part in (CACHE_VERSION, self.grammar.root, str(self.grammar), self.vocab.fingerprint()):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:32]

    def save(self, path: str | os.PathLike) -> None:
        """Write the position tables built so far to ``path`` (a ``.npz`` file; no pickled objects)."""
        with self.space.lock:
            built = [d for d, x in enumerate(self.pos_acc) if x is not None and self.space.a.has_bytes[d]]
            acc = (np.stack([self.pos_acc[d] for d in built]) if built
                   else np.zeros((0, self.n_words), np.uint32))
            esc = [self.pos_esc[d] for d in built]
        start = np.zeros(len(built) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in esc], out=start[1:])
        tmp = Path(str(path) + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.savez(f, positions=np.asarray(built, dtype=np.int64), acc_bits=acc, esc_start=start,
                     esc_nodes=np.concatenate(esc) if esc else self._no_esc, key=np.array(self.cache_key()))
        os.replace(tmp, path)

    def _load_tables(self, path: str | os.PathLike) -> bool:
        try:
            with np.load(path) as z:              # allow_pickle stays False: arrays only
                if str(z["key"]) != self.cache_key() or z["acc_bits"].shape[1:] != (self.n_words,):
                    return False
                built, acc = z["positions"].tolist(), z["acc_bits"]
                start, nodes = z["esc_start"], z["esc_nodes"]
            if len(acc) != len(built) or len(start) != len(built) + 1 or \
                    any(not 0 <= d < len(self.pos_acc) for d in built):
                return False
            with self.space.lock:
                for k, d in enumerate(built):
                    self.pos_acc[d] = acc[k]
                    self.pos_esc[d] = nodes[start[k]:start[k + 1]]
            return True
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):   # corrupt: rebuilt
            return False

    def cache_path(self) -> Path:
        """Where ``store()`` writes this grammar's tables in halter's cache."""
        return halter_cache.path("tables", self.cache_key(), ".npz")

    def store(self) -> bool:
        """Write the tables built so far to halter's cache, where a later ``compile`` of the same
        grammar for the same vocabulary (in any process) loads them; False if it cannot be written."""
        return halter_cache.write_atomic(self.cache_path(), self.save)

    @classmethod
    def load(cls, path: str | os.PathLike, grammar: "Grammar", vocab: "Vocabulary") -> "CompiledGrammar":
        """Load tables saved by ``save`` for the same grammar and vocabulary."""
        cg = cls(grammar, vocab, cache=False)
        if not cg._load_tables(path):
            raise GrammarError(f"{path} does not hold tables for this grammar and vocabulary")
        cg.from_cache = True
        return cg

    def __repr__(self) -> str:
        return (f"<CompiledGrammar positions={self.space.a.n_positions} built={self.n_built} "
                f"vocab={self.vocab_size} {'loaded' if self.from_cache else 'fresh'} "
                f"{self.compile_seconds * 1000:.0f}ms>")


_TRIES = halter_cache.memo("token tries", 8)


def _trie_for(vocab: "Vocabulary", include: np.ndarray) -> TokenTrie:
    """The token trie of a vocabulary: built once per process, and cached on disk beside the tables."""
    key = hashlib.sha256((vocab.fingerprint() + CACHE_VERSION).encode() + np.packbits(include).tobytes())
    key = key.hexdigest()[:32]
    trie = _TRIES.get(key)
    if trie is not None:
        return trie
    path = halter_cache.path("tries", key, ".npz")
    try:
        trie = TokenTrie.load(path) if path.exists() else None
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):   # corrupt: rebuilt below
        trie = None
    if trie is None:
        trie = TokenTrie(vocab.token_bytes, include)
        halter_cache.write_atomic(path, trie.save)
    else:
        halter_cache.touch(path)
    trie.tokens_of_rows(np.zeros(0, dtype=np.int64))    # the row -> tokens index, read by every table
    if trie_kernel.available():
        trie_kernel.flat_arrays(trie)
    trie_kernel.warm()                 # once per process, with the vocabulary rather than a first mask
    return _TRIES.put(key, trie)


RESERVED_STATES = 8192
"""The most room for new parser states met while decoding that compiling allocates up front (two
per grammar position and 256 more, up to this: a first pass over a document meets about as many
states as the grammar has positions; the table doubles when decoding needs more)."""
