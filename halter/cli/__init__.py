"""The ``halter`` command line: ``python -m halter <command> ...`` (also the ``halter`` console script)."""
from __future__ import annotations

import argparse
import sys

from halter.errors import HalterError

EXIT_OK, EXIT_BAD_INPUT, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line (and exit code 2)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from halter.cli import validate
    parser = _Parser(prog="halter", description="Grammar-constrained generation for GGUF models.")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, print the Python traceback too (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    validate.add_parser(sub)
    for name in ("run", "schema2gbnf", "compile", "demo", "cache_cmd", "pull", "serve"):
        try:
            module = __import__(f"halter.cli.{name}", fromlist=["add_parser"])
        except ImportError:
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0 ok, 1 bad input, 2 usage, 3 incomplete output).

    Every failure is a message on stderr, never a traceback (``--debug`` adds one).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:              # argparse: --help (0) or a usage error (2)
        return int(exit_.code or 0)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except (HalterError, OSError, ValueError, RecursionError, MemoryError) as err:
        _report(args.command, err, debug)
        return EXIT_BAD_INPUT
    except Exception as err:  # noqa: BLE001 - a bug: still one line, the traceback with --debug
        _report(args.command, err, debug, bug=True)
        return EXIT_BAD_INPUT


def _report(command: str, err: BaseException, debug: bool, bug: bool = False) -> None:
    if debug:
        import traceback
        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    if isinstance(err, RecursionError):
        text = "the input is nested too deeply to process"
    elif isinstance(err, MemoryError):
        text = "out of memory while processing the input"
    else:
        text = str(err) or type(err).__name__
    if bug:
        text = f"internal error ({type(err).__name__}: {text}); please report it (--debug shows the traceback)"
    print(f"halter {command}: {text}", file=sys.stderr)
