"""The exceptions halter raises: one root, each also a familiar builtin."""
from __future__ import annotations

from typing import Any


class HalterError(Exception):
    """Root of every error halter raises on purpose."""


class GrammarError(HalterError, ValueError):
    """A grammar that cannot be parsed or compiled.

    ``line`` and ``column`` are 1-based and point at the offending character
    (both ``None`` when the problem has no single place, e.g. a missing root).
    ``context`` is the offending line with a caret under the column.
    """

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 text: str | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.context = _caret_context(text, line, column) if text is not None else ""
        where = f" at line {line}, column {column}" if line is not None else ""
        full = f"{message}{where}"
        if self.context:
            full += "\n" + self.context
        super().__init__(full)


class SchemaError(HalterError, ValueError):
    """An invalid JSON Schema (or regex), with the JSON pointer of the problem."""

    def __init__(self, message: str, pointer: str = "", keyword: str | None = None) -> None:
        self.message = message
        self.pointer = pointer
        self.keyword = keyword
        where = f" (at {pointer or '#'})"
        super().__init__(message + where)


class UnsupportedSchemaError(SchemaError):
    """A schema keyword a grammar cannot enforce (raised in strict mode)."""


class ModelLoadError(HalterError, OSError):
    """A model or vocabulary file that cannot be loaded; names the file and the field.

    Printed as ``PATH: MESSAGE (field 'FIELD')``, the way compilers name the file first.
    """

    def __init__(self, message: str, path: Any = None, field: str | None = None) -> None:
        self.path = None if path is None else str(path)
        self.field = field
        self.message = message
        text = message if path is None else f"{path}: {message}"
        if field and field not in message:
            text += f" (field {field!r})"
        super().__init__(text)

    def __str__(self) -> str:
        return self.args[0] if self.args else self.message


class FetchError(HalterError, OSError):
    """A model that could not be downloaded or failed its checksum.

    ``network`` is True when the cause is that the server could not be reached (no network,
    DNS failure, timeout): callers such as the demo fall back to a local model then.
    """

    def __init__(self, message: str, *, network: bool = False) -> None:
        self.network = network
        super().__init__(message)


class IncompleteOutputError(HalterError):
    """The output is not a complete match (e.g. max_tokens ran out before the grammar could end)."""

    def __init__(self, message: str, completion: Any = None) -> None:
        self.completion = completion
        super().__init__(message)


class NoValidTokenError(HalterError, RuntimeError):
    """The grammar allows no token of the vocabulary here (a dead end); never sample outside the mask."""


class LimitError(HalterError, ValueError):
    """Input beyond one of halter's documented limits (``halter.limits``).

    ``limit`` is the limit's name (an attribute of ``halter.limits.Limits``), ``value`` what the
    input needed, ``maximum`` the limit in force, ``where`` the place in the input (line/column,
    JSON pointer or GGUF field). The message says how to raise the limit.
    """

    def __init__(self, limit: str, value: Any, maximum: Any, where: str = "",
                 what: str = "") -> None:
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.where = where
        desc = what or limit.replace("_", " ")
        text = f"{desc}: {value} exceeds the limit of {maximum}"
        if where:
            text += f" at {where}"
        text += (f" (raise it with halter.limits.set({limit}=...) or the environment variable "
                 f"HALTER_LIMIT_{limit.upper()})")
        super().__init__(text)


def _caret_context(text: str, line: int | None, column: int | None) -> str:
    if line is None or column is None:
        return ""
    lines = text.splitlines() or [""]
    if not 1 <= line <= len(lines):
        return ""
    src = lines[line - 1]
    return f"    {src}\n    {' ' * (column - 1)}^"
