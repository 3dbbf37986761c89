"""``halter validate GRAMMAR INPUT``: does the input match the grammar, and where does it first fail?"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("validate", help="check a text file against a GBNF grammar (like llama.cpp's gbnf-validator)")
    p.add_argument("grammar", help="GBNF grammar file")
    p.add_argument("input", help="text file to check ('-' for standard input)")
    p.add_argument("--root", default="root", help="start rule (default: root)")
    p.set_defaults(func=run)


def position_of(data: bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column in characters) of byte ``offset`` in ``data``."""
    before = data[:offset].decode("utf-8", "replace")
    line = before.count("\n") + 1
    column = len(before) - (before.rfind("\n") + 1) + 1
    return line, column


def run(args: argparse.Namespace) -> int:
    from halter.grammar import Grammar
    from halter.cli.inputs import read_text
    from halter.errors import HalterError
    grammar = Grammar.from_gbnf(read_text(args.grammar, "grammar file"), root=args.root)
    try:
        data = sys.stdin.buffer.read() if args.input == "-" else Path(args.input).read_bytes()
    except OSError as err:
        raise HalterError(f"cannot read input file {args.input!r}: {err.strerror or err}") from None
    matcher = grammar.matcher()
    fail = matcher.first_failure(data)
    if fail is None:
        matcher.accept_bytes(data)
        if matcher.is_accepting():
            print("valid")
            return 0
        line, col = position_of(data, len(data))
        print(f"invalid: the input ended too early (line {line}, column {col}): the grammar expects more")
        return 1
    line, col = position_of(data, fail)
    text = data.decode("utf-8", "replace")
    src_line = text.splitlines()[line - 1] if text.splitlines() else ""
    bad = data[fail:fail + 4].decode("utf-8", "replace")[:1] or "?"
    print(f"invalid: unexpected {bad!r} at line {line}, column {col}")
    print(f"    {src_line}\n    {' ' * (col - 1)}^")
    return 1
