"""The command line on bad input: a message on stderr (one line, or the grammar's caret display),
exit code 1 for bad input and 2 for usage, never a traceback; ``--debug`` shows one."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from halter.cli import main
from halter.engine import build_tiny_gguf

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli-bad")
    out = {"model": build_tiny_gguf(d / "tiny.gguf", seed=2)}
    for name, data in {"binary.gbnf": b'\xff\xfe\x00root ::= "a"', "latin1.json": b'{"enum": ["\xe9"]}',
                       "deep.json": b"[" * 100000 + b"]" * 100000, "deep-schema.json": b'{"items":' * 3000 + b"{}"
                       + b"}" * 3000, "ok.gbnf": b'root ::= "a"\n', "prompt.bin": b"\x80\x81"}.items():
        (d / name).write_bytes(data)
        out[name] = str(d / name)
    return out


def _cases(f: dict[str, str]) -> list[tuple[list[str], int]]:
    m = f["model"]
    return [
        (["validate", f["binary.gbnf"], f["ok.gbnf"]], 1),
        (["validate", f["ok.gbnf"], "/nonexistent/input.txt"], 1),
        (["schema2gbnf", f["latin1.json"]], 1),
        (["schema2gbnf", f["deep.json"]], 1),
        (["schema2gbnf", f["deep-schema.json"]], 1),
        (["compile", f["deep.json"], "--vocab", m, "--json-schema"], 1),
        (["compile", f["binary.gbnf"], "--vocab", m], 1),
        (["run", "-m", m, "-p", "x", "--grammar-file", f["binary.gbnf"]], 1),
        (["run", "-m", m, "-f", f["prompt.bin"]], 1),
        (["run", "-m", m, "-p", "x", "-jf", f["deep.json"]], 1),
        (["run", "-m", m, "-p", "x", "-j", "[" * 50000 + "]" * 50000], 1),
        (["run", "-m", f["binary.gbnf"], "-p", "x"], 1),
        (["run", "-m", m, "-p", "x", "--device", "tpu"], 2),
        (["run", "-m", m, "-p", "x", "-c", "0"], 2),
        (["run", "-m", m, "-p", "x", "-b", "-3"], 2),
        (["run", "-p", "x"], 2),
        (["no-such-command"], 2),
    ]


def test_bad_input_and_usage_exit_codes_without_tracebacks(files, capsys) -> None:
    for argv, code in _cases(files):
        assert main(argv) == code, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err, (argv, err)
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert err.startswith("halter"), (argv, err)


def test_debug_shows_the_traceback(files) -> None:
    proc = subprocess.run([sys.executable, "-m", "halter", "--debug", "schema2gbnf", files["deep.json"]],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("halter schema2gbnf:")
    proc = subprocess.run([sys.executable, "-m", "halter", "schema2gbnf", files["deep.json"]],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
