"""``TokenMatcher``: the per-sequence grammar state at token level — masks, accept, rollback, jump-forward.

The method set covers what engines expect (XGrammar's ``GrammarMatcher``, vLLM's
``StructuredOutputGrammar``): ``fill_bitmask`` / ``allowed_mask``, ``accept_token``, ``is_allowed``,
``rollback``, ``reset``, ``is_accepting``, ``is_finished`` and ``forced_bytes``.
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np

from halter.grammar.bitmask import unpack_bits
from halter.grammar.parser_state import Node
from halter.grammar.text_check import filter_token_bits, token_allowed

if TYPE_CHECKING:
    from halter.grammar.compiled import CompiledGrammar


class TokenMatcher:
    """Tracks one sequence through a compiled grammar, one token at a time.

    End-of-generation tokens are allowed exactly when the grammar may end; accepting one finishes
    the matcher. ``accept_token`` is atomic: a rejected token changes nothing. When the grammar
    carries a ``TextCheck`` (JSON Schema's ``uniqueItems``), its tracker reads every accepted token;
    masks and ``is_allowed`` leave out the tokens it would refuse and those after which it would
    refuse every continuation (a dead end), which ``accept_token`` still takes.
    """

    def __init__(self, compiled: "CompiledGrammar") -> None:
        self._cg = compiled
        self._space = compiled.space
        self._node: Node = compiled.space.initial
        self._finished = False
        self._history: list[tuple] = []     # (node, finished, tracker snapshot)
        check = getattr(compiled.grammar, "text_check", None)
        self._tracker = check.tracker() if check is not None else None
        self._fill_to: tuple = (None, -1, None, None)    # (bitmask, row index, its words, words after)

    @property
    def vocab_size(self) -> int:
        return self._cg.vocab_size

    @property
    def compiled(self) -> "CompiledGrammar":
        return self._cg

    # -- masks -------------------------------------------------------------------------------
    def _bits(self) -> np.ndarray:
        if self._finished:
            return self._cg.eog_bits
        bits = self._cg.node_bits(self._node)
        if self._tracker is not None:
            bits = filter_token_bits(bits, self._tracker, self._cg, self._node)
        return bits

    def fill_bitmask(self, out: np.ndarray, index: int = 0) -> None:
        """Write the allowed-token bitmask (int32 words, bit i of word j = token 32*j+i) into ``out``.

        ``out`` is 1-D (``ceil(vocab/32)`` words) or a 2-D batch, whose row ``index`` is written.
        Once an end-of-generation token is accepted (``is_finished``) the mask holds only the
        end-of-generation tokens, so that a finished row of a batch keeps sampling padding, as
        llguidance's ``compute_mask_or_eos`` does; ``accept_token`` then refuses every token.
        """
        last, last_index, words, rest = self._fill_to
        if out is not last or index != last_index:       # checked once per target, then reused
            words, rest = self._fill_target(out, index)
        words[...] = self._bits()
        if rest is not None:
            rest[...] = 0

    def _fill_target(self, out: np.ndarray, index: int):
        if not isinstance(out, np.ndarray) or out.dtype not in (np.int32, np.uint32) or out.ndim not in (1, 2):
            raise TypeError("fill_bitmask needs a 1-D or 2-D int32 numpy array "
                            "(halter.allocate_bitmask(batch, vocab_size) makes one)")
        row = out if out.ndim == 1 else out[index]
        n = self._cg.n_words
        if row.shape[0] < n:
            raise ValueError(f"bitmask row has {row.shape[0]} words; need {n} "
                             f"for a vocabulary of {self.vocab_size}")
        words, rest = row[:n].view(np.uint32), (row[n:] if row.shape[0] > n else None)
        self._fill_to = (out, index, words, rest)
        return words, rest

    fill_next_token_bitmask = fill_bitmask

    def allowed_mask(self) -> np.ndarray:
        """A bool array over the vocabulary: True where the token is allowed next."""
        return unpack_bits(self._bits(), self.vocab_size)

    def allowed_tokens(self) -> np.ndarray:
        """The ids of the allowed tokens."""
        return np.flatnonzero(self.allowed_mask())

    def is_allowed(self, token_id: int) -> bool:
        """Is ``token_id`` allowed next? Cheap: one bit test, or a walk of the token's own bytes."""
        token_id = operator.index(token_id)
        if not 0 <= token_id < self.vocab_size:
            return False
        if self._finished:
            return False
        bits = self._cg._mask_memo.get(self._node.id)
        if bits is not None and not (bits[token_id >> 5] >> (token_id & 31)) & 1:
            return False
        if bits is None and self._next_node(token_id) is None:
            return False
        return self._tracker_allows(token_id)

    def _tracker_allows(self, token_id: int) -> bool:
        return self._tracker is None or token_allowed(self._tracker, self._cg, self._node, token_id)

    # -- advancing ---------------------------------------------------------------------------
    def _next_node(self, token_id: int):
        """The state after ``token_id`` (``"eog"`` for an accepted end-of-generation), or None."""
        cg, node = self._cg, self._node
        if cg.eog_mask[token_id]:
            return "eog" if node.accepting else None
        nxt = None
        if cg.text_token[token_id]:
            data = cg.vocab.token_bytes[token_id]
            if data:
                n = self._space.step_bytes(node, data)
                if n.id != 0:
                    nxt = n
        if node.tok:
            def matches(k: int) -> bool:
                tid, negated = cg.token_ref_ids[k]
                return (tid != token_id) if negated else (tid == token_id)
            n = self._space.step_token_ref(node, matches)
            if n.id != 0:
                nxt = n if nxt is None else self._space.union(nxt, n)
        return nxt

    def accept_token(self, token_id: int) -> bool:
        """Advance by one token; False (and no change) if the grammar does not allow it."""
        token_id = operator.index(token_id)
        if self._finished or not 0 <= token_id < self.vocab_size:
            return False
        nxt = self._next_node(token_id)
        if nxt is None:
            return False
        snap = None
        if self._tracker is not None:
            snap = self._tracker.snapshot()
            if self._cg.text_token[token_id] and not self._tracker.feed(self._cg.vocab.token_bytes[token_id]):
                return False
        self._history.append((self._node, self._finished, snap))
        if nxt == "eog":
            self._finished = True
        else:
            self._node = nxt
        return True

    def accept_bytes(self, data: bytes) -> bool:
        """Advance by raw text (e.g. forced bytes inserted by jump-forward decoding); atomic."""
        n = self._space.step_bytes(self._node, data)
        if self._finished or n.id == 0:
            return False
        snap = None
        if self._tracker is not None:
            snap = self._tracker.snapshot()
            if not self._tracker.feed(bytes(data)):
                return False
        self._history.append((self._node, self._finished, snap))
        self._node = n
        return True

    def rollback(self, n_tokens: int = 1) -> None:
        """Undo the last ``n_tokens`` accepted tokens (or ``accept_bytes`` calls)."""
        if not 0 <= n_tokens <= len(self._history):
            raise ValueError(f"cannot roll back {n_tokens} tokens: only {len(self._history)} accepted")
        snap = None
        for _ in range(n_tokens):
            self._node, self._finished, snap = self._history.pop()
        if snap is not None:
            self._tracker.restore(snap)

    def reset(self) -> None:
        if self._history:
            self.rollback(len(self._history))
        self._node, self._finished = self._space.initial, False

    def copy(self) -> "TokenMatcher":
        m = TokenMatcher(self._cg)
        m._node, m._finished, m._history = self._node, self._finished, list(self._history)
        if self._tracker is not None:
            m._tracker = self._tracker.copy()
        return m

    fork = copy

    # -- queries -----------------------------------------------------------------------------
    def is_accepting(self) -> bool:
        """The text so far is a complete match (an end-of-generation token would be allowed)."""
        return self._finished or self._node.accepting

    def is_finished(self) -> bool:
        """No more text can come: an end-of-generation token was accepted, or the grammar is complete
        and allows nothing further."""
        return self._finished or (self._node.accepting and not self._node.scan and not self._node.tok)

    is_terminated = is_finished

    def forced_bytes(self, limit: int = 1024) -> bytes:
        """The bytes the grammar forces next (the only possible continuation), for jump-forward;
        they stop before a byte the grammar's ``TextCheck`` would refuse."""
        out = bytearray()
        node = self._node
        if self._finished:
            return b""
        tracker = self._tracker
        snap = tracker.snapshot() if tracker is not None else None
        while len(out) < limit and not node.accepting and not node.tok:
            live = self._space.live_bytes(node)
            if len(live) != 1 or (tracker is not None and not tracker.feed(bytes(live))):
                break
            out.append(live[0])
            node = self._space.step_byte(node, live[0])
        if tracker is not None:
            tracker.restore(snap)
        # never stop inside a UTF-8 character
        text = bytes(out)
        while text:
            try:
                text.decode("utf-8")
                break
            except UnicodeDecodeError:
                text = text[:-1]
        return text

    @property
    def num_accepted(self) -> int:
        return len(self._history)
