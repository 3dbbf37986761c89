"""A request in the scheduler: its ``Job`` (events, result, cancel) and the streamed ``Piece``s.

Events of a job are ``Piece`` objects (new text and the logprobs of the tokens behind it), then the
``Completion`` or an exception. ``token_logprob`` computes a token's log-probability and its top
alternatives from the model's logits.
"""
from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Union

import numpy as np
import torch

from halter.completion import Completion
from halter.engine.generation import _Row
from halter.errors import QueueFullError

__all__ = ["Job", "JobEvent", "Piece", "QueueFullError", "TokenLogprob", "token_logprob"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its log-probability and the ``top`` alternatives (id, logprob)."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass
class Piece:
    """A streamed event: new text, and the logprobs of the tokens accepted since the last piece."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)


JobEvent = Union[Piece, Completion, BaseException]
"""What a job's sink receives: text pieces, then the ``Completion`` or the error."""


class Job:
    """One submitted request: its events, its result, and ``cancel()``.

    Events are ``Piece`` objects, then either the ``Completion`` or an exception. Without a
    ``sink`` they go to an internal queue, read by iterating the job (text pieces) or ``wait()``.
    The row's cache sequences are ``row.seqs`` while it runs.
    """

    def __init__(self, row: _Row, logprobs: int | None, sink: "Callable[[JobEvent], None] | None") -> None:
        self.row = row
        self.logprobs = logprobs
        self.result: Completion | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_token: float | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._sink = sink if sink is not None else self._queue.put
        self._pending: list[TokenLogprob] = []
        self._done = threading.Event()
        # loop state: per prompt (the negative prompt of guidance is the second)
        self.fed = [0] * len(row.prompts)               # prompt tokens evaluated so far
        self.logits: list[torch.Tensor | None] = [None] * len(row.prompts)   # next-token logits
        self.decode_start: float | None = None          # when the prompt had been read

    def cancel(self) -> None:
        """Stop this request; its cache sequence is freed before the next step."""
        self.cancelled = True

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def _emit(self, event: Any) -> None:
        try:
            self._sink(event)
        except Exception:                               # a closed consumer must not stop the loop
            self.cancelled = True

    def _finish(self, result: Completion | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self._emit(error if error is not None else result)
        self._done.set()

    def __iter__(self) -> Iterator[str]:
        if self._sink != self._queue.put:
            raise TypeError("this job's events go to its sink; iterate only a job submitted without one")
        while True:
            event = self._queue.get()
            if isinstance(event, Piece):
                yield event.text
            elif isinstance(event, BaseException):
                raise event
            else:
                return

    def wait(self, timeout: float | None = None) -> Completion:
        """Block until the request ends; its ``Completion`` (or its error, raised)."""
        if not self._done.wait(timeout):
            raise TimeoutError("the request has not finished")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def token_logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
    """The model's log-probability of ``token`` and its ``top`` most likely alternatives."""
    row = logits.astype(np.float64)
    finite = row[np.isfinite(row)]
    z = float(np.logaddexp.reduce(finite)) if finite.size else 0.0
    lp = float(row[token] - z) if math.isfinite(row[token]) else -math.inf
    if top <= 0:
        return TokenLogprob(token, lp)
    ids = np.argpartition(-row, min(top, len(row) - 1))[:top]
    ids = ids[np.argsort(-row[ids])]
    return TokenLogprob(token, lp, tuple((int(i), float(row[i] - z)) for i in ids))
