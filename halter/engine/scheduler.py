"""Continuous batching: requests join and leave the running batch between decode steps.

A ``Scheduler`` owns a model's KV cache and runs one background thread. ``submit`` validates and
tokenizes a ``Request`` (errors are raised to the caller at once) and queues it; the thread admits
queued requests into free cache sequences (at most ``n_parallel``) between steps. Each step

1. evaluates up to ``n_batch`` prompt tokens of the requests still reading their prompt (a long
   prompt is read in chunks over several steps, so it never stalls the others for long);
2. samples one token for every row that has logits, each with its own sampler chain, seed,
   grammar and stop strings (the engine's ``_Row``, as ``generate`` uses), and streams the text;
3. runs one batched forward pass for every row still generating.

A finished or cancelled request frees its sequence before the next step, and a request whose
sampling fails (e.g. a grammar dead end) ends with an error event without touching the others.
Results arrive as events on the ``Job`` (a thread-safe queue, or a callback such as an asyncio
loop's ``call_soon_threadsafe``).
"""
from __future__ import annotations

import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np
import torch

from halter.engine.generation import Request, _advance, _Row, shift_context
from halter.engine.results import GenerationResult, releasable
from halter.errors import HalterError

if TYPE_CHECKING:
    from halter.engine.model import Model

__all__ = ["Job", "QueueFullError", "Scheduler", "TokenLogprob"]


class QueueFullError(HalterError, RuntimeError):
    """The scheduler's waiting queue is full; try again later."""


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


class Job:
    """One submitted request: its events, its result, and ``cancel()``.

    Events are ``Piece`` objects, then either the ``GenerationResult`` or an exception. Without a
    ``sink`` they go to an internal queue, read by iterating the job (text pieces) or ``wait()``.
    """

    def __init__(self, row: _Row, logprobs: int | None, sink: Callable[[Any], None] | None) -> None:
        self.row = row
        self.logprobs = logprobs
        self.result: GenerationResult | None = None
        self.error: BaseException | None = None
        self.cancelled = False
        self.submitted = time.perf_counter()
        self.first_token: float | None = None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._sink = sink if sink is not None else self._queue.put
        self._pending: list[TokenLogprob] = []
        self._done = threading.Event()
        # loop state
        self.seq = -1
        self.fed = 0                                    # prompt tokens evaluated so far
        self.logits: np.ndarray | None = None           # the row's next-token logits, once known

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

    def _finish(self, result: GenerationResult | None, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self._emit(error if error is not None else result)
        self._done.set()

    def __iter__(self) -> Iterator[str]:
        while True:
            event = self._queue.get()
            if isinstance(event, Piece):
                yield event.text
            elif isinstance(event, BaseException):
                raise event
            else:
                return

    def wait(self, timeout: float | None = None) -> GenerationResult:
        """Block until the request ends; its ``GenerationResult`` (or its error, raised)."""
        if not self._done.wait(timeout):
            raise TimeoutError("the request has not finished")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


class Scheduler:
    """Continuous batching over ``model``'s KV cache with up to ``n_parallel`` sequences.

    ``max_queue`` bounds the requests waiting for a free sequence (``QueueFullError`` beyond).
    ``n_batch`` is the number of prompt tokens evaluated per step (default: the model's).
    ``on_step`` (if set) is called on the loop thread after every step, once that step's events
    are out: a consumer can batch its wake-ups. The scheduler owns the model's cache while it runs:
    do not generate with the model elsewhere.
    """

    def __init__(self, model: "Model", *, n_parallel: int | None = None, max_queue: int = 64,
                 n_batch: int | None = None) -> None:
        n_seq = model.cache.n_seq
        n_parallel = n_seq if n_parallel is None else int(n_parallel)
        if not 1 <= n_parallel <= n_seq:
            raise ValueError(f"n_parallel must be in 1..{n_seq} (the model's cache sequences; load it "
                             f"with n_seq_max >= {n_parallel}), got {n_parallel}")
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        self.model, self.n_parallel, self.max_queue = model, n_parallel, max_queue
        self.n_batch = int(n_batch or model.n_batch)
        self._eog = set(model.vocab.eog_ids)
        self._token_bytes = model.vocab.token_bytes
        model.tokenizer                                  # load before requests tokenize concurrently
        self._cv = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._running: list[Job] = []
        self._free = list(range(n_parallel))
        self._stop = False
        self._thread: threading.Thread | None = None
        self.steps = 0
        self.on_step: Callable[[], None] | None = None

    # -- client side --------------------------------------------------------------------------
    def start(self) -> "Scheduler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="halter-scheduler", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the loop; requests still queued or running end with an error."""
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> "Scheduler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    @property
    def n_running(self) -> int:
        return len(self._running)

    def submit(self, request: Request, *, logprobs: int | None = None,
               sink: Callable[[Any], None] | None = None) -> Job:
        """Validate, tokenize and queue ``request``; returns its ``Job`` at once.

        ``logprobs``: report each token's log-probability and this many top alternatives
        (``None``: none). Raises ``ValueError``/``TypeError`` for a bad request and
        ``QueueFullError`` when ``max_queue`` requests are already waiting.
        """
        if request.cfg_negative_prompt is not None:
            raise ValueError("classifier-free guidance is not supported by the scheduler")
        if logprobs is not None and not 0 <= logprobs <= 20:
            raise ValueError(f"top logprobs must be in 0..20, got {logprobs}")
        row = _Row.prepare(self.model, request)
        job = Job(row, logprobs, sink)
        with self._cv:
            if self._stop:
                raise RuntimeError("the scheduler is closed")
            if len(self._waiting) >= self.max_queue + len(self._free):   # the free ones are taken next step
                raise QueueFullError(f"{len(self._waiting) - len(self._free)} requests are already waiting "
                                     f"for one of {self.n_parallel} sequences")
            self._waiting.append(job)
            self._cv.notify_all()
        return job

    # -- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._waiting and not self._running:
                    self._cv.wait()
                if self._stop:
                    break
                self._admit()
            try:
                with torch.inference_mode():
                    self._step()
            except Exception as exc:                     # noqa: BLE001 - a failed step fails its rows only
                for job in list(self._running):
                    self._release(job, error=RuntimeError(f"the decode step failed: {exc}"))
            self._notify()
        for job in list(self._running) + list(self._waiting):
            self._release(job, error=RuntimeError("the server is shutting down"))
        self._notify()

    def _notify(self) -> None:
        if self.on_step is not None:
            try:
                self.on_step()
            except Exception:                            # noqa: BLE001 - a consumer's bug must not stop the loop
                pass

    def _admit(self) -> None:
        for job in [j for j in self._waiting if j.cancelled]:
            self._waiting.remove(job)
            job._finish(None, RuntimeError("cancelled"))
        while self._waiting and self._free:
            job = self._waiting.popleft()
            job.seq = self._free.pop(0)
            self.model.cache.clear(job.seq)
            job.row.sampler.accept_prompt(job.row.prompts[0])
            job.row.seqs = [job.seq]
            self._running.append(job)

    def _release(self, job: Job, error: BaseException | None = None) -> None:
        if job in self._running:
            self._running.remove(job)
            self.model.cache.clear(job.seq)
            with self._cv:
                self._free.append(job.seq)
                self._free.sort()
        elif job in self._waiting:
            self._waiting.remove(job)
        if not job.done:
            job._finish(None if error is not None else job.row.result(), error)

    def _step(self) -> None:
        model = self.model
        for job in [j for j in self._running if j.cancelled]:
            self._release(job, error=RuntimeError("cancelled"))
        # 1. prompt chunks, oldest request first, n_batch tokens in all
        budget = self.n_batch
        for job in self._running:
            prompt = job.row.prompts[0]
            if job.fed >= len(prompt) or budget <= 0:
                continue
            t0 = time.perf_counter()
            chunk = prompt[job.fed:job.fed + budget]
            logits = model.decode([chunk], [job.seq])
            job.fed += len(chunk)
            budget -= len(chunk)
            job.row.timings.prompt_ms += (time.perf_counter() - t0) * 1e3
            if job.fed == len(prompt):
                job.logits = logits[0].float().cpu().numpy()
                if job.row.max_tokens == 0:
                    job.row.done = True
                    self._release(job)
        # 2. sample every row that has logits
        feed: list[Job] = []
        for job in list(self._running):
            if job.logits is None:
                continue
            row = job.row
            t0 = time.perf_counter()
            try:
                token = int(row.sampler.sample(job.logits, row.grammar_first))
                row.sampler.accept(token)
            except Exception as exc:                    # noqa: BLE001 - this request only
                self._release(job, error=exc)
                continue
            if job.logprobs is not None:
                job._pending.append(_logprob(job.logits, token, job.logprobs))
            row.timings.sample_ms += (time.perf_counter() - t0) * 1e3
            if job.first_token is None:
                job.first_token = time.perf_counter()
            job.logits = None
            if _advance(row, token, self._eog, self._token_bytes, len(self._token_bytes)):
                feed.append(job)
            self._flush(job)
            if row.done:
                row.timings.generated_tokens = len(row.tokens)
                row.timings.decode_ms = (time.perf_counter() - job.first_token) * 1e3
                self._release(job)
        # 3. one forward pass for the rows still generating
        if feed:
            feed.sort(key=lambda j: j.seq)               # consecutive sequences: no cache gather
            for job in feed:
                if model.cache.seq_pos_max(job.seq) + 1 >= model.n_ctx:
                    shift_context(model, job.seq, job.row.keep[0], job.row.timings)
            out = model.decode([[j.row.tokens[-1]] for j in feed], [j.seq for j in feed])
            host = out.float().cpu().numpy()
            for k, job in enumerate(feed):
                job.logits = host[k]
        self.steps += 1

    def _flush(self, job: Job) -> None:
        row = job.row
        safe = len(row.out) if row.done else releasable(row.out, row.stops)
        if safe > row.emitted or (job._pending and row.done):
            text = row.out[row.emitted:safe].decode("utf-8", errors="replace")
            row.emitted = max(row.emitted, safe)
            job._emit(Piece(text, job._pending))
            job._pending = []


def _logprob(logits: np.ndarray, token: int, top: int) -> TokenLogprob:
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
