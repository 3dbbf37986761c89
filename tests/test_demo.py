"""``halter demo``: builds its tiny model once under the cache dir and prints schema-valid JSON."""
from __future__ import annotations

import json

import jsonschema
import torch

from halter.cli import main
from halter.cli.demo import DEMO_SCHEMA, MODEL_NAME


def test_demo_prints_valid_json_and_caches_its_model(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    threads = torch.get_num_threads()
    try:
        assert main(["demo", "-n", "2"]) == 0
        out, err = capsys.readouterr()
        lines = out.strip().splitlines()
        assert len(lines) == 2
        for line in lines:
            jsonschema.validate(json.loads(line), DEMO_SCHEMA)
        assert "2/2 outputs valid" in err and "ms per token" in err and "% of decode time" in err
        model = tmp_path / "demo" / MODEL_NAME
        stamp = model.stat().st_mtime_ns
        assert main(["demo", "-n", "1", "-s", "7"]) == 0      # reuses the cached model
        assert model.stat().st_mtime_ns == stamp
    finally:
        torch.set_num_threads(threads)
