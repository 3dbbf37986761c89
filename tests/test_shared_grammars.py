"""The grammars that ship with llama.cpp parse and match typical inputs."""
from __future__ import annotations

import json

import pytest

from halter import Grammar
from tests.conftest import shared_path


def load(name: str) -> Grammar:
    return Grammar.from_gbnf(shared_path("grammars", f"{name}.gbnf").read_text(encoding="utf-8"))


# (grammar file, texts that match, texts that do not)
name__accepted__rejected = [
    ("json", ['{"a": 1}', '{"name": "Jos\\u00e9", "tags": ["x", "y"], "n": {"v": [true, false, null, -1.5e3]}}',
              '{\n  "k": "é 漢 😀"\n}'],
     ['{"a": 1,}', "[1, 2]", '{"a": 01}', '{"a": "\x01"}']),
    ("json_arr", ['[\n{"a": 1},\n{"b": [2, "x"]}]', "[\n]"], ["{}", "[1]", '[\n1,\n]']),
    ("arithmetic", ["1+2*3=7\n", "(1-2)/3=x\n", "a=b\nc=1\n"], ["1+2\n", "1+=2\n"]),
    ("list", ["- one\n- two\n", "- item\n"], ["one\n", "-\n"]),
    ("chess", ["1. e4 e5\n2. Nf3 Nc6\n", "1. d4 d5\n2. exd5 Qxd5\n3. O-O-O O-O+\n"], ["e4 e5\n", "1. Zz9 e5\n"]),
    ("c", ["int main(){int x = 1;return x;}", "int f(int a){while(a<3){a = a+1;}return a*2;}"],
     ["int main({}", "int main(){return}"]),
    ("japanese", ["こんにちは。"], ["hello"]),
    ("english", ["The cat sat on the mat."], ["日本語"]),
]


@pytest.mark.parametrize("name,accepted,rejected", name__accepted__rejected)
def test_shared_grammar(name, accepted, rejected):
    g = load(name)
    for text in accepted:
        assert g.matches(text), text
    for text in rejected:
        assert not g.matches(text), text


def test_json_grammar_accepts_json_dumps_output():
    g = load("json")
    doc = {"id": 7, "name": "widget", "price": 12.5, "tags": ["a", "b"], "dims": {"w": 1, "h": 2},
           "ok": True, "none": None, "unicode": "ñ€"}
    assert g.matches(json.dumps(doc))
    assert g.matches(json.dumps(doc, separators=(",", ":")))
    assert g.matches(json.dumps(doc, ensure_ascii=False))
    assert g.matches(json.dumps(doc, indent=2))
