"""Optional JIT compilation with numba, loaded on first use.

numba is a dependency but optional at run time: ``numba_module()`` is None where it is not
installed or where ``HALTER_NO_NUMBA`` is set, and every compiled kernel in halter has a pure
Python or numpy fallback that the tests compare it with. numba (and llvmlite) are imported only
when a kernel is first needed, never when halter is imported.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable, TypeVar

T = TypeVar("T")
_module: list[Any] = []          # [numba or None], after the first call
_built: dict[Callable[..., Any], Any] = {}


def numba_module() -> Any:
    """The numba module, or None without numba (or with ``HALTER_NO_NUMBA`` set)."""
    if not _module:
        try:                                   # pragma: no cover - depends on the environment
            if os.environ.get("HALTER_NO_NUMBA"):
                raise ImportError("HALTER_NO_NUMBA is set")
            import numba
            _module.append(numba)
        except ImportError:                    # pragma: no cover
            _module.append(None)
    return _module[0]


def available() -> bool:
    """Would ``numba_module()`` find numba? Answered without importing it (that costs ~0.5 s)."""
    if _module:
        return _module[0] is not None
    return not os.environ.get("HALTER_NO_NUMBA") and importlib.util.find_spec("numba") is not None


def build_once(build: Callable[[Any], T]) -> T | None:
    """``build(numba)`` the first time (its result kept), or None without numba."""
    if build not in _built:
        nb = numba_module()
        _built[build] = None if nb is None else build(nb)
    return _built[build]


def built(build: Callable[[Any], T]) -> T | None:
    """What ``build_once(build)`` returned before, or None if it has not been called yet."""
    return _built.get(build)
