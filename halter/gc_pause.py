"""Python's cyclic garbage collector held off while a grammar is built.

Building a grammar allocates many small containers that all stay alive until the build ends
(syntax trees, NFA edge lists, DFA rows, subsets). CPython's collector counts those allocations and
keeps scanning them, finding nothing to free; and every few hundred thousand of them it runs a full
collection that walks the whole heap, vocabularies and models included (40 ms in a process holding
a 102k-token vocabulary, on one schema compile of 270 ms). ``paused()`` turns automatic collection
off for the duration of a build and back on after it (reference counting still frees everything
that is not in a cycle): the work left, one collection of what the build kept, happens once after.
The pause is process-wide (Python has one collector): cyclic garbage other threads make while a
build runs waits for its end (a build takes milliseconds; the largest inputs ``limits.md`` allows,
seconds).

Nested and concurrent builds share one pause: the collector comes back on when the last one ends,
and only if it was on when the first began (an application that turned it off keeps it off).
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """Automatic garbage collection off inside the block (see the module docstring)."""
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
