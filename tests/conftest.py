"""Shared test helpers: where the shared data lives (skipping cleanly when it is absent), and
loading a bench script as a module (the fuzz tests run small rounds of them)."""
from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


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
    import sys
    sys.modules.setdefault(name, module)       # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


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
