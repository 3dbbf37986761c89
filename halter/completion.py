"""``Completion`` and ``CompletionStream``: what every generation hands back.

``halter.generate``, ``generate_batch``, ``Model.generate``, the scheduler behind ``halter serve``
and ``model(...)`` (which returns its ``value``) all end in a ``Completion``; streaming yields the
text in pieces and then holds the same ``Completion``. It always carries the generated ``text``; ``value`` is the parsed and validated
result (JSON for a schema, a model instance for a Pydantic ``output_type``, the text for a grammar
or regex) and raises ``IncompleteOutputError`` when the grammar did not accept the output as a
whole, so an unfinished JSON object is never handed back as if it were valid.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal

from halter.errors import IncompleteOutputError

if TYPE_CHECKING:
    from halter.grammar.token_matcher import TokenMatcher

FinishReason = Literal["stop", "length", "stop_string", "grammar"]
FINISH_REASONS: tuple[str, ...] = ("stop", "grammar", "length", "stop_string")

__all__ = ["Completion", "CompletionStream", "FINISH_REASONS", "FinishReason", "Timings", "Usage"]


@dataclass
class Timings:
    """Milliseconds spent per phase; ``mask_ms`` is the grammar's share of the decode loop (masks,
    checks of a sampled token, accepting tokens), ``sample_ms`` the rest of sampling."""

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    decode_ms: float = 0.0
    mask_ms: float = 0.0
    sample_ms: float = 0.0
    context_shifts: int = 0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / (self.prompt_ms / 1e3) if self.prompt_ms else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / (self.decode_ms / 1e3) if self.decode_ms else 0.0


@dataclass(frozen=True)
class Usage:
    """Token counts of one call."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _identity(text: str) -> Any:
    return text


@dataclass(frozen=True)
class Completion:
    """The result of one generation.

    ``finish_reason``: ``"stop"`` (an end-of-generation token), ``"grammar"`` (the grammar could
    not continue, so generation ended there), ``"stop_string"`` (a ``stop`` string; it is not part
    of ``text``) or ``"length"`` (``max_tokens`` ran out). ``complete`` is True when the grammar
    accepts ``text`` as a whole (always True without a constraint). ``tokens`` are the generated
    ids (an end-of-generation token is not included). ``seed`` replays the run. ``matcher`` is the
    grammar's token matcher in its final state (the loop's own copy; ``None`` without a grammar).
    """

    text: str
    complete: bool
    finish_reason: FinishReason
    tokens: list[int]
    usage: Usage
    seed: int | None = None
    timings: Timings = field(default_factory=Timings)
    _parse: Callable[[str], Any] = field(default=_identity, repr=False, compare=False)
    matcher: "TokenMatcher | None" = field(default=None, repr=False, compare=False)

    @functools.cached_property
    def value(self) -> Any:
        """The parsed, validated output; raises ``IncompleteOutputError`` if not ``complete``."""
        if not self.complete:
            raise IncompleteOutputError(
                f"the output is incomplete (finish_reason={self.finish_reason!r}, "
                f"{self.usage.completion_tokens} tokens): the grammar had not reached an end; "
                f"raise max_tokens or tighten the grammar. Text so far: {_clip(self.text)!r}",
                completion=self)
        return self._parse(self.text)


def _clip(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[:n] + "..."


class CompletionStream:
    """Iterates the generated text in pieces (whole UTF-8 characters only).

    Once exhausted, ``completion`` holds the ``Completion`` (``None`` before that).
    """

    def __init__(self, pieces: Iterator[str], finish: Callable[[], Completion]) -> None:
        self._pieces = pieces
        self._finish = finish
        self.completion: Completion | None = None

    def __iter__(self) -> "CompletionStream":
        return self

    def __next__(self) -> str:
        try:
            return next(self._pieces)
        except StopIteration:
            if self.completion is None:
                self.completion = self._finish()
            raise
