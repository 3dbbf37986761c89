"""The ``halter`` command line: ``python -m halter <command> ...`` (also the ``halter`` console script)."""
from __future__ import annotations

import argparse
import sys

from halter.errors import HalterError

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    from halter.cli import validate
    parser = argparse.ArgumentParser(prog="halter", description="Grammar-constrained generation for GGUF models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    validate.add_parser(sub)
    for name in ("run", "schema2gbnf", "compile", "demo", "cache_cmd"):
        try:
            module = __import__(f"halter.cli.{name}", fromlist=["add_parser"])
        except ImportError:
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except HalterError as err:
        print(f"halter {args.command}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as err:
        print(f"halter {args.command}: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130
