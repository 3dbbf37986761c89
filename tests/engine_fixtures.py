"""Session fixtures for the engine tests: tiny random GGUF models, built once per session."""
from __future__ import annotations

import os

import pytest

from halter.engine import Model, build_tiny_gguf

# (arch, weight type) -> builder keywords. Q4_K needs rows of 256 values, so that model is wider.
TINY_SPECS = {
    ("llama", "F32"): {}, ("llama", "F16"): {}, ("llama", "Q8_0"): {},
    ("llama", "Q4_K"): {"n_embd": 256, "n_ff": 512},
    ("qwen2", "F32"): {}, ("qwen2", "F16"): {}, ("qwen2", "Q8_0"): {},
    ("qwen2", "Q4_K"): {"n_embd": 256, "n_ff": 512},
}


@pytest.fixture(scope="session")
def tiny_gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A directory holding one tiny model per (arch, dtype) of ``TINY_SPECS``."""
    d = tmp_path_factory.mktemp("engine_models")
    for (arch, dtype), kw in TINY_SPECS.items():
        build_tiny_gguf(d / f"{arch}-{dtype}.gguf", arch=arch, dtype=dtype, seed=7, **kw)
    return str(d)


def tiny_path(directory: str, arch: str, dtype: str) -> str:
    return os.path.join(directory, f"{arch}-{dtype}.gguf")


@pytest.fixture(scope="session")
def tiny_llama(tiny_gguf_dir: str) -> Model:
    """The F32 llama (4 heads, 2 KV heads) with room for 4 sequences of 64 tokens."""
    return Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu", n_ctx=64,
                      n_seq_max=4, progress=False)


class Greedy:
    """The argmax sampler: the loop's tests need a deterministic choice, nothing more."""

    def __init__(self) -> None:
        self.accepted: list[int] = []

    def sample(self, logits) -> int:
        return int(logits.argmax())

    def accept(self, token: int) -> None:
        self.accepted.append(token)
