"""Continuous batching: the one decode loop. Requests join and leave the running batch between steps.

A ``Scheduler`` owns a model's KV cache sequences. ``submit`` validates and tokenizes a ``Request``
(errors are raised to the caller at once) and queues it; requests are admitted into free cache
sequences (at most ``n_parallel``; a request with classifier-free guidance takes two) between
steps. Each step

1. evaluates up to ``n_batch`` prompt tokens of the requests still reading their prompt, in chunks
   of the model's ``n_batch`` (a long prompt is read over several steps, so it never stalls the
   others for long);
2. samples one token for every row whose logits are ready, each with its own sampler chain, seed,
   grammar and stop strings (on CUDA the grammar masks are computed while the forward pass still
   runs, and a chain with a device version samples on the device), and streams the text;
3. runs one batched forward pass for every row still generating (shifting a full sequence's
   context first, as llama.cpp does).

A finished or cancelled request frees its sequences before the next step, and a request whose
sampling fails (e.g. a grammar dead end) ends with an error event without touching the others.
Results arrive as events on the ``Job`` (a thread-safe queue, or a callback such as an asyncio
loop's ``call_soon_threadsafe``).

``halter serve`` runs the loop on a background thread (``start``/``submit``). ``generate`` and
``generate_batch`` (``halter.engine.generation``) run it on the calling thread: ``enqueue`` the
rows, then ``run`` (or ``stream`` one job's text).
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

import numpy as np
import torch

from halter.engine.generation import Request, _Row, advance, sample_device, sample_host, shift_context
from halter.engine.jobs import Job, JobEvent, Piece, QueueFullError, TokenLogprob, token_logprob
from halter.engine.pieces import releasable
from halter.grammar.bitmask import allocate_bitmask

if TYPE_CHECKING:
    from halter.engine.model import Model

__all__ = ["Job", "Piece", "QueueFullError", "Scheduler", "TokenLogprob"]


class Scheduler:
    """Continuous batching over ``model``'s KV cache with up to ``n_parallel`` sequences.

    ``max_queue`` bounds the requests waiting for a free sequence (``QueueFullError`` beyond).
    ``n_batch`` is the number of prompt tokens evaluated per step (default: the model's).
    ``seqs`` (instead of ``n_parallel``) names the cache sequences to use. ``on_step`` (if set)
    is called on the loop thread after every step, once that step's events are out: a consumer
    can batch its wake-ups. The scheduler owns its sequences while it runs: do not generate with
    the model elsewhere meanwhile.
    """

    def __init__(self, model: "Model", *, n_parallel: int | None = None, max_queue: int = 64,
                 n_batch: int | None = None, seqs: Iterable[int] | None = None) -> None:
        n_seq = model.cache.n_seq
        if seqs is not None:
            free = sorted(set(int(s) for s in seqs))
            if not free or free[0] < 0 or free[-1] >= n_seq:
                raise ValueError(f"sequences must be in 0..{n_seq - 1}, got {free}")
            n_parallel = len(free)
        else:
            n_parallel = n_seq if n_parallel is None else int(n_parallel)
            if not 1 <= n_parallel <= n_seq:
                raise ValueError(f"n_parallel must be in 1..{n_seq} (the model's cache sequences; load it "
                                 f"with n_seq_max >= {n_parallel}), got {n_parallel}")
            free = list(range(n_parallel))
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
        self._free = free
        self._bitmask: np.ndarray | None = None        # grammar masks computed ahead (CUDA)
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
               sink: Callable[[JobEvent], None] | None = None) -> Job:
        """Validate, tokenize and queue ``request``; returns its ``Job`` at once (starts the loop).

        ``logprobs``: report each token's log-probability and this many top alternatives
        (``None``: none). Raises ``ValueError``/``TypeError`` for a bad request and
        ``QueueFullError`` when ``max_queue`` requests are already waiting.
        """
        row = _Row.prepare(self.model, request)
        self.start()
        return self.enqueue(row, logprobs=logprobs, sink=sink)

    def enqueue(self, row: _Row, *, logprobs: int | None = None,
                sink: Callable[[JobEvent], None] | None = None) -> Job:
        """Queue a prepared row (``_Row.prepare``) without starting the loop thread."""
        if logprobs is not None and not 0 <= logprobs <= 20:
            raise ValueError(f"top logprobs must be in 0..20, got {logprobs}")
        if len(row.prompts) > self.n_parallel:
            raise ValueError(f"classifier-free guidance needs two cache sequences; this scheduler has "
                             f"{self.n_parallel}")
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

    def run(self) -> None:
        """Step on the calling thread until every queued request has ended."""
        for _ in self._steps():
            pass

    def stream(self, job: Job) -> Iterator[str]:
        """Step on the calling thread until every queued request has ended, yielding ``job``'s
        text pieces as they come (its error, if it fails, is raised)."""
        for _ in self._steps():
            yield from _drain(job)
        yield from _drain(job)

    def _steps(self) -> Iterator[None]:
        if self._thread is not None:
            raise RuntimeError("this scheduler runs on its own thread; use submit()")
        try:
            while self._waiting or self._running:
                self._admit()
                with torch.inference_mode():
                    self._step()
                yield
        finally:                                         # a failed step (or an abandoned stream)
            for job in list(self._running) + list(self._waiting):
                self._release(job, error=RuntimeError("generation stopped before this request ended"))

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
        while self._waiting and len(self._free) >= len(self._waiting[0].row.prompts):
            job = self._waiting.popleft()
            row = job.row
            row.seqs = [self._free.pop(0) for _ in row.prompts]
            for seq in row.seqs:
                self.model.cache.clear(seq)
            row.sampler.accept_prompt(row.prompts[0])   # penalties see the prompt, grammar does not
            self._running.append(job)

    def _release(self, job: Job, error: BaseException | None = None) -> None:
        if job in self._running:
            self._running.remove(job)
            for seq in job.row.seqs:
                self.model.cache.clear(seq)
            with self._cv:
                self._free.extend(job.row.seqs)
                self._free.sort()
        elif job in self._waiting:
            self._waiting.remove(job)
        if not job.done:
            job._finish(None if error is not None else job.row.result(), error)

    def _step(self) -> None:
        for job in [j for j in self._running if j.cancelled]:
            self._release(job, error=RuntimeError("cancelled"))
        self._read_prompts()
        feed = self._sample()
        if feed:
            self._forward(feed)
        self.steps += 1

    def _read_prompts(self) -> None:
        """Evaluate up to ``n_batch`` prompt tokens, oldest request first, in the model's chunks."""
        model = self.model
        budget = self.n_batch
        for job in list(self._running):
            row = job.row
            try:
                for k, prompt in enumerate(row.prompts):
                    while job.fed[k] < len(prompt) and budget > 0:
                        t0 = time.perf_counter()
                        n = min(budget, model.n_batch, len(prompt) - job.fed[k])
                        logits = model.decode([prompt[job.fed[k]:job.fed[k] + n]], [row.seqs[k]])
                        job.fed[k] += n
                        budget -= n
                        if job.fed[k] == len(prompt):
                            job.logits[k] = logits[0]
                            _sync(model.device)
                        row.timings.prompt_ms += (time.perf_counter() - t0) * 1e3
            except Exception as exc:                    # noqa: BLE001 - this request only
                self._release(job, error=exc)
                continue
            if all(x is not None for x in job.logits) and job.decode_start is None:
                job.decode_start = time.perf_counter()
                if row.max_tokens == 0:
                    row.done = True
                    self._release(job)

    def _sample(self) -> list[Job]:
        """Sample one token for every row whose logits are ready; the rows that go on."""
        ready = [j for j in self._running if all(x is not None for x in j.logits)]
        if not ready:
            return []
        bitmask = None
        if self.model.device.type == "cuda" and any(j.row.matcher is not None for j in ready):
            # the forward pass was launched (async): compute the masks now, for free. On the CPU
            # the sampler checks the chosen token alone and builds a mask only when it needs one
            # (grammar-first, or a rejected token), as llama.cpp's common sampler does.
            if self._bitmask is None:
                self._bitmask = allocate_bitmask(self.model.cache.n_seq, len(self._token_bytes))
            bitmask = self._bitmask
            for job in ready:
                if job.row.matcher is not None:
                    t = time.perf_counter()
                    bitmask[job.row.seqs[0]].fill(-1)
                    job.row.matcher.fill_bitmask(bitmask[job.row.seqs[0]])
                    job.row.timings.mask_ms += (time.perf_counter() - t) * 1e3
        # the one device -> host copy per step; rows sampled on the device bring back their id only
        on_host = [j for j in ready if j.row.device is None or j.logprobs is not None]
        host: dict[int, list[np.ndarray]] = {}
        if on_host and self.model.device.type == "cpu":   # float32 CPU rows: views, no copy
            for j in on_host:
                host[id(j)] = [x.float().numpy() for x in j.logits]  # type: ignore[union-attr]
        elif on_host:
            stacked = torch.stack([x for j in on_host for x in j.logits]).float().cpu().numpy()  # type: ignore[misc]
            n = 0
            for j in on_host:
                host[id(j)] = list(stacked[n:n + len(j.logits)])
                n += len(j.logits)
        feed: list[Job] = []
        n_text = len(self._token_bytes)
        for job in ready:
            row = job.row
            mask = bitmask[row.seqs[0]] if bitmask is not None and row.matcher is not None else None
            try:
                if row.device is not None:
                    token = sample_device(row, job.logits[0], mask)  # type: ignore[arg-type]
                else:
                    rows_h = host[id(job)]
                    token = sample_host(row, rows_h[0], rows_h[1] if len(rows_h) > 1 else None, mask)
            except Exception as exc:                    # noqa: BLE001 - this request only
                self._release(job, error=exc)
                continue
            if job.logprobs is not None:
                job._pending.append(token_logprob(host[id(job)][0], token, job.logprobs))
            if job.first_token is None:
                job.first_token = time.perf_counter()
            job.logits = [None] * len(job.logits)
            if advance(row, token, self._eog, self._token_bytes, n_text):
                feed.append(job)
            self._flush(job)
            if row.done:
                row.timings.generated_tokens = len(row.tokens)
                row.timings.decode_ms = (time.perf_counter() - (job.decode_start or job.first_token)) * 1e3
                self._release(job)
        return feed

    def _forward(self, feed: list[Job]) -> None:
        """One batched forward pass for the rows in ``feed`` (every sequence of each)."""
        model = self.model
        cells: list[tuple[int, Job, int]] = []
        for job in feed:
            try:
                for k, seq in enumerate(job.row.seqs):
                    if model.cache.seq_pos_max(seq) + 1 >= model.n_ctx:
                        shift_context(model, seq, job.row.keep[k], job.row.timings)
                    cells.append((seq, job, k))
            except ValueError as exc:                   # the context cannot shift: this request only
                cells = [c for c in cells if c[1] is not job]
                self._release(job, error=exc)
        if not cells:
            return
        cells.sort(key=lambda c: c[0])                   # consecutive sequences: no cache gather
        out = model.decode([[job.row.tokens[-1]] for _, job, _ in cells], [seq for seq, _, _ in cells])
        for n, (_, job, k) in enumerate(cells):
            job.logits[k] = out[n]

    def _flush(self, job: Job) -> None:
        row = job.row
        safe = len(row.out) if row.done else releasable(row.out, row.stops)
        if safe > row.emitted or (job._pending and row.done):
            text = row.out[row.emitted:safe].decode("utf-8", errors="replace")
            row.emitted = max(row.emitted, safe)
            job._emit(Piece(text, job._pending))
            job._pending = []


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _drain(job: Job) -> Iterator[str]:
    """The text pieces ``job`` has queued so far; raises its error when it failed."""
    while True:
        try:
            event = job._queue.get_nowait()
        except queue.Empty:
            return
        if isinstance(event, Piece):
            if event.text:
                yield event.text
        elif isinstance(event, BaseException):
            raise event
