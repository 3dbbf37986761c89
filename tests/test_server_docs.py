"""docs/server.md's examples, run against ``python -m halter serve`` started as users start it."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.server_fixtures import _free_port, server_model_path  # noqa: F401

DOC = Path(__file__).resolve().parents[1] / "docs" / "server.md"
DOC_URL = "http://127.0.0.1:8080"


def _examples(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    examples = text[text.index("## Examples"):]
    return re.findall(rf"```{lang}\n(.*?)```", examples, flags=re.S)


@pytest.fixture(scope="module")
def cli_server(server_model_path: str):  # noqa: F811
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")
    port = _free_port()
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-m", "halter", "serve", "-m", server_model_path, "--port", str(port),
                             "--parallel", "2", "-c", "4096", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    try:
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"halter serve exited: {proc.stdout.read()}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise AssertionError("halter serve did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.slow
def test_curl_examples(cli_server: str) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    blocks = [b for b in _examples("bash") if "curl" in b]
    assert len(blocks) >= 2
    for block in blocks:
        out = subprocess.run(["bash", "-c", block.replace(DOC_URL, cli_server)], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        body = json.loads(out)
        assert "error" not in body, body
        if "choices" in body:
            choice = body["choices"][0]
            assert choice["complete"] is True
            value = json.loads(choice["message"]["content"])
            assert set(value) == {"title", "year"} and 1450 <= value["year"] <= 2030
        else:
            assert body["content"] in ("yes", "no")


@pytest.mark.slow
def test_openai_examples(cli_server: str) -> None:
    pytest.importorskip("openai")
    blocks = _examples("python")
    assert len(blocks) == 3
    outputs = []
    for block in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block.replace(DOC_URL, cli_server), str(DOC), "exec"), {})
        outputs.append(printed.getvalue())
    assert "'city'" in outputs[0] and "'days'" in outputs[0]       # printed only when complete
    name, arguments = outputs[1].split(" ", 1)
    assert name == "get_weather" and json.loads(arguments)["city"] in ("Paris", "Oslo")
    assert "completion_tokens=" in outputs[2]
