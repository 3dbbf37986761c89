"""Every size and depth limit halter enforces on its input, in one documented object.

Input within these limits never exhausts Python's stack or runs unbounded; input beyond them
raises ``halter.errors.LimitError`` naming the limit, the place and how to raise it. Defaults are
listed in ``docs/limits.md``. Change them for the process with ``halter.limits.set(name=value)``
or the environment variable ``HALTER_LIMIT_<NAME>`` (read at import).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

from halter.errors import LimitError


@dataclasses.dataclass
class Limits:
    """The limits in force. Each field is one limit; see docs/limits.md for what it bounds."""

    #: Nesting depth of groups, repetitions and rule references in a grammar, and of
    #: subschemas in a JSON Schema.
    nesting_depth: int = 1000

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


_from_environment()
