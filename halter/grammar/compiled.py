"""``CompiledGrammar``: a grammar's precomputed token tables for one vocabulary, with an on-disk cache.

Compiling walks the token trie from every grammar position, 64 at a time, with the walks of a batch
merged where they meet (see ``masks.walk_trie_batch``). The result depends only on
the grammar and the vocabulary, so it is saved under ``$HALTER_CACHE_DIR`` (default
``~/.cache/halter``) keyed by both, and the second compile of the same pair just loads arrays.
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
from halter.grammar.automaton import AUTOMATON_VERSION
from halter.grammar.masks import (BATCH, TransitionTable, or_by_key, owner_bits, owners_to_rows, pack_bits,
                                  walk_trie_batch)
from halter.grammar.parser_state import Node
from halter.grammar.runtime_masks import MaskAssembler
from halter.grammar.trie import TokenTrie

if TYPE_CHECKING:
    from halter.grammar.grammar import Grammar
    from halter.grammar.token_matcher import TokenMatcher
    from halter.grammar.vocab import Vocabulary

CACHE_VERSION = f"tables-2/automaton-{AUTOMATON_VERSION}"


def cache_dir() -> Path:
    """halter's cache directory (``halter.cache.directory()``)."""
    return halter_cache.directory()


class CompiledGrammar:
    """A grammar compiled for a vocabulary: per-position accepted masks and escaping tokens."""

    def __init__(self, grammar: "Grammar", vocab: "Vocabulary") -> None:
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
        self.acc_bits = np.zeros((n_pos, self.n_words), dtype=np.uint32)
        self.esc_start = np.zeros(n_pos + 1, dtype=np.int64)
        self.esc_nodes = np.zeros(0, dtype=np.int64)
        self._masks = MaskAssembler(self)
        self._mask_memo = self._masks.node_memo      # read by TokenMatcher.is_allowed
        self.compile_seconds = 0.0
        self.from_cache = False

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

    def _precompute(self, progress: bool | None) -> None:
        """Walk the trie from every position (in batches that share the per-level work)."""
        a, space, trie = self.space.a, self.space, self.trie
        positions = [d for d in range(a.n_positions) if a.has_bytes[d]]
        t0 = time.perf_counter()
        esc_pos, esc_nodes = [], []
        batch = BATCH
        n_bits = self.n_words * 32
        for b0 in range(0, len(positions), batch):
            chunk = positions[b0:b0 + batch]
            (rows, row_owners), (en, en_owners) = walk_trie_batch(self.table, trie, [space.opaque_node(d) for d in chunk])
            if len(rows) > 1:                 # a row reached in several states: one mask, ORed
                pick, row_owners = or_by_key(rows, row_owners)
                rows = rows[pick]
            tok, which = trie.tokens_of_rows(rows)
            by_token = np.zeros(n_bits, dtype=np.uint64)          # per token: the starts that read it
            by_token[tok] = row_owners[which]
            self.acc_bits[chunk] = owners_to_rows(by_token, len(chunk))
            which_esc, owner = np.nonzero(owner_bits(en_owners, len(chunk)))
            esc_pos.append(np.asarray(chunk, dtype=np.int64)[owner])
            esc_nodes.append(en[which_esc])
            elapsed = time.perf_counter() - t0
            done = b0 + batch >= len(positions)
            if progress or (progress is None and elapsed > 1.0):
                print(f"halter: compiling grammar for {self.vocab_size} tokens: "
                      f"{min(b0 + batch, len(positions))}/{len(positions)} positions, {elapsed:.1f}s",
                      end="\n" if done else "\r", file=sys.stderr, flush=True)
        ep = np.concatenate(esc_pos) if esc_pos else np.zeros(0, dtype=np.int64)
        en = np.concatenate(esc_nodes) if esc_nodes else np.zeros(0, dtype=np.int64)
        order = np.lexsort((en, ep))                   # by position, then trie node; a node once each
        ep, en = ep[order], en[order]
        if len(ep):
            first_of = np.ones(len(ep), dtype=bool)
            first_of[1:] = (ep[1:] != ep[:-1]) | (en[1:] != en[:-1])
            ep, en = ep[first_of], en[first_of]
        self.esc_nodes = en
        counts = np.bincount(ep, minlength=a.n_positions)
        np.cumsum(counts, out=self.esc_start[1:])

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
        """Write the precomputed tables to ``path`` (a ``.npz`` file)."""
        tmp = Path(str(path) + f".tmp{os.getpid()}")
        with open(tmp, "wb") as f:
            np.savez(f, acc_bits=self.acc_bits, esc_start=self.esc_start, esc_nodes=self.esc_nodes,
                     key=np.array(self.cache_key()))
        os.replace(tmp, path)

    def _load_tables(self, path: str | os.PathLike) -> bool:
        try:
            with np.load(path) as z:
                if str(z["key"]) != self.cache_key() or z["acc_bits"].shape != self.acc_bits.shape:
                    return False
                self.acc_bits, self.esc_start = z["acc_bits"], z["esc_start"]
                self.esc_nodes = z["esc_nodes"]
            return True
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):   # corrupt: rebuilt
            return False

    @classmethod
    def load(cls, path: str | os.PathLike, grammar: "Grammar", vocab: "Vocabulary") -> "CompiledGrammar":
        """Load tables saved by ``save`` for the same grammar and vocabulary."""
        cg = cls(grammar, vocab)
        if not cg._load_tables(path):
            raise GrammarError(f"{path} does not hold tables for this grammar and vocabulary")
        cg.from_cache = True
        return cg

    def __repr__(self) -> str:
        return (f"<CompiledGrammar positions={self.space.a.n_positions} vocab={self.vocab_size} "
                f"escapes={len(self.esc_nodes)} {'cached' if self.from_cache else 'fresh'} "
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
    return _TRIES.put(key, trie)


RESERVED_STATES = 8192     # room for new parser states met while decoding, allocated up front


def compile_grammar(grammar: "Grammar", vocab: "Vocabulary", *, cache: bool = True,
                    progress: bool | None = None) -> CompiledGrammar:
    t0 = time.perf_counter()
    cg = CompiledGrammar(grammar, vocab)
    path = halter_cache.path("tables", cg.cache_key(), ".npz") if cache else None
    if path is not None and path.exists() and cg._load_tables(path):
        cg.from_cache = True
        halter_cache.touch(path)
    else:
        cg._precompute(progress)
        if path is not None:
            halter_cache.write_atomic(path, cg.save)   # a read-only home must not break compiling
    cg.table.reserve(len(cg.space.nodes) * 2 + RESERVED_STATES)
    cg.compile_seconds = time.perf_counter() - t0
    return cg
