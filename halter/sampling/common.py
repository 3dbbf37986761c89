"""``CommonSampler``: the grammar sampler plus the chain, as llama.cpp's ``common_sampler``.

Two ways to combine them (``common/sampling.h``):

* grammar-first: the grammar masks the whole vocabulary, then the chain samples. The token is
  drawn from the chain's distribution restricted to grammar-valid tokens.
* resample-on-reject (default): the chain samples from the raw logits; only the chosen token is
  checked against the grammar. If it is rejected, the logits are restored, masked by the grammar
  and sampled again. Token ``t`` comes out with probability
  ``P_chain(t) * [t valid] + P_chain(rejected) * P_grammar_first(t)``.

Either way the result is a token the grammar allows; a grammar that allows nothing (or only
tokens whose logit is ``-inf``) raises ``NoValidTokenError`` instead of sampling outside the mask.

This is the one place halter implements the two modes: the engine's decode loop computes each
row's bitmask while the device runs the forward pass and hands it to ``sample(..., bitmask=)``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Iterable

import numpy as np

from halter.errors import NoValidTokenError
from halter.grammar.bitmask import apply_bitmask
from halter.sampling.base import SamplerChain
from halter.sampling.candidates import Candidates
from halter.sampling.grammar import GrammarSampler
from halter.sampling.params import SamplingParams


class CommonSampler:
    """A sampling chain with an optional grammar (llama.cpp's ``common_sampler``).

    Parameters
    ----------
    params:
        a ``SamplingParams`` (built into a chain with ``n_vocab``), a ready ``SamplerChain``, or
        any object with ``sample(logits) -> int`` and ``accept(token)`` (it then sees full logits
        rows, masked with ``-inf`` where the grammar masks).
    grammar:
        a compiled grammar (anything with ``.matcher()``), a token matcher, a ``GrammarSampler``,
        or ``None``.
    n_vocab:
        logits row width; defaults to the matcher's ``vocab_size``.
    vocab, eog_ids, n_ctx_train:
        passed to ``SamplingParams.build`` (DRY breakers, ``ignore_eos``, DRY context).
    """

    def __init__(self, params: SamplingParams | SamplerChain | None = None, grammar: Any = None, *,
                 n_vocab: int | None = None, vocab: Any = None, eog_ids: Iterable[int] = (),
                 n_ctx_train: int | None = None, n_prev: int = 64) -> None:
        self.grammar: GrammarSampler | None = None
        if grammar is not None:
            self.grammar = grammar if isinstance(grammar, GrammarSampler) else GrammarSampler(grammar)
        if n_vocab is None and self.grammar is not None:
            n_vocab = self.grammar.vocab_size
        if isinstance(params, SamplerChain) or (
                params is not None and not isinstance(params, SamplingParams)
                and callable(getattr(params, "sample", None)) and callable(getattr(params, "accept", None))):
            self.params = None
            self.chain = params
        else:
            self.params = params if params is not None else SamplingParams()
            if n_vocab is None:
                raise ValueError("CommonSampler: n_vocab is needed when there is no grammar to take it from")
            self.chain = self.params.build(n_vocab, vocab=vocab, eog_ids=eog_ids, n_ctx_train=n_ctx_train)
        self.prev: deque[int] = deque(maxlen=max(32, n_prev))
        self.candidates: Candidates | None = None
        self.n_resampled = 0

    @property
    def seed(self) -> int | None:
        """The seed the chain's random samplers were built with (replays the run)."""
        return getattr(self.chain, "seed", None)

    def sample(self, logits: Any, grammar_first: bool = False, *, bitmask: np.ndarray | None = None) -> int:
        """Sample one token from a logits row (never modified). Does not accept it.

        ``bitmask``: the grammar's packed next-token mask for the current state (int32 words, bit
        ``i`` of word ``j`` = token ``32j+i``), when the caller already computed it (the engine
        does, while the forward pass runs); ``None`` asks the grammar sampler's matcher.
        """
        row = np.asarray(logits)
        if row.ndim != 1:
            raise ValueError(f"CommonSampler.sample: expected one logits row (1-D), got shape {row.shape}")
        if self.grammar is None:
            return self._run_chain(row)
        if grammar_first:
            return self._grammar_first(row, bitmask)
        token = self._run_chain(row)
        if self._allowed(token, bitmask):
            return token
        self.n_resampled += 1
        return self._grammar_first(row, bitmask)

    def _allowed(self, token: int, bitmask: np.ndarray | None) -> bool:
        if bitmask is None:
            return self.grammar.is_allowed(token)
        return 0 <= token < self.grammar.vocab_size and bool((int(bitmask[token >> 5]) >> (token & 31)) & 1)

    def _n_allowed(self, bitmask: np.ndarray | None) -> int:
        if bitmask is None:
            return int(self.grammar.allowed_mask().sum())
        bits = np.unpackbits(np.ascontiguousarray(bitmask, dtype=np.int32).view(np.uint8), bitorder="little")
        return int(bits[:self.grammar.vocab_size].sum())

    def _grammar_first(self, row: np.ndarray, bitmask: np.ndarray | None) -> int:
        cand = Candidates.from_logits(row)
        if bitmask is None:
            self.grammar.apply(cand)
        else:
            apply_bitmask(cand.logits, bitmask, vocab_size=self.grammar.vocab_size)
        if not np.isfinite(cand.logits).any() and not (cand.logits == np.inf).any():
            allowed = self._n_allowed(bitmask)
            if allowed == 0:
                raise NoValidTokenError("the grammar allows no token of the vocabulary here (dead end)")
            raise NoValidTokenError(f"the grammar allows {allowed} token(s) here but every one of them "
                                    "has logit -inf (banned by the model, a logit bias or ignore_eos)")
        with np.errstate(invalid="ignore"):
            token = self._run_chain(cand)
        picked = cand.logits[cand.selected] if self.candidates is cand else cand.logits[token]
        if not self._allowed(token, bitmask) or not np.isfinite(picked):
            allowed = self._n_allowed(bitmask)
            raise NoValidTokenError(f"the grammar allows {allowed} token(s) here but the sampler chain left "
                                    "none of them a finite logit (a logit bias, ignore_eos, or -inf logits)")
        return token

    def _run_chain(self, cand: Candidates | np.ndarray) -> int:
        """Run the chain on candidates (or a raw row); a plain ``sample``/``accept`` object gets a row."""
        if not hasattr(self.chain, "apply"):
            self.candidates = None
            row = cand.logits if isinstance(cand, Candidates) else cand
            return int(self.chain.sample(np.array(row, dtype=np.float32)))
        if not isinstance(cand, Candidates):
            cand = Candidates.from_logits(cand)
        self.chain.apply(cand)
        self.candidates = cand
        if not 0 <= cand.selected < cand.size:
            raise ValueError("CommonSampler: the chain selected no token; end it with dist, greedy or mirostat")
        return int(cand.ids[cand.selected])

    def accept(self, token: int, accept_grammar: bool = True) -> None:
        """Tell the grammar (unless ``accept_grammar=False``) and the chain which token was chosen."""
        token = int(token)
        if self.grammar is not None and accept_grammar:
            self.grammar.accept(token)
        self.chain.accept(token)
        self.prev.append(token)

    def accept_prompt(self, tokens: Iterable[int]) -> None:
        """Feed prompt tokens into the chain's history (penalties, DRY) without touching the grammar."""
        for t in tokens:
            self.accept(t, accept_grammar=False)

    def reset(self) -> None:
        """Forget the history, restart the grammar and the random streams."""
        self.prev.clear()
        if self.grammar is not None:
            self.grammar.reset()
        self.chain.reset()

    def clone(self) -> "CommonSampler":
        new = CommonSampler.__new__(CommonSampler)
        new.params = self.params
        new.grammar = self.grammar.clone() if self.grammar is not None else None
        new.chain = self.chain.clone()
        new.prev = deque(self.prev, maxlen=self.prev.maxlen)
        new.candidates = None
        new.n_resampled = 0
        return new

    def last(self) -> int:
        """The last accepted token."""
        if not self.prev:
            raise ValueError("no token has been accepted yet")
        return self.prev[-1]

    def __repr__(self) -> str:
        g = "grammar -> " if self.grammar is not None else ""
        return f"CommonSampler({g}{' -> '.join(getattr(self.chain, 'names', [type(self.chain).__name__]))})"
