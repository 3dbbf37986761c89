"""``Completion`` and ``CompletionStream``: what ``halter.generate`` hands back.

A ``Completion`` always carries the generated ``text``; ``value`` is the parsed and validated
result (JSON for a schema, a model instance for a Pydantic ``output_type``, the text for a grammar
or regex) and raises ``IncompleteOutputError`` when the grammar did not accept the output as a
whole, so an unfinished JSON object is never handed back as if it were valid.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal

from halter.errors import IncompleteOutputError

FinishReason = Literal["stop", "length", "stop_string", "grammar"]

__all__ = ["Completion", "CompletionStream", "FinishReason", "Usage"]


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
    accepts ``text`` as a whole (always True without a constraint). ``seed`` replays the run.
    """

    text: str
    complete: bool
    finish_reason: FinishReason
    tokens: list[int]
    usage: Usage
    seed: int | None
    timings: Any
    _parse: Callable[[str], Any] = field(default=_identity, repr=False, compare=False)

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
