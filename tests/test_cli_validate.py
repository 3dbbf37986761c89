"""``halter validate``: valid / invalid with line and column, and exit codes."""
from __future__ import annotations

import subprocess
import sys

import pytest

from halter.cli import main

JSON_ISH = r'root ::= "{" pair ("," [\n]? pair)* "}"' + "\npair ::= [a-z]+ \":\" [0-9]+\n"


@pytest.fixture()
def grammar_file(tmp_path):
    p = tmp_path / "g.gbnf"
    p.write_text(JSON_ISH)
    return p


def run(tmp_path, grammar, text, capsys):
    inp = tmp_path / "in.txt"
    inp.write_bytes(text.encode())
    code = main(["validate", str(grammar), str(inp)])
    return code, capsys.readouterr()


def test_valid_input(tmp_path, grammar_file, capsys):
    code, out = run(tmp_path, grammar_file, "{a:1,bc:22}", capsys)
    assert code == 0 and out.out.strip() == "valid"


def test_first_failing_character_has_line_and_column(tmp_path, grammar_file, capsys):
    code, out = run(tmp_path, grammar_file, "{a:1,\nbé:2}", capsys)
    assert code == 1
    assert "line 2, column 2" in out.out and "'é'" in out.out


def test_input_ending_too_early(tmp_path, grammar_file, capsys):
    code, out = run(tmp_path, grammar_file, "{a:1", capsys)
    assert code == 1 and "ended too early" in out.out


def test_bad_grammar_file_is_exit_1_with_position(tmp_path, capsys):
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "a" foo\n')
    code, out = run(tmp_path, bad, "a", capsys)
    assert code == 1 and "undefined rule 'foo'" in out.err and "line 1, column 14" in out.err


def test_missing_file_and_usage_errors(tmp_path, grammar_file, capsys):
    assert main(["validate", str(grammar_file), str(tmp_path / "nope.txt")]) == 1
    proc = subprocess.run([sys.executable, "-m", "halter", "validate"], capture_output=True, text=True)
    assert proc.returncode == 2
