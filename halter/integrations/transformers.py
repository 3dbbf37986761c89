"""A Hugging Face ``transformers`` ``LogitsProcessor`` that constrains generation with halter grammars.

``GrammarLogitsProcessor(compiled)`` (one grammar for every row), ``GrammarLogitsProcessor([cg1,
cg2, ...])`` (one per batch row) or ``GrammarLogitsProcessor.from_constraint(vocab, regex=...)``
(any constraint ``halter.generate`` takes, resolved the same way) goes into ``model.generate(..., logits_processor=[proc])``. Each
call advances every row's matcher by the token appended since the last call, then masks the
scores. A call whose input is not the previous input plus one token (a new prompt) resets the matchers;
any other mismatch (batch size changed, a token the grammar rejects) raises instead of silently
constraining the wrong state.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from halter.errors import HalterError

__all__ = ["GrammarLogitsProcessor"]


class GrammarLogitsProcessor:
    """Mask ``scores [B, V]`` to the tokens each row's grammar allows next.

    ``vocab_size`` defaults to the grammar's vocabulary size; columns of ``scores`` beyond it (the
    padding rows some models add) are always masked. Rows whose grammar has finished get only the
    end-of-generation tokens (``transformers`` then pads them).
    """

    def __init__(self, compiled: Any | Sequence[Any], *, vocab_size: int | None = None) -> None:
        grammars = list(compiled) if isinstance(compiled, (list, tuple)) else [compiled]
        if not grammars or not all(hasattr(g, "matcher") and hasattr(g, "vocab_size") for g in grammars):
            raise TypeError("GrammarLogitsProcessor needs a CompiledGrammar (grammar.compile(vocab)) "
                            "or a list of them, one per batch row")
        sizes = {g.vocab_size for g in grammars}
        if len(sizes) != 1:
            raise ValueError(f"the grammars were compiled for vocabularies of different sizes: {sorted(sizes)}")
        self.grammars = grammars
        self.grammar_vocab = sizes.pop()
        self.vocab_size = self.grammar_vocab if vocab_size is None else int(vocab_size)
        if self.vocab_size < self.grammar_vocab:
            raise ValueError(f"vocab_size={self.vocab_size} is smaller than the grammar's vocabulary "
                             f"({self.grammar_vocab} tokens)")
        self.matchers: list[Any] = []
        self._last: torch.Tensor | None = None
        self._finished: list[bool] = []
        self._eog = np.array(sorted(grammars[0].vocab.eog_ids), dtype=np.int64)

    @classmethod
    def from_constraint(cls, vocab: Any, *, grammar: Any = None, json_schema: Any = None, regex: Any = None,
                        output_type: Any = None, response_format: Any = None,
                        schema_options: Any = None, vocab_size: int | None = None) -> "GrammarLogitsProcessor":
        """A processor for one constraint (as ``halter.generate`` takes it), compiled for ``vocab``
        (a ``halter.Vocabulary``, e.g. ``Vocabulary.from_token_bytes`` or ``from_gguf``)."""
        from halter.constraints import resolve
        resolved = resolve(grammar, json_schema, regex, output_type, response_format, schema_options)
        if resolved.grammar is None and resolved.compiled is None:
            raise TypeError("from_constraint needs one of grammar=, json_schema=, regex=, output_type=, "
                            "response_format=")
        return cls(resolved.compile(vocab), vocab_size=vocab_size)

    def reset(self, batch_size: int) -> None:
        """Start every row afresh (called automatically on a new prompt)."""
        if len(self.grammars) == 1:
            self.matchers = [self.grammars[0].matcher() for _ in range(batch_size)]
        elif len(self.grammars) == batch_size:
            self.matchers = [g.matcher() for g in self.grammars]
        else:
            raise ValueError(f"{len(self.grammars)} grammars for a batch of {batch_size} rows; "
                             "pass one grammar, or one per row (num_return_sequences and beams "
                             "multiply the rows)")
        self._finished = [False] * batch_size

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.ndim != 2 or scores.ndim != 2 or input_ids.shape[0] != scores.shape[0]:
            raise ValueError(f"expected input_ids [B, T] and scores [B, V], got {tuple(input_ids.shape)} "
                             f"and {tuple(scores.shape)}")
        B, T = input_ids.shape
        if scores.shape[1] < self.grammar_vocab:
            raise ValueError(f"scores have {scores.shape[1]} columns but the grammar's vocabulary has "
                             f"{self.grammar_vocab} tokens: compiled for another tokenizer?")
        prev = self._last
        if prev is not None and prev.shape == input_ids.shape and torch.equal(prev, input_ids):
            raise HalterError("GrammarLogitsProcessor was called twice for the same step")
        follows = (prev is not None and T == prev.shape[1] + 1 and B == prev.shape[0]
                   and torch.equal(prev, input_ids[:, :-1]))
        if not follows:                                     # a new prompt: start over
            self.reset(B)
        else:
            for row, tok in enumerate(input_ids[:, -1].tolist()):
                self._advance(row, int(tok))
        self._last = input_ids.detach().clone()
        allowed = np.zeros((B, scores.shape[1]), dtype=bool)
        for row, m in enumerate(self.matchers):
            if self._finished[row] or m.is_finished():
                allowed[row, self._eog[self._eog < scores.shape[1]]] = True
            else:
                allowed[row, :self.grammar_vocab] = m.allowed_mask()
            if not allowed[row].any():
                raise HalterError(f"row {row}: the grammar allows no token here (dead end)")
        mask = torch.from_numpy(allowed).to(scores.device)
        return scores.masked_fill(~mask, float("-inf"))

    def _advance(self, row: int, token: int) -> None:
        if self._finished[row]:
            return                                  # transformers pads finished rows
        m = self.matchers[row]
        if token in set(self._eog.tolist()):
            self._finished[row] = True
            return
        if m.is_finished():
            raise HalterError(f"row {row}: token {token} came after the grammar finished; "
                              "was the processor applied to every step?")
        if not m.accept_token(token):
            raise HalterError(f"row {row}: token {token} is not allowed by the grammar; was another "
                              "processor applied after this one, or the processor reused mid-generation?")
