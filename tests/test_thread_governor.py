"""The CPU decode thread governor's choices, driven by a simulated machine (no timing)."""
from __future__ import annotations

from halter.engine.thread_governor import ThreadGovernor


class Machine:
    """Steps whose wall and CPU time depend on the thread count the governor set."""

    def __init__(self, cost: dict[int, tuple[float, float]]) -> None:
        self.cost = cost                  # threads -> (wall seconds, CPU seconds) of one step
        self.wall = self.cpu = 0.0
        self.threads = 2
        self.calls: list[int] = []

    def set_threads(self, n: int) -> None:
        self.threads = n
        self.calls.append(n)

    def run(self) -> None:
        wall, cpu = self.cost[self.threads]
        self.wall += wall
        self.cpu += cpu

    def governor(self, **kw) -> ThreadGovernor:
        return ThreadGovernor(2, clock=lambda: self.wall, cpu_clock=lambda: self.cpu,
                              set_threads=self.set_threads, **kw)


def test_an_idle_machine_keeps_the_full_team() -> None:
    m = Machine({2: (0.010, 0.020), 1: (0.016, 0.016)})      # both cores busy with our threads
    g = m.governor()
    for _ in range(500):
        g.step("b", m.run)
    assert g.n == 2 and m.calls == [] and g.switches == 0


def test_a_waiting_team_moves_to_one_thread_and_back_when_the_cores_free() -> None:
    m = Machine({2: (0.300, 0.300), 1: (0.016, 0.016)})      # one core taken: the team waits
    g = m.governor(window=4, probe_every=20)
    for _ in range(12):
        g.step("b", m.run)
    assert g.n == 1 and m.threads == 1 and g.switches == 1
    for _ in range(40):                                      # still busy: probes lose, one thread stays
        g.step("b", m.run)
    assert g.n == 1 and m.calls[1:].count(2) >= 1 and g.switches == 1
    m.cost[2] = (0.010, 0.020)                               # the other work ended
    for _ in range(30):
        g.step("b", m.run)
    assert g.n == 2 and m.threads == 2 and g.switches == 2


def test_a_trial_that_loses_restores_the_team_and_waits_before_the_next() -> None:
    # a model whose steps leave the second thread idle (small products), yet two threads are faster
    m = Machine({2: (0.010, 0.011), 1: (0.014, 0.014)})
    g = m.governor(window=4)
    for _ in range(8):
        g.step("b", m.run)
    assert m.calls == [1, 2] and g.n == 2                    # tried one thread, kept two
    for _ in range(4 * 4 - 1):
        g.step("b", m.run)
    assert m.calls == [1, 2]                                 # no new trial for four windows
    for _ in range(6):
        g.step("b", m.run)
    assert m.calls[2:4] == [1, 2]


def test_buckets_are_compared_with_themselves() -> None:
    # a trial spanning two buckets compares each with its own kind of step
    m = Machine({2: (0.300, 0.300), 1: (0.016, 0.016)})
    g = m.governor(window=4)
    for i in range(12):
        g.step("short" if i < 6 else "long", m.run)
    assert g.n in (1, 2) and m.threads == g.n


def test_one_thread_is_left_alone() -> None:
    calls = []
    g = ThreadGovernor(1, set_threads=calls.append)
    ran = []
    g.step("b", lambda: ran.append(1))
    assert ran == [1] and calls == []


def test_a_prompt_chunk_whose_team_waited_moves_the_next_steps_to_fewer_threads() -> None:
    m = Machine({2: (0.900, 0.950), 1: (0.160, 0.160)})
    g = m.governor(window=4, probe_every=20)
    assert g.run_chunk(lambda: (m.run(), "logits")[1]) == "logits"
    assert g.n == 1 and m.calls == [1]
    m.cost = {2: (0.500, 1.000), 1: (0.800, 0.800)}          # an idle machine: a chunk changes nothing
    g2 = m.governor()
    m.threads = 2
    g2.run_chunk(m.run)
    assert g2.n == 2 and m.calls == [1]
