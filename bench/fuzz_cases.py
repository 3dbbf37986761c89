"""Case generators of ``bench/fuzz.py``: each campaign's cases from a seeded ``random.Random``
(the same seed, the same cases; no halter import needed).

Mix per campaign: GBNF text is half mutated seed grammars, half generated grammars; JSON Schemas
come from ``schema_fuzz.schema`` with 10% malformed ``$schema`` values, 10% a wrongly typed
keyword and 1% wrapped 50-300 levels deep in ``items`` (deep schemas cost ~50x a typical one, so a
larger share would spend the campaign's time on one family); token walks use the schema cases;
GGUF cases are 30% named corruptions, 70% random ones; CLI cases are random argument lists over
good, bad, binary, empty and missing files.
"""
from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
CAMPAIGNS = ("gbnf", "schema", "walk", "gguf", "cli")


GBNF_SEEDS = [
    'root ::= "yes" | "no"',
    'root ::= [0-9]+ ("." [0-9]+)?',
    'root ::= obj\nobj ::= "{" ws (kv ("," ws kv)*)? "}"\nkv ::= str ws ":" ws val\nval ::= str | [0-9]+ | obj\n'
    'str ::= "\\"" [^"\\\\]* "\\""\nws ::= [ \\t\\n]*',
    'root ::= (item "\\n"){1,3}\nitem ::= "- " [a-z]{1,8}',
    'root ::= a b\na ::= "x"? [^\\x00-\\x1F]\nb ::= ("ab" | "c")* "d"',
    'root ::= [\\u00e9-\\u00ff] | "\\U0001F600" | [^a-z]{2,}',
]
GBNF_PIECES = ['"a"', '"b"', "[a-z]", "[^\\n]", ".", "x", "y", "root", "(", ")", "|", "*", "+", "?", "{2}",
               "{1,3}", "{,2}", "::=", "\n", " ", "\\", '"', "[", "]", "-", "#c\n", "\\x41", "\\u00e9",
               "\\U0010FFFF", "<[5]>", "!", "\r\n", "\u2028", "\f"]


def gbnf_case(rng: random.Random) -> dict:
    if rng.random() < 0.5:                             # a mutated seed grammar
        text = list(rng.choice(GBNF_SEEDS))
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(text) + 1)
            op = rng.randrange(3)
            if op == 0 and text:
                del text[min(i, len(text) - 1)]
            elif op == 1:
                text.insert(i, rng.choice(GBNF_PIECES))
            else:
                text[i:i] = list(rng.choice(GBNF_SEEDS)[rng.randrange(10):][:rng.randrange(1, 12)])
        return {"text": "".join(text)}
    # grammar-aware: random rules, nesting and repetition within reason
    names = [f"r{i}" for i in range(rng.randint(1, 5))]

    def expr(depth: int) -> str:
        k = rng.randrange(7 if depth < 4 else 3)
        if k == 0:
            return json.dumps("".join(rng.choice("ab\u00e9") for _ in range(rng.randint(0, 3))))
        if k == 1:
            return rng.choice(["[a-c]", "[^x]", "[0-9]", "."])
        if k == 2:
            return rng.choice(names)
        if k == 3:
            return " ".join(expr(depth + 1) for _ in range(rng.randint(2, 3)))
        if k == 4:
            return " | ".join(expr(depth + 1) for _ in range(rng.randint(2, 3)))
        if k == 5:
            return f"({expr(depth + 1)}){rng.choice(['*', '+', '?', '{0,2}', '{3}', ''])}"
        return f"({expr(depth + 1)})"
    rules = [f"root ::= {expr(0)}"] + [f"{n} ::= {expr(1)} | \"z\"" for n in names]
    return {"text": "\n".join(rules)}


def schema_case(rng: random.Random) -> dict:
    sys.path.insert(0, str(HERE))
    import schema_fuzz
    s = schema_fuzz.schema(rng, rng.randint(1, 4))
    if isinstance(s, dict) and "$ref" in json.dumps(s):
        s = {**s, "$defs": {"d": schema_fuzz.schema(rng, 1)}}
    extra = rng.random()
    if extra < 0.1:
        s = {"$schema": rng.choice([5, None, [], "http://json-schema.org/draft-04/schema#",
                                    "http://json-schema.org/draft-07/schema#"]),
             **(s if isinstance(s, dict) else {})}
    elif extra < 0.2 and isinstance(s, dict):
        s = {**s, rng.choice(["type", "properties", "items", "required", "$ref", "enum", "minLength"]):
             rng.choice([5, "x", None, [], {}, -1, 1e308, [1, 1]])}
    elif extra < 0.21:
        for _ in range(rng.randint(50, 300)):
            s = {"items": s}
    return {"schema": s}


def walk_case(rng: random.Random) -> dict:
    return {"schema": schema_case(rng)["schema"], "seed": rng.randrange(2 ** 31), "steps": 60}


def gguf_case(rng: random.Random) -> dict:
    sys.path.insert(0, str(HERE))
    import gguf_corrupt
    if rng.random() < 0.3:
        return {"named": rng.choice(sorted(gguf_corrupt.NAMED))}
    return {"seed": rng.randrange(2 ** 31)}


CLI_FILES = ["{model}", "{binary}", "{deep}", "{grammar}", "{schema}", "{missing}", "{empty}", "{bad_model}"]


def cli_case(rng: random.Random) -> dict:
    command = rng.choice(["run", "validate", "schema2gbnf", "compile", "run", "bogus"])
    pieces = {
        "run": [["-m", "{model}"], ["-m", rng.choice(CLI_FILES)], ["-p", "x"], ["-f", rng.choice(CLI_FILES)],
                ["--grammar-file", rng.choice(CLI_FILES)], ["-jf", rng.choice(CLI_FILES)], ["-j", "{\"type\":"],
                ["-j", "[" * 5000], ["--regex", rng.choice(["(a", "[z-a]", "a{99999999}", "a|b"])],
                ["-n", rng.choice(["0", "-1", "x", "5"])], ["-c", rng.choice(["0", "-3", "8", "x"])],
                ["--device", rng.choice(["tpu", "cpu", "cuda:x"])], ["--temp", rng.choice(["nan", "-1", "inf"])],
                ["--top-k", "-5"], ["-l", rng.choice(["5+1", "x", "99999999+1"])], ["--samplers", "nope;top_k"],
                ["--dtype", rng.choice(["f8", "bf16"])], ["--mirostat", "7"]],
        "validate": [[rng.choice(CLI_FILES)], [rng.choice(CLI_FILES)], ["--root", rng.choice(["nope", "root"])]],
        "schema2gbnf": [[rng.choice(CLI_FILES)], ["--prop-order", "a,b"], ["--whitespace", "weird"]],
        "compile": [[rng.choice(CLI_FILES)], ["--vocab", rng.choice(CLI_FILES)], ["--json-schema"]],
        "bogus": [["--x"]],
    }[command]
    argv = [command]
    for p in rng.sample(pieces, rng.randint(1, min(4, len(pieces)))):
        argv += p
    return {"argv": argv}


GENERATORS: dict[str, Callable[[random.Random], dict]] = {
    "gbnf": gbnf_case, "schema": schema_case, "walk": walk_case, "gguf": gguf_case, "cli": cli_case}
