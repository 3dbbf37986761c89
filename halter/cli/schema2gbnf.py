"""``halter schema2gbnf SCHEMA.json|-``: print the GBNF grammar for a JSON Schema.

Like llama.cpp's ``json_schema_to_grammar.py``, but strict by default: a keyword the grammar
cannot enforce is an error naming its JSON pointer (``--lenient`` drops it with a warning).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from halter.cli.inputs import parse_json, read_text


def add_parser(sub: Any) -> None:
    p = sub.add_parser("schema2gbnf", help="convert a JSON Schema to a GBNF grammar",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("schema", help="JSON Schema file ('-' for standard input)")
    p.add_argument("--whitespace", choices=("flexible", "compact"), default="flexible",
                   help="whitespace between JSON tokens: flexible (bounded, default) or compact (none)")
    p.add_argument("--lenient", action="store_true",
                   help="drop keywords a grammar cannot enforce (with a warning) instead of failing")
    p.add_argument("--closed-objects", action="store_true",
                   help="forbid properties not listed in 'properties' (llama.cpp's default)")
    p.add_argument("--target", choices=("json-schema", "pydantic"), default="json-schema",
                   help="whose validity to follow: the JSON Schema spec (default) or Pydantic's parser "
                        "(a schema made by model_json_schema: no leap seconds or lone surrogates, "
                        "Pydantic's IP and base64 formats)")
    p.add_argument("--prop-order", default="", metavar="A,B",
                   help="emit these properties first, in this order, instead of any order")
    p.add_argument("-o", "--output", help="write the grammar to this file instead of standard output")
    p.set_defaults(func=run)


def load_schema(path: str) -> Any:
    """The schema in ``path`` ('-' = stdin); ``HalterError`` naming the file, line and column."""
    name = "<stdin>" if path == "-" else path
    return parse_json(read_text(path, "schema file"), name)


def run(args: argparse.Namespace) -> int:
    from halter.errors import SchemaError
    from halter.schemas import json_schema_to_gbnf

    schema = load_schema(args.schema)
    order = [k.strip() for k in args.prop_order.split(",") if k.strip()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            gbnf = json_schema_to_gbnf(schema, whitespace=args.whitespace, strict=not args.lenient,
                                       closed_objects=args.closed_objects, prop_order=order or None,
                                       target=args.target)
        except SchemaError as err:
            name = "<stdin>" if args.schema == "-" else args.schema
            raise type(err)(f"{name}: {err.message}", err.pointer, err.keyword) from None
    for w in caught:
        print(f"halter schema2gbnf: warning: {w.message}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(gbnf + ("" if gbnf.endswith("\n") else "\n"), encoding="utf-8")
    else:
        sys.stdout.write(gbnf + ("" if gbnf.endswith("\n") else "\n"))
    return 0
