"""Reading the command line's input files and checking its argument values.

Every problem becomes a ``HalterError`` with a one-line message naming the file and the place
(exit code 1), or an argparse error for a malformed argument (exit code 2); never a traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from halter.errors import HalterError


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of ``path`` ('-': standard input)."""
    name = "<stdin>" if path == "-" else path
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as err:
        raise HalterError(f"cannot read {what} {name!r}: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise HalterError(f"{what} {name!r} is not UTF-8 text: byte 0x{data[err.start]:02x} at line {line}, "
                          f"column {column} (byte offset {err.start})") from None


def parse_json(text: str, where: str) -> Any:
    """JSON data from ``text``; ``where`` names its source in the message."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise HalterError(f"{where}: not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    except RecursionError:
        raise HalterError(f"{where}: JSON nested too deeply to read") from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def device(text: str) -> str:
    """argparse type: a torch device halter runs on (cpu, cuda, cuda:N, mps)."""
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda", "mps") or (index and not index.isdigit()):
        raise argparse.ArgumentTypeError(f"unknown device {text!r} (use cpu, cuda, cuda:N or mps)")
    return text
