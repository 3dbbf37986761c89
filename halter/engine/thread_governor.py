"""Fewer threads for CPU decode steps while other work holds the cores.

torch's CPU operators split their work over a team of threads that meet at a barrier after every
operator. When another process holds one of the cores, the team's thread there waits for the
scheduler and every operator of a decode step waits with it: on a 2-core machine with one core
busy, SmolLM2-135M's token took 250-500 ms with two threads and 16.6 ms with one (10.6 ms with two
on an idle machine).

``ThreadGovernor`` runs each decode step and watches the step's wall time and the CPU time the
process got meanwhile. A team that gets markedly fewer cores' worth of CPU time than it has
threads is waiting: the governor then tries the team the CPU time suggests, keeps whichever ran
the same bucket of steps faster (medians of its last steps), and while on fewer threads it tries
the full team again every ``probe_every`` steps. A prompt chunk whose team waited moves the next
steps to the smaller team at once. On an idle machine the team gets its cores and nothing changes
but two clock reads a step. It is used only when the thread count was left to
halter (``Model.load(n_threads=None)``).
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Callable, Hashable

import torch


class ThreadGovernor:
    """Chooses the thread count of each decode step (between 1 and ``n_threads``).

    ``step(key, run)`` runs ``run()`` with the current count; ``key`` names steps of comparable
    cost (a decode bucket). ``window`` steps make a median; ``probe_every`` steps on a reduced
    team pass before the full team is tried again. ``clock``/``cpu_clock``/``set_threads`` are
    replaceable for tests.
    """

    def __init__(self, n_threads: int, *, window: int = 6, probe_every: int = 256,
                 clock: Callable[[], float] = time.perf_counter,
                 cpu_clock: Callable[[], float] = time.process_time,
                 set_threads: Callable[[int], None] = torch.set_num_threads) -> None:
        self.full = max(1, int(n_threads))
        self.n = self.full
        self.window, self.probe_every = window, probe_every
        self._clock, self._cpu_clock, self._set_threads = clock, cpu_clock, set_threads
        self._times: dict[tuple[Hashable, int], deque[float]] = {}
        self._usage: deque[float] = deque(maxlen=window)   # cores' worth of CPU time, full team
        self._trial: int | None = None                      # the count on trial, when trying one
        self._trial_left = 0
        self._since_switch = 4 * window                    # the first window may trigger a trial
        self.switches = 0

    def step(self, key: Hashable, run: Callable[[], None]) -> None:
        if self.full == 1:
            run()
            return
        n = self.n if self._trial is None else self._trial
        wall, cpu = self._clock(), self._cpu_clock()
        run()
        wall, cpu = self._clock() - wall, self._cpu_clock() - cpu
        self._times.setdefault((key, n), deque(maxlen=self.window)).append(wall)
        if n == self.full and wall > 0:
            self._usage.append(cpu / wall)
        self._decide(key, n)

    def run_chunk(self, run: Callable[[], object]) -> object:
        """Run a prompt chunk (a long step, rarely repeated) with the current count: if the full
        team got fewer cores' worth of CPU time than it has threads, the next steps start on the
        team that CPU time suggests (the full team is tried again after ``probe_every`` steps)."""
        if self.full == 1 or self._trial is not None:
            return run()
        wall, cpu = self._clock(), self._cpu_clock()
        out = run()
        wall, cpu = self._clock() - wall, self._cpu_clock() - cpu
        if self.n == self.full and wall > 0 and cpu / wall < self.full - 0.5:
            self._use(max(1, min(self.full - 1, int(cpu / wall + 0.25))))
            self._since_switch = 0
        return out

    def _median(self, key: Hashable, n: int) -> float | None:
        times = self._times.get((key, n))
        return statistics.median(times) if times is not None and len(times) >= self.window else None

    def _decide(self, key: Hashable, n: int) -> None:
        if self._trial is not None:                          # a trial runs its window, then compares
            self._trial_left -= 1
            if self._trial_left > 0:
                return
            trial, self._trial = self._trial, None
            mine, theirs = self._median(key, trial), self._median(key, self.n)
            if mine is not None and (theirs is None or mine < theirs):
                self._use(trial)
            else:
                self._set_threads(self.n)
            self._since_switch = 0
            self._usage.clear()
            return
        self._since_switch += 1
        if self.n == self.full:
            # a team that gets fewer cores' worth of CPU time than it has threads is waiting (after
            # a trial that lost, a few windows pass before the next)
            if len(self._usage) == self.window and self._since_switch >= 4 * self.window \
                    and statistics.median(self._usage) < self.full - 0.5:
                cores = statistics.median(self._usage)
                self._try(max(1, min(self.full - 1, int(cores + 0.25))))
                self._usage.clear()
        elif self._since_switch >= self.probe_every:
            self._try(self.full)

    def _try(self, n: int) -> None:
        self._trial, self._trial_left = n, self.window
        self._set_threads(n)

    def _use(self, n: int) -> None:
        if n != self.n:
            self.switches += 1
        self.n = n
        self._set_threads(n)

    def __repr__(self) -> str:
        return f"ThreadGovernor(full={self.full}, n={self.n}, switches={self.switches})"
