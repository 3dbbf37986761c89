"""An interrupted compile stops: Ctrl-C or a signal handler's exception during a schema compile
leaves no thread behind still compiling (and charging CPU to the process)."""
from __future__ import annotations

import random
import signal
import threading
import time

import pytest

from halter import Grammar
from halter.limits import deep_call

pytestmark = pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="needs POSIX interval timers")


class _Interrupted(Exception):
    pass


def _raise(*_: object) -> None:
    raise _Interrupted()


def _deep_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "halter-deep-call" and t.is_alive()]


def _interrupt_after(seconds: float, fn, *args):
    old = signal.signal(signal.SIGALRM, _raise)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        with pytest.raises(_Interrupted):
            fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _cpu_while_idle(seconds: float) -> float:
    cpu = time.process_time()
    time.sleep(seconds)
    return time.process_time() - cpu


def test_an_interrupted_deep_call_stops_its_thread() -> None:
    def spin() -> None:
        while True:
            pass
    _interrupt_after(0.2, deep_call, spin)
    assert _deep_threads() == []
    assert _cpu_while_idle(0.5) < 0.25


def test_an_interrupted_schema_compile_stops_compiling() -> None:
    rng = random.Random(1)
    # an enum of 10,000 mixed values: a few seconds of compile work, interrupted well before the end
    values = [rng.choice([rng.random(), f"s{i}-" + "x" * rng.randint(1, 30), i, None, [i], {"k": i}])
              for i in range(10_000)]
    schema = {"enum": values}
    _interrupt_after(0.3, Grammar.from_json_schema, schema)
    assert _deep_threads() == []
    assert _cpu_while_idle(0.5) < 0.25
    assert schema == {"enum": values}                # the user's schema is untouched
    assert Grammar.from_json_schema({"enum": [1, "a"]}).matches('"a"')     # and compiling still works
