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


class GrammarWarning(UserWarning):
    """A grammar construct llama.cpp accepts that is probably not what was meant (a class that
    matches nothing, ``[]``, a rule defined twice, ...), or where halter departs from llama.cpp on
    purpose (left recursion). ``line`` and ``column`` (1-based) point at it; ``kind`` names the
    family (``"dead-end"``, ``"empty-class"``, ``"redefined"``, ``"unbounded"``,
    ``"left-recursion"``, ``"trap"``)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 kind: str = "trap") -> None:
        self.message, self.line, self.column, self.kind = message, line, column, kind
        where = f" at line {line}, column {column}" if line is not None else ""
        super().__init__(f"{message}{where}")


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


class RuleTooComplex(GrammarError):
    """A rule's DFA passed ``grammar.automaton.MAX_DFA_STATES`` (a ``GrammarError``; callers that can
    rewrite the rules, such as ``Grammar.from_regex``, catch it by type). ``rule`` names it (an
    auxiliary rule's name starts with its source rule's, then ``--``)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None,
                 text: str | None = None, rule: str | None = None) -> None:
        super().__init__(message, line, column, text)
        self.rule = rule


class NeverMatches(GrammarError):
    """The root rule has no finite derivation (a ``GrammarError``; ``Grammar.from_json_schema``
    reports it as a schema that accepts nothing)."""


class RegexError(SchemaError):
    """A malformed regular expression; ``position`` is the 0-based offset in the pattern."""

    def __init__(self, message: str, pattern: str, position: int, pointer: str = "",
                 keyword: str | None = "pattern") -> None:
        self.pattern = pattern
        self.position = position
        super().__init__(f"{message} at offset {position} in regex {pattern!r}", pointer, keyword)


class UnsupportedRegexError(RegexError, UnsupportedSchemaError):
    """A valid regex using a construct no grammar can express (backreference, lookaround, ...)."""


class SchemaWarning(UserWarning):
    """A keyword dropped in lenient mode; the grammar then accepts more than the schema."""


class ChatTemplateError(HalterError, ValueError):
    """The model has no chat template, or the template rejected the messages."""


class ConstraintError(HalterError, ValueError):
    """A request's constraint arguments are malformed (the message names the key)."""


class ApiError(Exception):
    """An error answer of ``halter serve``: HTTP ``status`` and OpenAI's ``{"error": {message, type, param,
    code}}``. Not a ``HalterError``: the server turns it into a response, it never reaches a caller."""

    TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
             413: "invalid_request_error", 429: "rate_limit_error", 500: "server_error",
             503: "unavailable_error"}

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None) -> None:  # noqa: A002 - OpenAI's field name
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or self.TYPES.get(status, "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _caret_context(text: str, line: int | None, column: int | None) -> str:
    """The source line ``line`` with a caret under ``column``.

    Lines end where the grammar's own lines end (``\n``, ``\r\n`` or a lone ``\r``), not at
    every character ``str.splitlines`` splits on (``\u2028``, form feeds, ...); characters that
    would not show as one column (controls, separators) show as ``?``, and tabs stay tabs under
    the caret so that it lines up.
    """
    if line is None or column is None:
        return ""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not 1 <= line <= len(lines):
        return ""
    src = "".join(c if c == "\t" or c.isprintable() else "?" for c in lines[line - 1])
    pad = "".join("\t" if c == "\t" else " " for c in src[:max(column - 1, 0)])
    pad += " " * max(column - 1 - len(src), 0)
    return f"    {src}\n    {pad}^"


class MissingDependencyError(HalterError, ImportError):
    """A constraint needs an optional package that is not installed."""


class QueueFullError(HalterError, RuntimeError):
    """The scheduler's waiting queue is full; try again later."""
