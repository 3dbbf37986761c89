"""Corrupted GGUF files: every one is refused with a ``ModelLoadError`` naming the file and the
field, before anything the bad field sizes is allocated (the corruptions: bench/gguf_corrupt.py)."""
from __future__ import annotations

import pytest

from halter.engine import Model, build_tiny_gguf
from halter.errors import ModelLoadError
from tests.conftest import bench_module

corrupt = bench_module("gguf_corrupt")


@pytest.fixture(scope="module")
def tiny_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = build_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", seed=1)
    data = open(path, "rb").read()
    assert corrupt.parse(data).to_bytes() == data       # the rewriter itself changes nothing
    return data


@pytest.mark.parametrize("name", sorted(corrupt.NAMED))
def test_a_corrupted_file_names_file_and_field(tiny_bytes: bytes, tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(corrupt.corrupt(tiny_bytes, name))
    field = corrupt.NAMED[name][1].format(arch="llama")
    with pytest.raises(ModelLoadError) as info:
        model = Model.load(path, device="cpu", progress=False)
        model.tokenizer                          # the tokenizer's fields are read on first use
    assert info.value.field == field
    assert str(path) in str(info.value) and field in str(info.value)


def test_the_untouched_file_loads(tiny_bytes: bytes, tmp_path) -> None:
    path = tmp_path / "ok.gguf"
    path.write_bytes(tiny_bytes)
    model = Model.load(path, device="cpu", progress=False)
    assert model.config.n_layer == 2 and model.tokenizer.vocab.size > 0
