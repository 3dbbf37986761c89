"""Long enums (more than 128 values) keep their language: the strings, built as one shared-suffix
tree per chunk (``schemas/string_set.py``), and the other values accept exactly what the same
values accept as short enums (each value a plain alternative, the converter's reference path), on
members in several spellings and on near misses; token masks on a small vocabulary match feeding
every token alone.
"""
from __future__ import annotations

import json
import random
import warnings

import pytest

from halter import Grammar
from halter.schemas.scalars import ENUM_CHUNK
from tests.test_mask_escapes import alphabet_vocab, check_walks

CHARS = "ab/\\\"é\u2028\n\t😀 -"


def random_string(rng: random.Random, alphabet: str = CHARS, most: int = 6) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, most)))


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice("ssssnnoab" if depth < 2 else "ssnn")
    if kind == "s":
        return random_string(rng)
    if kind == "n":
        return rng.choice([rng.randint(-50, 50), rng.randint(-50, 50) + 0.5, float(rng.randint(0, 9)),
                           rng.randint(0, 10 ** 12), -0.0, 1e-7])
    if kind == "o":
        return {random_string(rng, 'ab"é', 2): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    if kind == "a":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.choice([True, False, None])


def spellings(v) -> list[str]:
    """Texts that are ``v``: compact, ASCII-escaped, indented, escapes with upper-case hex, ``\\/``,
    members in another order, ``1.0`` for ``1``."""
    texts = [json.dumps(v), json.dumps(v, ensure_ascii=False), json.dumps(v, indent=1)]
    if isinstance(v, str):
        texts.append(json.dumps(v).replace("\\u00e9", "\\u00E9").replace("/", "\\/"))
    if isinstance(v, dict):
        texts.append(json.dumps(dict(reversed(v.items()))))          # members in any order
    if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer():
        texts.append(f"{int(v)}.0")
    return texts


def near_misses(rng: random.Random, text: str) -> list[str]:
    out = [text[:-1], text + "a", text[1:], '"' + text + '"', " " + text,
           text.replace("a", "\\u0061")]         # (printable ASCII is spelled only as itself)
    if len(text) > 2:
        i = rng.randrange(1, len(text) - 1)
        out += [text[:i] + text[i + 1:], text[:i] + rng.choice(CHARS + "x0{[") + text[i:],
                text[:i] + rng.choice(CHARS + "x1") + text[i + 1:]]
    return out


def reference(values: list) -> list[dict]:
    """The same values without long enums: scalars as enums of 64 values (each value a plain
    alternative), objects through the object builder (``properties``, all ``required``, no other
    keys), arrays as ``prefixItems``; in schemas of a few branches each (a value is in the enum when
    one of them accepts it), as the converter builds large ``anyOf``s only approximately."""
    def ref(v):
        if isinstance(v, dict):
            return {"type": "object", "properties": {k: ref(x) for k, x in v.items()}, "required": list(v),
                    "additionalProperties": False} if len(v) > 0 else {"const": v}
        if isinstance(v, list):
            return {"type": "array", "prefixItems": [ref(x) for x in v], "items": False,
                    "minItems": len(v)} if v else {"const": []}
        return {"const": v}
    scalars = [v for v in values if not isinstance(v, (dict, list))]
    branches = [{"enum": scalars[i:i + 64]} for i in range(0, len(scalars), 64)] \
        + [ref(v) for v in values if isinstance(v, (dict, list))]
    return [{"anyOf": branches[i:i + 8]} for i in range(0, len(branches), 8)]


def built(schema: dict) -> Grammar:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Grammar.from_json_schema(schema)


@pytest.mark.parametrize("seed,mixed", [(0, False), (1, False), (2, True), (3, True)])
def test_long_enums_accept_what_the_same_values_as_short_enums_accept(seed: int, mixed: bool) -> None:
    rng = random.Random(seed)
    values = [random_value(rng) if mixed else random_string(rng) for _ in range(400)]
    values += [v + "x" for v in values[:40] if isinstance(v, str)]       # values that extend others
    g = built({"enum": values})
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # (the reference is exact: no approximation warned)
        refs = [Grammar.from_json_schema(r) for r in reference(values)]
    texts = []
    for v in values[:150]:
        for t in spellings(v):
            texts.append(t)
            texts += near_misses(rng, t)
    texts += [json.dumps(random_value(rng)) for _ in range(300)]
    for v in values[:150]:
        for t in spellings(v):
            assert g.matches(t), t
    differ = [t for t in texts if g.matches(t) != any(r.matches(t) for r in refs)]
    assert not differ, differ[:10]
    # printing is a fixed point: the printed grammar reads back to the same language
    again = Grammar.from_gbnf(str(g))
    assert all(again.matches(t) == g.matches(t) for t in texts[::7])


def test_a_long_string_enum_and_its_const_filters() -> None:
    values = [f"id-{i:04d}" for i in range(1000)]
    g = built({"enum": values, "pattern": "^id-0", "not": {"const": "id-0005"}})
    assert g.matches('"id-0000"') and g.matches('"id-0999"')
    assert not g.matches('"id-1000"') and not g.matches('"id-0005"') and not g.matches('"id-099"')


def test_long_string_enum_masks_match_brute_force() -> None:
    """Tokens end and start anywhere inside the shared tree: every mask checked against feeding
    each token alone, on a vocabulary of all strings of up to 3 bytes over the enum's own bytes."""
    rng = random.Random(5)
    values = sorted({random_string(rng, 'ab"\\é', 5) for _ in range(400)})
    assert len(values) > ENUM_CHUNK
    g = built({"enum": values})
    alphabet = bytes(sorted(set(b'ab"\\u0e9') | set("é".encode())))
    assert check_walks(g, alphabet_vocab(alphabet), seeds=3, steps=20) == 60
