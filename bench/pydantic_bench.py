"""Do Pydantic models' grammars only produce what Pydantic parses? Per field type, both targets.

For each type, a one-field model ``M(v: T)``; its grammar is built twice: from the model's JSON
Schema as JSON Schema means it (``Grammar.from_json_schema(M.model_json_schema())``) and as
``Grammar.from_pydantic(M)`` builds it (``target="pydantic"`` and halter's schema generator).
Random instances are drawn from each grammar (random alternatives, bounded depth, seeded) and
given to ``M.model_validate_json``; the table gives the share Pydantic refuses, and the most
common error type. Correctness, not speed: run by hand, results in docs/json_schema.md.

``--models N`` instead builds N random models (fields drawn from the types above, nested models,
lists, dicts, unions, tuples, aliases, ``extra`` and ``strict`` settings) and checks ``--draws``
instances of each, with the pydantic target. Pydantic itself can fail on a valid instance with a
``ValueError`` rather than refuse it (pydantic 2.13: a union holding ``Decimal`` hands a
three-item list to ``Decimal()``, which reads it as a (sign, digits, exponent) tuple); those are
counted apart, by message, and not as refusals.

Run: ``python bench/pydantic_bench.py [--draws 300] [--seed 1] [--models N] [TYPE ...]``.
"""
from __future__ import annotations

import argparse
import collections
import datetime as dt
import decimal
import enum
import ipaddress
import os
import pathlib
import random
import sys
import tempfile
import uuid
import warnings
from typing import Any, Literal, Optional, Union

os.environ.setdefault("HALTER_CACHE_DIR", tempfile.mkdtemp(prefix="halter-bench-"))

import pydantic  # noqa: E402
from pydantic import (AnyUrl, AwareDatetime, Base64Bytes, ByteSize, FiniteFloat, HttpUrl, IPvAnyAddress,  # noqa: E402
                      IPvAnyInterface, IPvAnyNetwork, Json, NaiveDatetime, NegativeFloat, PositiveInt, SecretStr,
                      StrictInt, condecimal, confloat, conint, conlist, constr)

from halter.grammar import Grammar  # noqa: E402
from halter.grammar.random_text import random_text  # noqa: E402


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


TYPES: dict[str, Any] = {
    "datetime": dt.datetime, "date": dt.date, "time": dt.time, "timedelta": dt.timedelta, "UUID": uuid.UUID,
    "AnyUrl": AnyUrl, "HttpUrl": HttpUrl, "IPv4Address": ipaddress.IPv4Address, "IPv6Address": ipaddress.IPv6Address,
    "IPvAnyAddress": IPvAnyAddress, "IPvAnyInterface": IPvAnyInterface, "IPvAnyNetwork": IPvAnyNetwork,
    "IPv4Network": ipaddress.IPv4Network, "Decimal": decimal.Decimal,
    "condecimal(5,2)": condecimal(max_digits=5, decimal_places=2), "bytes": bytes, "Base64Bytes": Base64Bytes,
    "Path": pathlib.Path, "SecretStr": SecretStr, "str": str,
    "constr": constr(min_length=2, max_length=5, pattern=r"^[a-z]+\d?$"), "conint": conint(gt=-5, le=100, multiple_of=5),
    "confloat": confloat(ge=0.5, lt=2.5), "float": float, "FiniteFloat": FiniteFloat, "int": int,
    "StrictInt": StrictInt, "PositiveInt": PositiveInt, "NegativeFloat": NegativeFloat,
    "conlist": conlist(int, min_length=1, max_length=3), "set[int]": set[int], "dict[str, int]": dict[str, int],
    "tuple[int, str]": tuple[int, str], "Literal": Literal["a", 1, None, True], "IntEnum": Size,
    "Optional[int]": Optional[int], "Union[int, str]": Union[int, str], "Json[list[int]]": Json[list[int]],
    "AwareDatetime": AwareDatetime, "NaiveDatetime": NaiveDatetime, "ByteSize": ByteSize, "Any": Any,
    "EmailStr": "EmailStr", "NameEmail": "NameEmail",
}


def refused(grammar: Grammar, model: type, draws: int, rng: random.Random,
            errors: collections.Counter | None = None) -> int:
    """How many of ``draws`` random instances of ``grammar`` Pydantic refuses (error types counted
    into ``errors``)."""
    bad = 0
    for _ in range(draws):
        try:
            model.model_validate_json(random_text(grammar.rules, grammar.root, rng))
        except pydantic.ValidationError as err:
            bad += 1
            if errors is not None:
                errors[err.errors()[0]["type"]] += 1
        except (ValueError, TypeError) as err:   # Pydantic's own failure, not a refusal (see below)
            if errors is not None:
                errors[f"Pydantic raised {type(err).__name__}: {err}"] += 1
    return bad


def random_model(rng: random.Random, depth: int = 0) -> type:
    """A model of 1-4 fields: random types, some aliased or optional, random ``extra``/``strict``."""
    leaves = [tp for tp in TYPES.values() if not isinstance(tp, str)]

    def field_type(d: int) -> Any:
        r = rng.random()
        if d > 2 or r < 0.5:
            return rng.choice(leaves)
        if r < 0.6:
            return list[field_type(d + 1)]
        if r < 0.67:
            return dict[str, field_type(d + 1)]
        if r < 0.72:
            return Optional[field_type(d + 1)]
        if r < 0.78:
            return Union[field_type(d + 1), field_type(d + 1)]
        if r < 0.82:
            return tuple[field_type(d + 1), field_type(d + 1)]
        return random_model(rng, d + 1)
    fields: dict[str, Any] = {}
    for i in range(rng.randint(1, 4)):
        tp, kind = field_type(depth), rng.random()
        fields[f"f{i}"] = ((tp, pydantic.Field(alias=f"F{i}")) if kind < 0.2 else
                           (Optional[tp], None) if kind < 0.35 else (tp, ...))
    config = pydantic.ConfigDict(extra=rng.choice(["ignore", "forbid", "allow"]), strict=rng.random() < 0.2)
    return pydantic.create_model(f"R{rng.randrange(10**9)}", __config__=config, **fields)


def check_random_models(n: int, draws: int, seed: int) -> None:
    rng = random.Random(seed)
    refused_total, errors = 0, collections.Counter()
    for _ in range(n):
        model = random_model(rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grammar = Grammar.from_pydantic(model)
        refused_total += refused(grammar, model, draws, rng, errors)
    print(f"{n} random models, {draws} draws each, seed {seed}: {refused_total} refused {dict(errors)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--models", type=int, default=0, help="check N random models instead")
    ap.add_argument("types", nargs="*", help="only these (names as in the table)")
    args = ap.parse_args()
    if args.models:
        check_random_models(args.models, args.draws, args.seed)
        return
    print(f"pydantic {pydantic.VERSION}, {args.draws} draws per type, seed {args.seed}\n")
    print("| type | JSON Schema target: refused | pydantic target: refused |")
    print("|---|---:|---:|")
    totals = [0, 0]
    for name, tp in TYPES.items():
        if args.types and name not in args.types:
            continue
        if isinstance(tp, str):            # needs the email-validator package
            try:
                tp = getattr(pydantic, tp)
                pydantic.TypeAdapter(tp).json_schema()
            except ImportError:
                print(f"| `{name}` | (needs email-validator) | |")
                continue
        model = pydantic.create_model(f"M_{len(totals)}", v=(tp, ...))
        cells = []
        for i, build in enumerate((lambda m: Grammar.from_json_schema(m.model_json_schema()), Grammar.from_pydantic)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                grammar = build(model)
            errors: collections.Counter = collections.Counter()
            bad = refused(grammar, model, args.draws, random.Random(args.seed), errors)
            top = errors.most_common(1)[0][0] if errors else ""
            totals[i] += bad
            cells.append(f"{100 * bad / args.draws:.0f}%" + (f" ({top})" if top else ""))
        print(f"| `{name}` | {cells[0]} | {cells[1]} |", flush=True)
    print(f"\ninstances refused in all: {totals[0]} (JSON Schema target), {totals[1]} (pydantic target)",
          file=sys.stderr)


if __name__ == "__main__":
    main()
