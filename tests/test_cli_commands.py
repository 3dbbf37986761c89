"""``halter run``, ``schema2gbnf`` and ``compile``: output and exit codes (0 ok, 1 bad input,
2 usage, 3 incomplete), run in-process on a tiny GGUF model."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import jsonschema
import pytest
import torch

from halter.cli import main
from halter.engine import build_tiny_gguf
from halter.grammar import Grammar

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["a"], "additionalProperties": False}


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield build_tiny_gguf(tmp_path_factory.mktemp("cli") / "tiny.gguf", seed=5)
    torch.set_num_threads(threads)


def test_run_json_schema_streams_valid_json(gguf, capsys) -> None:
    rc = main(["run", "-m", gguf, "-p", "x", "-j", json.dumps(SCHEMA), "--whitespace", "compact",
               "-n", "30", "-s", "3", "--temp", "0.7", "--top-k", "20"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    jsonschema.validate(json.loads(out), SCHEMA)
    assert "tokens" in err and "seed 3" in err      # timings go to stderr


def test_run_grammar_file_regex_and_json_output(gguf, tmp_path, capsys) -> None:
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "x" [0-9]{1,3}\n')
    assert main(["run", "-m", gguf, "-p", "x", "--grammar-file", str(g), "-n", "10", "-s", "1",
                 "--grammar-first", "--json-output"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["complete"] and re.fullmatch(r"x[0-9]{1,3}", result["text"])
    assert main(["run", "-m", gguf, "-p", "x", "--regex", "[ab]{2}", "-n", "5", "-s", "2",
                 "--samplers", "top_k;temperature", "-l", "97+5"]) == 0
    assert re.fullmatch(r"[ab]{2}\n", capsys.readouterr().out)


def test_run_incomplete_output_exits_3(gguf, capsys) -> None:
    assert main(["run", "-m", gguf, "-p", "x", "--grammar", 'root ::= "a" [b-z]{5,9}', "-n", "2",
                 "-s", "0"]) == 3
    assert "incomplete" in capsys.readouterr().err


def test_run_bad_input_exits_1_naming_the_place(gguf, tmp_path, capsys) -> None:
    g = tmp_path / "bad.gbnf"
    g.write_text('root ::= "a"\nitem ::= "b" |* c\n')
    assert main(["run", "-m", gguf, "-p", "x", "--grammar-file", str(g)]) == 1
    err = capsys.readouterr().err
    assert str(g) in err and "line 2, column" in err
    s = tmp_path / "s.json"
    s.write_text('{"type": "object",\n "properties": }')
    assert main(["run", "-m", gguf, "-p", "x", "-jf", str(s)]) == 1
    err = capsys.readouterr().err
    assert str(s) in err and "line 2, column" in err
    assert main(["run", "-m", str(tmp_path / "missing.gguf"), "-p", "x"]) == 1
    assert "missing.gguf" in capsys.readouterr().err
    assert main(["run", "-m", gguf, "-p", "x", "-l", "oops"]) == 1
    assert "--logit-bias" in capsys.readouterr().err


def test_usage_errors_exit_2(gguf) -> None:
    for argv in (["run", "-p", "x"], ["run", "-m", gguf, "-p", "x", "--grammar", "a", "--regex", "b"],
                 ["run", "-m", gguf, "-p", "x", "-n", "many"]):
        assert main(argv) == 2          # main returns the exit code (one-line message on stderr)


def test_schema2gbnf(tmp_path, capsys) -> None:
    s = tmp_path / "s.json"
    s.write_text(json.dumps({"type": "object", "properties": {"b": {"type": "boolean"}, "a": {"type": "integer"}}}))
    assert main(["schema2gbnf", str(s), "--whitespace", "compact", "--closed-objects",
                 "--prop-order", "a,b"]) == 0
    g = Grammar.from_gbnf(capsys.readouterr().out)
    assert g.matches('{"a":1,"b":true}') and not g.matches('{"b":true,"a":1}')
    assert not g.matches('{"a":1,"c":2}')
    s.write_text(json.dumps({"type": "string", "pattern": "(?<=a)b"}))
    assert main(["schema2gbnf", str(s)]) == 1
    err = capsys.readouterr().err
    assert str(s) in err and "pattern" in err
    assert main(["schema2gbnf", str(s), "--lenient"]) == 0
    assert "warning" in capsys.readouterr().err
    s.write_text(json.dumps({"type": "string", "format": "date-time"}))
    for target, leap_second_ok in (("json-schema", True), ("pydantic", False)):
        assert main(["schema2gbnf", str(s), "--target", target]) == 0
        g = Grammar.from_gbnf(capsys.readouterr().out)
        assert g.matches('"2016-12-31T23:59:60Z"') is leap_second_ok


def test_compile_reports_times_and_sizes(gguf, tmp_path, capsys) -> None:
    g = tmp_path / "g.gbnf"
    g.write_text('root ::= "{" [a-z]+ "}"\n')
    assert main(["compile", str(g), "--vocab", gguf]) == 0
    out = capsys.readouterr().out
    assert re.search(r"compile +[\d.]+ ms; all token tables at once [\d.]+ ms", out) and "310 tokens" in out
    s = tmp_path / "s.json"
    s.write_text(json.dumps(SCHEMA))
    assert main(["compile", str(s), "--json-schema", "--vocab", gguf]) == 0
    g.write_text('root ::= "a" |* b\n')
    assert main(["compile", str(g), "--vocab", gguf]) == 1


def test_python_dash_m_halter_entry_point(tmp_path) -> None:
    proc = subprocess.run([sys.executable, "-m", "halter", "schema2gbnf", "-"], input='{"enum": [1, 2]}',
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and Grammar.from_gbnf(proc.stdout).matches("2")
