"""``halter compile GRAMMAR --vocab MODEL.gguf``: compile a grammar for a vocabulary and report.

Prints the compile time (grammar build and compile; token tables are built when a matcher first
needs them), the time to build every position's token tables at once, the table sizes and where
the cache (grammars and token tries) lives.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from halter.cli.inputs import parse_json, read_text
from halter.errors import HalterError


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compile", help="compile a grammar for a model's vocabulary; report time and sizes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("grammar", help="GBNF file (or a JSON Schema file with --json-schema; '-' = stdin)")
    p.add_argument("--vocab", required=True, metavar="MODEL.gguf", help="GGUF file whose vocabulary to use")
    p.add_argument("--json-schema", action="store_true", help="the input is a JSON Schema, not GBNF")
    p.add_argument("--root", default="root", help="start rule of a GBNF grammar (default: root)")
    p.set_defaults(func=run)


def _size(n_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    return ""  # pragma: no cover


def table_bytes(compiled: Any) -> int:
    """Bytes held by the compiled grammar's numpy tables."""
    import numpy as np
    rows = [x for x in compiled.pos_acc + compiled.pos_esc if x is not None]
    return sum(v.nbytes for v in list(vars(compiled).values()) + rows if isinstance(v, np.ndarray))


def run(args: argparse.Namespace) -> int:
    from halter.constraints import resolve
    from halter.grammar import Grammar
    from halter.grammar.compiled import cache_dir
    from halter.vocab.vocabulary import Vocabulary

    name = "<stdin>" if args.grammar == "-" else args.grammar
    text = read_text(args.grammar, "schema file" if args.json_schema else "grammar file")
    t = time.perf_counter()
    vocab = Vocabulary.from_gguf(args.vocab)
    t_vocab = time.perf_counter() - t
    if args.json_schema:
        schema = _json(text, name)

        def build() -> Any:
            return resolve(json_schema=schema).grammar
    else:
        def build() -> Any:
            return Grammar.from_gbnf(text, root=args.root) if args.root != "root" else resolve(grammar=text).grammar
    t = time.perf_counter()
    try:
        grammar = build()
    except HalterError as err:
        raise HalterError(f"{name}: {err}") from None
    cold = grammar.compile(vocab, cache=False, progress=False)
    t_cold = time.perf_counter() - t
    t = time.perf_counter()
    cold.precompute(progress=False)
    t_tables = time.perf_counter() - t
    print(f"grammar      {name}: {len(grammar.rules)} rules, {grammar._automata.n_positions} positions")
    print(f"vocabulary   {args.vocab}: {vocab.size} tokens (read in {t_vocab * 1e3:.0f} ms)")
    print(f"compile      {t_cold * 1e3:.1f} ms; all token tables at once {t_tables * 1e3:.1f} ms "
          f"(built on need otherwise)")
    print(f"tables       {_size(table_bytes(cold))} (accepted-token masks {cold.acc_bits.shape[0]} x "
          f"{cold.acc_bits.shape[1]} words, {len(cold.esc_nodes)} escaping entries)")
    print(f"cache        {cache_dir()}")
    return 0


def _json(text: str, name: str) -> Any:
    return parse_json(text, name)
