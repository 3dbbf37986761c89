"""Shared test helpers: where the shared data lives (skipping cleanly when it is absent), and
loading a bench script as a module (the fuzz tests run small rounds of them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# ../shared beside the checkout; HALTER_SHARED_DIR points elsewhere (a checkout in another place)
SHARED = Path(os.environ.get("HALTER_SHARED_DIR") or Path(__file__).resolve().parents[1].parent / "shared")


def shared_path(*parts: str) -> Path:
    """A path under ../shared; skips the test when it is not there."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared data not available: {p}")
    return p


def bench_module(name: str):
    """``bench/<name>.py`` loaded as a module (bench/ is not a package)."""
    import importlib.util
    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_hf_models(tmp_path_factory):
    """Tiny random-weight llama models with real tokenizers (llama.cpp's SentencePiece and GPT-2
    vocabularies from ../shared/vocab), each as a GGUF file and as the Hugging Face folder
    ``transformers`` writes from it: ``{"llama-spm": (gguf, folder), "gpt-2": (gguf, folder)}``.
    Built once per run; needs ``transformers``."""
    pytest.importorskip("transformers")
    from tests.hf_models import build_tiny_hf
    root = tmp_path_factory.mktemp("hf-models")
    return {name: build_tiny_hf(shared_path("vocab", f"ggml-vocab-{name}.gguf"), root / name)
            for name in ("llama-spm", "gpt-2")}


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """Keep the compile cache of the test session out of the user's home."""
    import os
    d = tmp_path_factory.mktemp("halter-cache")
    old = os.environ.get("HALTER_CACHE_DIR")
    os.environ["HALTER_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("HALTER_CACHE_DIR", None)
    else:
        os.environ["HALTER_CACHE_DIR"] = old
