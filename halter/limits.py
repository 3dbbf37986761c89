"""Every size and depth limit halter enforces on its input, in one documented object.

Input within these limits never exhausts Python's stack or runs unbounded; input beyond them
raises ``halter.errors.LimitError`` naming the limit, the place and how to raise it. Defaults are
listed in ``docs/limits.md``. Change them for the process with ``halter.limits.set(name=value)``
or the environment variable ``HALTER_LIMIT_<NAME>`` (read at import).
"""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

from halter.errors import LimitError


@dataclasses.dataclass
class Limits:
    """The limits in force. Each field is one limit; see docs/limits.md for what it bounds."""

    #: Nesting depth of groups, repetitions and rule references in a grammar, and of
    #: subschemas in a JSON Schema.
    nesting_depth: int = 1000

    #: Values of one JSON Schema ``enum`` (each becomes part of the grammar).
    enum_values: int = 100_000

    #: String lengths and item/property counts a JSON Schema bound may name (``minLength``,
    #: ``maxItems``, ...). A larger upper bound counts as no bound; a larger lower bound is an error.
    length_bound: int = 1_000_000

    #: Nesting of arrays inside GGUF metadata arrays.
    gguf_metadata_depth: int = 16

    #: Dimensions of one GGUF tensor (ggml has at most 4).
    tensor_dims: int = 4

    #: Transformer blocks (``<arch>.block_count``) a GGUF model may declare; checked before any
    #: per-layer structure is made.
    model_layers: int = 4096
    #: Parser work (Earley items walked, contexts made and merged) one matcher call may do per
    #: byte it reads (plus 16 bytes' worth), counted over the call; ``LimitError`` past it.
    #: Grammars that are not highly ambiguous stay under 50 per byte.
    match_work: int = 10_000

    #: Bytes of one HTTP request body accepted by ``halter serve`` (larger bodies get 413).
    request_body_bytes: int = 16 * 1024 * 1024


LIMITS = Limits()


def _from_environment() -> None:
    for field in dataclasses.fields(Limits):
        raw = os.environ.get(f"HALTER_LIMIT_{field.name.upper()}")
        if raw is not None:
            try:
                setattr(LIMITS, field.name, type(field.default)(raw))
            except ValueError:
                raise LimitError(field.name, raw, "a number",
                                 where=f"environment variable HALTER_LIMIT_{field.name.upper()}",
                                 what="unreadable limit") from None


def set(**values: Any) -> None:  # noqa: A001 - halter.limits.set(...) reads as intended
    """Change limits for this process: ``halter.limits.set(nesting_depth=5000)``."""
    names = {f.name for f in dataclasses.fields(Limits)}
    for name, value in values.items():
        if name not in names:
            raise TypeError(f"unknown limit {name!r} (known: {', '.join(sorted(names))})")
        setattr(LIMITS, name, value)


def check(name: str, value: int, where: str = "", what: str = "") -> None:
    """Raise ``LimitError`` when ``value`` exceeds the limit ``name``."""
    maximum = getattr(LIMITS, name)
    if value > maximum:
        raise LimitError(name, value, maximum, where=where, what=what)


def nesting_of(value: Any) -> int:
    """The nesting depth of JSON data (lists and dicts), measured without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))
    return deepest


_T = TypeVar("_T")
_DEEP_STACK = 256 * 1024 * 1024           # bytes of stack for a deep call's thread (reserved, touched lazily)
_DEEP_RECURSION = 30_000                  # Python frames a deep call may use
_deep_lock = threading.Lock()
_deep_active = threading.local()


def deep_call(fn: Callable[..., _T], *args: Any, where: str = "", **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` with room for the recursion that input within the limits needs.

    Recursive algorithms over nested input (JSON Schema walks, jsonschema's metaschema check,
    grammar automata) run in a thread with a large stack and a raised recursion limit, so input
    within ``nesting_depth`` cannot exhaust Python's stack; should it still run out (a structure
    deep in another way, such as a very long ``$ref`` chain), the ``RecursionError`` becomes a
    ``LimitError`` naming ``nesting_depth``. Nested deep calls run in place.
    """
    if getattr(_deep_active, "on", False):
        return _limited(fn, args, kwargs, where)
    import contextvars
    context = contextvars.copy_context()
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        _deep_active.on = True
        try:
            box["value"] = context.run(_limited, fn, args, kwargs, where)
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread as is
            box["error"] = err
        finally:
            done.set()

    with _deep_lock:
        old_size = threading.stack_size()
        try:
            threading.stack_size(_DEEP_STACK)
            worker = threading.Thread(target=target, name="halter-deep-call", daemon=True)
        finally:
            threading.stack_size(old_size)
        old_limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old_limit, _DEEP_RECURSION))
        try:
            worker.start()
            try:
                done.wait()      # (not join: before Python 3.13 an interrupted join marks a running thread stopped)
            except BaseException:
                # the caller was interrupted (Ctrl-C, a signal handler's exception, a timeout): the
                # work is abandoned, so stop it rather than leave it burning CPU behind the caller
                _stop(worker, done)
                raise
            worker.join()
        finally:
            sys.setrecursionlimit(old_limit)
    if "error" in box:
        err = box.pop("error")
        raise err.with_traceback(err.__traceback__)
    return box["value"]


class DeepCallAbandoned(BaseException):
    """Raised inside a deep call's thread when the caller stopped waiting for it."""


def _stop(worker: threading.Thread, done: threading.Event, wait_s: float = 10.0) -> None:
    """Raise ``DeepCallAbandoned`` in ``worker`` at its next Python instruction and wait for it to end.

    Work inside one long C call (a regular expression, a compiled kernel) ends when that call
    returns; the wait is bounded so the caller's own exception is never held up for long.
    """
    import ctypes
    if worker.ident is None or done.is_set():
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident), ctypes.py_object(DeepCallAbandoned))
    try:
        done.wait(wait_s)
    except BaseException:  # noqa: BLE001 - a second interruption: the exception is already on its way
        pass


@contextmanager
def bounded_recursion(frames: int = 2000) -> Iterator[None]:
    """Run third-party recursive code with at most ``frames`` more Python frames than the caller's.

    A deep call raises the recursion limit for halter's own walks, whose frames cost little C
    stack; jsonschema's validator recurses through generators, several C frames per level, so a
    ``$ref`` that reaches itself without reading anything (``d: {"$ref": "#/$defs/d"}``) would
    overflow the thread's stack (a segmentation fault) long before that limit. Inside this block
    it ends in ``RecursionError`` instead, which the caller handles. Deep calls run one at a
    time, so the lowered limit is only seen by threads far shallower than it.
    """
    depth, f = 0, sys._getframe()
    while f is not None:
        depth += 1
        f = f.f_back
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(min(old, depth + frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _limited(fn: Callable[..., _T], args: tuple, kwargs: dict, where: str) -> _T:
    try:
        return fn(*args, **kwargs)
    except RecursionError:
        raise LimitError("nesting_depth", "more", LIMITS.nesting_depth, where=where,
                         what="input nested or chained too deeply to process") from None


_from_environment()
