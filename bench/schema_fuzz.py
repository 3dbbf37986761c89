"""Differential fuzz of the JSON Schema converter against python-jsonschema.

Random schemas are composed from small pieces (types, bounds, properties, patterns, items,
contains, enum/const, allOf/anyOf/oneOf/not, if/then/else, dependentSchemas, $ref into $defs,
recursion, unevaluated*) and every instance of a small universe (objects over keys a/b/c, arrays of
length <= 3, a few scalars and number spellings) is checked. A strict grammar must give the
validator's verdict on every instance; a lenient one may accept more (its warnings say what it
dropped) but must never refuse a valid instance (halter asserts ``format``, so the validator does
too). Each build runs under a time limit. The disagreements found in the first runs are
tests/test_schema_composition.py.

Valid numbers in exponent notation that a grammar refuses are counted apart, as the documented
spelling departure they are (integers and ``multipleOf`` take decimal notation only, bounded
numbers decimal and normalized exponent notation, ``2.5e0`` but not ``15e-1``: docs/json_schema.md,
"Notes"); accepting an invalid one is a disagreement.

Run: ``python bench/schema_fuzz.py [--schemas N] [--seed S] [--depth D] [--draft 7|2020]
[--time-limit SECONDS] [-v]``; prints
the count of schemas, instances and disagreements, and the first few disagreements in full.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import tempfile
import warnings

import jsonschema

from halter.schemas.format_check import format_checker

KEYS = ["a", "b", "c"]
VALUES = [1, "x", None, 2.5, {}, []]
NUMBER_TEXTS = ["0", "-0", "1", "1.0", "2.5", "-3", "1e0", "1.5e-3", "15e-1", "-5e-05", "100",
                "2e0", "2.5E+0", "2.50001e0", "1e2", "1.0e+002", "9.9e1", "-2.5e-1", "0e0", "-0.0E-3"]


def universe() -> list[str]:
    """JSON texts of the instances checked against every schema."""
    values: list = []
    for n in range(4):
        for ks in itertools.combinations(KEYS, n):
            for vs in itertools.product(VALUES, repeat=n):
                values.append(dict(zip(ks, vs)))
        values.extend(list(vs) for vs in itertools.product([1, "x", None, []], repeat=n))
    values += ["", "x", "ab", "a0", True, False]
    return [json.dumps(v) for v in values] + NUMBER_TEXTS


def leaf(rng: random.Random) -> object:
    return rng.choice([
        True, False, {}, {"type": "integer"}, {"type": "string"}, {"type": "null"}, {"type": "number"},
        {"type": "object"}, {"type": "array"}, {"type": ["integer", "string"]}, {"const": 1},
        {"const": "x"}, {"enum": [1, None, "x"]}, {"minimum": 2}, {"maximum": 0}, {"exclusiveMinimum": 0},
        {"maximum": 2.5}, {"exclusiveMaximum": 100}, {"minimum": -0.25, "exclusiveMaximum": 2},
        {"multipleOf": 0.5}, {"minLength": 1}, {"maxLength": 1}, {"pattern": "^a"}, {"pattern": "0"},
        {"required": ["a"]}, {"minProperties": 2}, {"maxProperties": 1}, {"minItems": 2}, {"maxItems": 1},
        {"additionalProperties": False}, {"propertyNames": {"pattern": "^[ab]"}}, {"uniqueItems": True},
        {"dependentRequired": {"a": ["b"]}}, {"not": {"type": "integer"}}, {"contains": False, "minContains": 0},
        {"minProperties": 1, "maxProperties": 0}, {"format": "date", "enum": ["x", "2020-01-01"]},
    ])


def sibling(rng: random.Random, p: float) -> dict:
    """Keywords of a leaf to put next to an applicator, with probability ``p``."""
    s = leaf(rng) if rng.random() < p else {}
    return s if isinstance(s, dict) else {}


def schema(rng: random.Random, depth: int) -> object:
    if depth <= 0 or rng.random() < 0.3:
        return leaf(rng)
    sub = lambda: schema(rng, depth - 1)     # noqa: E731
    kind = rng.randrange(14)
    if kind == 0:
        return {"properties": {k: sub() for k in rng.sample(KEYS, rng.randint(1, 2))},
                **({"additionalProperties": sub()} if rng.random() < 0.5 else {})}
    if kind == 1:
        return {"patternProperties": {rng.choice(["^a", "b", "^[bc]$"]): sub()},
                **({"additionalProperties": sub()} if rng.random() < 0.5 else {}),
                **({"allOf": [sub()]} if rng.random() < 0.5 else {})}
    if kind == 2:
        return {"items": sub(), **({"prefixItems": [sub()]} if rng.random() < 0.5 else {})}
    if kind == 3:
        return {"contains": sub(), "minContains": rng.randint(0, 2),
                **({"maxContains": rng.randint(0, 2)} if rng.random() < 0.5 else {})}
    if kind in (4, 5, 6):
        key = ("allOf", "anyOf", "oneOf")[kind - 4]
        return {key: [sub() for _ in range(rng.randint(1, 3))], **sibling(rng, 0.3)}
    if kind == 7:
        return {"not": sub()}
    if kind == 8:
        return {"if": sub(), "then": sub(), **({"else": sub()} if rng.random() < 0.5 else {})}
    if kind == 9:
        return {"dependentSchemas": {rng.choice(KEYS): sub()}}
    if kind == 10:
        return {"$ref": "#/$defs/d", **sibling(rng, 0.5)}        # "d" is added at the root
    if kind == 11:
        return {"properties": {rng.choice(KEYS): {"$ref": "#"}}, **sibling(rng, 0.5)}
    if kind == 12:
        return {"unevaluatedProperties": sub(), rng.choice(["allOf", "anyOf"]): [sub()]}
    return {"unevaluatedItems": sub(), rng.choice(["allOf", "anyOf"]): [sub(), {"prefixItems": [sub()]}]}


def as_draft7(s: object) -> object:
    """The same composition in draft 7's words: ``items`` lists for ``prefixItems``,
    ``dependencies`` for ``dependentSchemas``, ``definitions`` for ``$defs``; ``unevaluated*``,
    ``minContains``/``maxContains`` and ``dependentRequired`` stay, as keywords draft 7 does not
    know (the grammar must ignore them, as the validator does), and a ``$ref`` keeps its siblings,
    which draft 7 ignores."""
    if isinstance(s, list):
        return [as_draft7(x) for x in s]
    if not isinstance(s, dict):
        return s
    out: dict = {}
    for k, v in s.items():
        if k == "prefixItems":
            out["items"] = as_draft7(v)
            if "items" in s:
                out["additionalItems"] = as_draft7(s["items"])
        elif k == "items" and "prefixItems" in s:
            continue
        elif k == "dependentSchemas":
            out["dependencies"] = {n: as_draft7(x) for n, x in v.items()}
        elif k in ("$defs", "properties", "patternProperties"):
            out["definitions" if k == "$defs" else k] = {n: as_draft7(x) for n, x in v.items()}
        elif k == "$ref":
            out[k] = v.replace("#/$defs/", "#/definitions/")
        elif k in ("enum", "const", "required", "dependentRequired"):
            out[k] = v
        else:
            out[k] = as_draft7(v)
    return out


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def departure(text: str, valid: bool, verdict: bool) -> bool:
    """A documented spelling departure: a valid number in exponent notation refused (integers and
    multipleOf are decimal notation only, bounded numbers decimal and normalized exponent notation,
    and so is what negating them gives)."""
    return valid and not verdict and "e" in text.lower() and isinstance(json.loads(text), (int, float))


def run(n_schemas: int, seed: int, depth: int = 3, time_limit: int = 20,
        verbose: bool = False, draft: int = 2020) -> tuple[dict[str, int], list[str]]:
    """Counts, and one line per disagreement or error, for ``n_schemas`` random schemas
    (``draft=7``: translated by ``as_draft7``, with ``$schema`` saying so)."""
    from halter.errors import SchemaError
    from halter.grammar import Grammar

    texts = universe()
    rng = random.Random(seed)
    signal.signal(signal.SIGALRM, _alarm)
    counts = {"schemas": 0, "no reference verdict": 0, "built": 0, "checks": 0, "refused": 0, "disagreements": 0,
              "exponent spellings refused": 0, "errors": 0}
    found: list[str] = []
    for _ in range(n_schemas):
        s = schema(rng, depth)
        if "#/$defs/d" in json.dumps(s):
            s = {**s, "$defs": {"d": schema(rng, 1)}} if isinstance(s, dict) else s
        counts["schemas"] += 1
        cls = jsonschema.Draft202012Validator
        if draft == 7:
            s = {"$schema": "http://json-schema.org/draft-07/schema#", **as_draft7(s)} if isinstance(s, dict) else s
            cls = jsonschema.Draft7Validator
        validator = cls(s, format_checker=format_checker(cls))
        try:
            verdicts = {t: validator.is_valid(json.loads(t)) for t in texts}
        except (RecursionError, jsonschema.exceptions._WrappedReferencingError):
            counts["no reference verdict"] += 1     # a $ref loop the validator cannot follow either
            continue
        for strict in (True, False):
            signal.alarm(time_limit)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    g = Grammar.from_json_schema(s, strict=strict)
                got = {t: g.matches(t) for t in texts}
            except SchemaError:
                counts["refused"] += 1      # unsupported in strict mode, or no value at all
                continue
            except Exception as e:  # noqa: BLE001 - a crash or a time-out is a finding
                counts["errors"] += 1
                found.append(f"{type(e).__name__} {str(e)[:100]} strict={strict} {json.dumps(s)}")
                continue
            finally:
                signal.alarm(0)
            counts["built"] += 1
            for t, valid in verdicts.items():
                counts["checks"] += 1
                wrong = got[t] != valid if strict else (valid and not got[t])
                if wrong and departure(t, valid, got[t]):
                    counts["exponent spellings refused"] += 1
                elif wrong:
                    counts["disagreements"] += 1
                    found.append(f"strict={strict} halter={got[t]} valid={valid} {t} under {json.dumps(s)}")
        if verbose:
            print(counts, flush=True)
    return counts, found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--time-limit", type=int, default=20)
    ap.add_argument("--draft", type=int, choices=[7, 2020], default=2020)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    os.environ["HALTER_CACHE_DIR"] = tempfile.mkdtemp(prefix="halter-fuzz-")
    counts, found = run(args.schemas, args.seed, args.depth, args.time_limit, args.verbose, args.draft)
    print(json.dumps(counts))
    for line in found[:20]:
        print(line)


if __name__ == "__main__":
    main()
