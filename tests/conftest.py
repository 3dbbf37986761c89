"""Shared test fixtures and helpers: the engine's tiny random GGUF models (built once per run),
where the shared data lives (skipping cleanly when it is absent), and loading a bench script as a
module (the fuzz tests run small rounds of them)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# (arch, weight type) -> builder keywords. Q4_K needs rows of 256 values, so that model is wider.
TINY_SPECS = {
    ("llama", "F32"): {}, ("llama", "F16"): {}, ("llama", "Q8_0"): {},
    ("llama", "Q4_K"): {"n_embd": 256, "n_ff": 512},
    ("qwen2", "F32"): {}, ("qwen2", "F16"): {}, ("qwen2", "Q8_0"): {},
    ("qwen2", "Q4_K"): {"n_embd": 256, "n_ff": 512},
}


def tiny_path(directory: str, arch: str, dtype: str) -> str:
    """The file of the (arch, dtype) model of ``TINY_SPECS`` in ``tiny_gguf_dir``."""
    return os.path.join(directory, f"{arch}-{dtype}.gguf")


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A directory holding one tiny random model per (arch, dtype) of ``TINY_SPECS``, built once per run."""
    from halter.engine import build_tiny_gguf

    d = tmp_path_factory.mktemp("engine_models")
    for (arch, dtype), kw in TINY_SPECS.items():
        build_tiny_gguf(d / f"{arch}-{dtype}.gguf", arch=arch, dtype=dtype, seed=7, **kw)
    return str(d)


@pytest.fixture(scope="session")
def tiny_llama(tiny_gguf_dir: str):
    """The F32 llama (4 heads, 2 KV heads) as a ``halter.Model``, with room for 4 sequences of 64
    tokens. Shared by the whole run: a test that fills the cache clears it (``model.cache.clear()``)."""
    from halter import Model

    return Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu", n_ctx=64,
                      n_seq_max=4, progress=False)


def sequence_operations(m, ids: list[int]) -> list:
    """Decode steps of ``m`` (4 sequences of 64 cells) around the cache's sequence operations: a
    copy, a removal that compacts the row, shifted positions, a context shift of a full row. The
    logits of each step, for comparing decode modes."""
    from halter.engine.generation import Timings, shift_context

    out = []
    m.eval_prompt(ids[:20], 0)
    m.cache.seq_cp(0, 1, 0, 12)
    out.append(m.decode([[ids[20]], [ids[12]]], [0, 1]))
    m.cache.seq_rm(0, 5, 9)
    m.cache.seq_add(0, 9, None, -4)
    out.append(m.decode([[ids[21]]], [0]))
    m.eval_prompt(ids[:38] + ids[:26], 3)                 # 64 tokens: full
    shift_context(m, 3, 4, Timings())
    out.append(m.decode([[ids[22]], [ids[23]], [ids[24]]], [3, 1, 0]))
    return out


class Greedy:
    """The argmax sampler: the loop's tests need a deterministic choice, nothing more."""

    def __init__(self) -> None:
        self.accepted: list[int] = []

    def sample(self, logits) -> int:
        return int(logits.argmax())

    def accept(self, token: int) -> None:
        self.accepted.append(token)


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
    import sys
    sys.modules.setdefault(name, module)       # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


class _TinyHF(dict):
    """name -> (gguf path, Hugging Face folder); each model built on first use."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, name: str):
        from tests.hf_models import build_tiny_hf
        value = self[name] = build_tiny_hf(shared_path("vocab", f"ggml-vocab-{name}.gguf"), self.root / name)
        return value


@pytest.fixture(scope="session")
def tiny_hf_models(tmp_path_factory):
    """Tiny random-weight llama models with real tokenizers (llama.cpp's vocabularies from
    ../shared/vocab, e.g. ``"llama-spm"``, ``"gpt-2"``), each as a GGUF file and as the Hugging
    Face folder ``transformers`` writes from it: ``tiny_hf_models[name] -> (gguf, folder)``.
    Built once per run, on first use; needs ``transformers``."""
    pytest.importorskip("transformers")
    return _TinyHF(tmp_path_factory.mktemp("hf-models"))


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
