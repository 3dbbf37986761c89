"""What a second load of a GGUF file reuses from the first: the packed matrices
(``packed_cache``) and the tokenizer (``tokenizer_cache``), each the same as a fresh build, and
never a stale or damaged copy."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from halter import Model, cache
from halter.engine import build_tiny_gguf, pack_batch, packed_cache, tokenizer_cache
from halter.engine import qlinear as qlinear_mod
from halter.engine.qlinear import QLinear, weight_bytes
from halter.engine.tokenizer import Tokenizer
from tests.test_engine_packed import random_quant

CPU = torch.device("cpu")
SHARED_VOCAB = Path(__file__).resolve().parents[2] / "shared" / "vocab"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("HALTER_CACHE_DIR", str(d))
    monkeypatch.setattr(packed_cache, "MIN_BYTES", 0)       # the tiny models' packings are stored too
    return d


def _model_file(tmp_path: Path, dtype: str) -> str:
    return build_tiny_gguf(tmp_path / f"m-{dtype}.gguf", n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                           n_ff=512, dtype=dtype, seed=5)


def _logits(m: Model) -> torch.Tensor:
    return m.logits([1, 5, 9, 2, 7, 40, 3])


def _stored_files(cache: Path) -> list[Path]:
    return sorted((cache / "packed").glob("*.pt")) if (cache / "packed").is_dir() else []


@pytest.mark.parametrize("name,kernel", [("Q4_0", "int4"), ("Q8_0", "int4"), ("Q5_1", "int4"),
                                         ("Q4_K", "int4"), ("Q6_K", "bf16")])
def test_prebuilt_buffers_give_the_same_product(name: str, kernel: str) -> None:
    parts = [random_quant(name, (64, 256), seed=1), random_quant(name, (32, 256), seed=2)]
    packed = QLinear(parts, None, dtype=torch.float32, device=CPU, kernel=kernel)
    stored = {k: v.clone() for k, v in packed.stored_buffers().items()}
    assert stored
    again = QLinear(parts, None, dtype=torch.float32, device=CPU, kernel=kernel, prebuilt=stored)
    x = torch.randn(3, 256)
    assert torch.equal(packed(x), again(x))
    assert all(b.data_ptr() in {t.data_ptr() for t in stored.values()} for b in again.stored_buffers().values())


def test_prebuilt_buffers_that_do_not_fit_are_refused() -> None:
    parts = [random_quant("Q4_0", (64, 256))]
    stored = QLinear(parts, None, dtype=torch.float32, device=CPU).stored_buffers()
    other = [random_quant("Q4_0", (128, 256))]
    with pytest.raises(packed_cache.Mismatch, match="packed0"):
        QLinear(other, None, dtype=torch.float32, device=CPU, prebuilt=stored)
    with pytest.raises(packed_cache.Mismatch, match="missing"):
        QLinear(parts, None, dtype=torch.float32, device=CPU, prebuilt={})


@pytest.mark.parametrize("dtype", ["Q4_K", "Q8_0", "Q5_0"])
def test_second_load_maps_the_stored_packing(cache_dir: Path, tmp_path: Path, monkeypatch, dtype: str) -> None:
    path = _model_file(tmp_path, dtype)
    first = Model.load(path, progress=False)
    cache.wait_for_writes()
    assert len(_stored_files(cache_dir)) == 1
    expected = _logits(first)

    def no_packing(*args, **kwargs):
        raise AssertionError("packed again although the packing is stored")
    monkeypatch.setattr(qlinear_mod, "pack_cpu", no_packing)
    monkeypatch.setattr(pack_batch.Batch, "_pack_chunk", no_packing)     # the layers packed together
    second = Model.load(path, progress=False)
    assert torch.equal(_logits(second), expected)
    assert weight_bytes(second.net, resident=True) == weight_bytes(first.net, resident=True)
    a = first.generate("ab", max_tokens=6, temperature=0.0, ignore_eos=True)
    b = second.generate("ab", max_tokens=6, temperature=0.0, ignore_eos=True)
    assert a.tokens == b.tokens


def test_a_changed_file_is_packed_afresh(cache_dir: Path, tmp_path: Path) -> None:
    path = _model_file(tmp_path, "Q4_0")
    Model.load(path, progress=False)
    cache.wait_for_writes()
    build_tiny_gguf(path, n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, dtype="Q4_0", seed=6)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))   # (even within one clock tick)
    fresh = Model.load(path, progress=False, packed_cache=False)
    reloaded = Model.load(path, progress=False)
    cache.wait_for_writes()
    assert torch.equal(_logits(reloaded), _logits(fresh))
    assert len(_stored_files(cache_dir)) == 2                  # one per version of the file


@pytest.mark.parametrize("damage", ["truncated", "wrong shapes", "not tensors"])
def test_a_damaged_stored_packing_is_replaced(cache_dir: Path, tmp_path: Path, damage: str) -> None:
    path = _model_file(tmp_path, "Q8_0")
    expected = _logits(Model.load(path, progress=False))
    cache.wait_for_writes()
    [stored] = _stored_files(cache_dir)
    if damage == "truncated":
        stored.write_bytes(stored.read_bytes()[: stored.stat().st_size // 3])
    elif damage == "wrong shapes":
        tensors = torch.load(stored, weights_only=True)
        torch.save({k: v[:1].clone() for k, v in tensors.items()}, stored)
    else:
        torch.save({"x": [1, 2, 3]}, stored)
    again = Model.load(path, progress=False)
    assert torch.equal(_logits(again), expected)
    cache.wait_for_writes()
    assert _stored_files(cache_dir) == [stored]                 # rewritten in place, same key
    assert torch.equal(_logits(Model.load(path, progress=False)), expected)    # and now a hit


def test_packed_cache_can_be_turned_off(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    path = _model_file(tmp_path, "Q4_0")
    Model.load(path, progress=False, packed_cache=False)
    monkeypatch.setenv("HALTER_PACKED_CACHE", "0")
    Model.load(path, progress=False)
    cache.wait_for_writes()
    assert _stored_files(cache_dir) == []


def test_small_packings_are_not_stored(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path / "cache"))
    Model.load(_model_file(tmp_path, "Q4_0"), progress=False)     # well under MIN_BYTES
    cache.wait_for_writes()
    assert _stored_files(tmp_path / "cache") == []


def _vocab_files() -> list[Path]:
    names = ["ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"]
    return [SHARED_VOCAB / n for n in names]


@pytest.mark.parametrize("vocab", _vocab_files(), ids=lambda p: p.stem)
def test_tokenizer_from_the_cache_tokenizes_as_a_fresh_one(cache_dir: Path, monkeypatch, vocab: Path) -> None:
    if not vocab.is_file():
        pytest.skip(f"{vocab} not present (../shared/vocab)")
    fresh = Tokenizer.from_gguf(vocab, cache=False)
    Tokenizer.from_gguf(vocab)                                  # builds and stores
    cache.wait_for_writes()
    assert len(list((cache_dir / "tokenizers").glob("*.pkl"))) == 1

    def no_build(*args, **kwargs):
        raise AssertionError("built again although the tokenizer is stored")
    monkeypatch.setattr(Tokenizer, "from_gguf_metadata", no_build)
    cached = Tokenizer.from_gguf(vocab)
    text = "Hello world!  It's 2026: naïve café, 日本語 and\ttabs\n\n<s> </s> 12345.678"
    for special in (False, True):
        assert cached.encode(text, parse_special=special) == fresh.encode(text, parse_special=special)
    ids = fresh.encode(text)
    assert cached.decode(ids) == fresh.decode(ids)
    assert cached.vocab.token_bytes == fresh.vocab.token_bytes
    assert cached.vocab.fingerprint() == fresh.vocab.fingerprint()


def test_a_damaged_or_stale_tokenizer_is_rebuilt(cache_dir: Path, tmp_path: Path) -> None:
    path = _model_file(tmp_path, "Q4_0")
    fresh = Tokenizer.from_gguf(path, cache=False)
    Tokenizer.from_gguf(path)
    cache.wait_for_writes()
    [stored] = (cache_dir / "tokenizers").glob("*.pkl")
    stored.write_bytes(stored.read_bytes()[:100])              # fails its HMAC check: never unpickled
    assert Tokenizer.from_gguf(path).encode("abc cab") == fresh.encode("abc cab")
    key = tokenizer_cache.key_for(path)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 1_000_000))
    assert tokenizer_cache.key_for(path) != key


def test_tokenizer_cache_can_be_turned_off(cache_dir: Path, tmp_path: Path, monkeypatch) -> None:
    path = _model_file(tmp_path, "Q4_0")
    Tokenizer.from_gguf(path, cache=False)
    monkeypatch.setenv("HALTER_TOKENIZER_CACHE", "0")
    Tokenizer.from_gguf(path)
    cache.wait_for_writes()
    assert not (cache_dir / "tokenizers").exists()


def test_keys_follow_the_code_that_makes_what_is_stored(tmp_path: Path, monkeypatch) -> None:
    path = _model_file(tmp_path, "Q4_0")
    packed, tok = packed_cache.key_for(path, torch.float32), tokenizer_cache.key_for(path)
    assert packed_cache.key_for(path, torch.bfloat16) != packed
    monkeypatch.setattr(packed_cache, "PACKING_MODULES", packed_cache.PACKING_MODULES + ("halter.engine.rope",))
    monkeypatch.setattr(tokenizer_cache, "TOKENIZER_MODULES", tokenizer_cache.TOKENIZER_MODULES + ("halter.engine.rope",))
    assert packed_cache.key_for(path, torch.float32) != packed
    assert tokenizer_cache.key_for(path) != tok


def test_an_unwritable_cache_directory_only_costs_the_caching(tmp_path: Path, monkeypatch, capfd) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    monkeypatch.setenv("HALTER_CACHE_DIR", str(blocker / "cache"))     # every mkdir under it fails
    monkeypatch.setattr(packed_cache, "MIN_BYTES", 0)
    path = _model_file(tmp_path, "Q4_0")
    m = Model.load(path, progress=False)
    cache.wait_for_writes()
    again = Model.load(path, progress=False)
    assert torch.equal(_logits(again), _logits(m))
    assert m.tokenizer.encode("abc") == Tokenizer.from_gguf(path, cache=False).encode("abc")
    cache.wait_for_writes()
    assert "Traceback" not in capfd.readouterr().err                  # (the writer thread failed quietly)


def test_a_model_that_fails_to_load_stores_nothing(cache_dir: Path, tmp_path: Path) -> None:
    import numpy as np

    from halter.engine.gguf_loader import read_layout
    from halter.errors import ModelLoadError
    path = _model_file(tmp_path, "Q8_0")
    _, infos = read_layout(path)
    info = infos["token_embd.weight"]         # looked up in place: checked after the packing
    data = bytearray(Path(path).read_bytes())
    data[info.offset + 34 * 5:info.offset + 34 * 5 + 2] = np.array([np.nan], dtype=np.float16).tobytes()
    bad = tmp_path / "nan.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="NaN"):
        Model.load(bad, progress=False)
    cache.wait_for_writes()
    assert _stored_files(cache_dir) == []
