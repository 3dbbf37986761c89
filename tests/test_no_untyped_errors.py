"""Everything that escapes halter's public entry points on bad input is a ``HalterError``: a
generated corpus (the fuzz generators of bench/fuzz_cases.py, seeded) goes through ``Grammar.from_gbnf``,
``from_json_schema``, ``from_regex``, the matchers, ``json_schema_to_gbnf``, ``halter.generate``,
``Vocabulary.from_gguf`` and ``Model.load``; any other exception type fails the test."""
from __future__ import annotations

import random
import warnings

import pytest
import torch

from halter import generate
from halter import Model
from halter.engine import build_tiny_gguf
from halter.errors import HalterError
from halter.grammar import Grammar
from halter.vocab.vocabulary import Vocabulary
from halter.schemas import json_schema_to_gbnf
from tests.conftest import bench_module

fuzz = bench_module("fuzz_cases")                # the fuzz campaigns' case generators
corrupt = bench_module("gguf_corrupt")

REGEX_PIECES = ["a", "b", "(", ")", "|", "*", "+", "?", "{2}", "{1,", "}", "[", "]", "^", "$", "\\", "\\d", "\\p{L}",
                ".", "-", "(?:", "(?=", "\\1", "{99999}", "\u00e9", "\\u00e9", "[^", "\\b", "{,3}", "(?P<n>"]


def _untyped(fn, *args, **kwargs) -> str | None:
    """None when ``fn`` returns or raises a HalterError; else the escaped exception."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*args, **kwargs)
    except HalterError:
        return None
    except Exception as err:  # noqa: BLE001 - what the test looks for
        return f"{type(err).__name__}: {str(err)[:200]}"
    return None


def _regexes(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice(REGEX_PIECES) for _ in range(rng.randint(1, 8))) for _ in range(n)]


@pytest.mark.slow
def test_grammar_constructors_and_matchers() -> None:
    rng = random.Random(1)
    escaped = []
    for _ in range(300):
        text = fuzz.gbnf_case(rng)["text"]
        escaped.append((text, _untyped(Grammar.from_gbnf, text)))
    for _ in range(120):
        schema = fuzz.schema_case(rng)["schema"]
        escaped.append((schema, _untyped(Grammar.from_json_schema, schema)))
        escaped.append((schema, _untyped(json_schema_to_gbnf, schema)))
    for pattern in _regexes(rng, 200):
        escaped.append((pattern, _untyped(Grammar.from_regex, pattern)))
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "number"}, "uniqueItems": True})
    for _ in range(200):
        data = bytes(rng.choice(b'[]1,.eE-+0 9"x\xff\xc3') for _ in range(rng.randint(0, 30)))
        escaped.append((data, _untyped(g.matcher().accept_bytes, data)))
        escaped.append((data, _untyped(g.matches, data)))
    bad = [(x, e) for x, e in escaped if e is not None]
    assert not bad, bad[:5]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    d = tmp_path_factory.mktemp("untyped")
    path = build_tiny_gguf(d / "tiny.gguf", seed=4)
    yield d, path, Model.load(path, device="cpu", n_ctx=64, progress=False)
    torch.set_num_threads(threads)


@pytest.mark.slow
def test_generate_with_bad_constraints(tiny) -> None:
    _, _, model = tiny
    rng = random.Random(2)
    escaped = []
    for _ in range(15):
        schema = fuzz.schema_case(rng)["schema"]
        escaped.append((schema, _untyped(generate, model, "x", json_schema=schema, max_tokens=3, seed=0)))
    for pattern in _regexes(rng, 15):
        escaped.append((pattern, _untyped(generate, model, "x", regex=pattern, max_tokens=3, seed=0)))
    for _ in range(10):
        text = fuzz.gbnf_case(rng)["text"]
        escaped.append((text, _untyped(generate, model, "x", grammar=text, max_tokens=3, seed=0)))
    for rf in ({"type": "xml"}, {"type": "json_schema"}, {"type": "json_schema", "json_schema": {"schema": 5}},
               {"type": "json_object", "schema": {"type": 7}}):
        escaped.append((rf, _untyped(generate, model, "x", response_format=rf, max_tokens=3)))
    escaped.append(("deep", _untyped(generate, model, "x", json_schema="[" * 100000, max_tokens=3)))
    bad = [(x, e) for x, e in escaped if e is not None]
    assert not bad, bad[:5]


def test_corrupted_gguf_files(tiny) -> None:
    d, path, _ = tiny
    base = open(path, "rb").read()
    rng = random.Random(3)
    files = [corrupt.corrupt(base, name) for name in sorted(corrupt.NAMED)]
    files += [corrupt.random_corruption(base, rng) for _ in range(40)]
    escaped = []
    for i, data in enumerate(files):
        p = d / f"c{i}.gguf"
        p.write_bytes(data)
        escaped.append((i, _untyped(Vocabulary.from_gguf, p)))
        escaped.append((i, _untyped(lambda: Model.load(p, device="cpu", n_ctx=16, progress=False)
                                    .generate("hi", max_tokens=2, seed=0))))
    bad = [(x, e) for x, e in escaped if e is not None]
    assert not bad, bad[:5]
