"""``halter demo``: builds its tiny model once under the cache dir and prints schema-valid JSON."""
from __future__ import annotations

import json
import os
import socket

import jsonschema
import torch

import pytest

from halter.cli import main
from halter.cli.demo import DEMO_SCHEMA, MODEL_NAME


def test_demo_prints_valid_json_and_caches_its_model(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    threads = torch.get_num_threads()
    try:
        assert main(["demo", "--tiny", "-n", "2"]) == 0
        out, err = capsys.readouterr()
        lines = out.strip().splitlines()
        assert len(lines) == 2
        for line in lines:
            jsonschema.validate(json.loads(line), DEMO_SCHEMA)
        assert "2/2 outputs valid" in err and "ms per token" in err and "% of decode time" in err
        model = tmp_path / "demo" / MODEL_NAME
        stamp = model.stat().st_mtime_ns
        assert main(["demo", "--tiny", "-n", "1", "-s", "7"]) == 0      # reuses the cached model
        assert model.stat().st_mtime_ns == stamp
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow   # pip retries the dead index for a few seconds
def test_demo_without_network_says_so_and_falls_back_to_the_random_model(tmp_path, monkeypatch,
                                                                        capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    for key, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": f"http://127.0.0.1:{port}/simple",
                       "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "PIP_NO_INDEX": ""}.items():
        monkeypatch.setenv(key, value)
    threads = torch.get_num_threads()
    try:
        assert main(["demo", "-n", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    assert "no network" in err and "falling back to the tiny random-weight model" in err
    jsonschema.validate(json.loads(out.strip()), DEMO_SCHEMA)
