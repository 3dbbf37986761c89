"""Loading GGUF models: options, progress, and a clear ModelLoadError for every bad file."""
from __future__ import annotations

import os
import shutil

import gguf
import numpy as np
import pytest
import torch

from tests.conftest import tiny_path
from halter.engine import Model
from halter.errors import ModelLoadError


def _minimal(path, arch: str = "llama", *, embd_type: str = "F32", nan: bool = False,
             skip_key: str | None = None) -> str:
    """A GGUF with llama metadata and only the token embedding (so other tensors are missing)."""
    w = gguf.GGUFWriter(str(path), arch)
    keys = {"embedding_length": 64, "block_count": 1, "feed_forward_length": 128,
            "attention.head_count": 4, "context_length": 128}
    for k, v in keys.items():
        if k != skip_key:
            w.add_uint32(f"{arch}.{k}", v)
    emb = np.ones((16, 64), np.float32)
    if nan:
        emb[3, 5] = np.nan
    if embd_type == "IQ4_NL":       # a real ggml type halter does not decode
        w.add_tensor("token_embd.weight", np.zeros((16, 36), np.uint8), raw_shape=(16, 36),
                     raw_dtype=gguf.GGMLQuantizationType.IQ4_NL)
    else:
        w.add_tensor("token_embd.weight", emb)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def test_defaults_on_cpu(tiny_gguf_dir: str) -> None:
    m = Model.load(tiny_path(tiny_gguf_dir, "llama", "F16"), progress=False)
    assert m.device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert m.dtype == (torch.float32 if m.device.type == "cpu" else m.dtype)
    assert m.n_ctx == 2048 and m.n_vocab == 310 and m.config.n_head_kv == 2


def test_dtype_names_and_progress_callback(tiny_gguf_dir: str, capsys) -> None:
    seen = []
    m = Model.load(tiny_path(tiny_gguf_dir, "qwen2", "Q8_0"), device="cpu", dtype="bf16", n_ctx=16,
                   progress=lambda done, total, name: seen.append((done, total)))
    assert m.dtype == torch.bfloat16 and m.n_ctx == 16
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] > 20
    Model.load(tiny_path(tiny_gguf_dir, "qwen2", "Q8_0"), device="cpu", n_ctx=16)
    assert "loading qwen2-Q8_0.gguf" in capsys.readouterr().err
    Model.load(tiny_path(tiny_gguf_dir, "qwen2", "Q8_0"), device="cpu", n_ctx=16, progress=False)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="dtype 'f8'"):
        Model.load(tiny_path(tiny_gguf_dir, "qwen2", "Q8_0"), dtype="f8", progress=False)


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="no such file") as e:
        Model.load(tmp_path / "nope.gguf", progress=False)
    assert e.value.path == str(tmp_path / "nope.gguf")


def test_not_gguf(tmp_path) -> None:
    p = tmp_path / "model.bin"
    p.write_bytes(b"PK\x03\x04 definitely a zip")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        Model.load(p, progress=False)


@pytest.mark.parametrize("keep", [0.3, 0.97])
def test_truncated_file(tiny_gguf_dir: str, tmp_path, keep: float) -> None:
    src = tiny_path(tiny_gguf_dir, "llama", "Q8_0")
    p = tmp_path / "cut.gguf"
    data = open(src, "rb").read()
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError) as e:
        Model.load(p, progress=False)
    assert str(p) in str(e.value) and ("truncated" in str(e.value) or "corrupt" in str(e.value))


def test_unsupported_architecture(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="unsupported architecture 'gpt2'") as e:
        Model.load(_minimal(tmp_path / "g.gguf", "gpt2"), progress=False)
    assert e.value.field == "general.architecture"


def test_missing_metadata(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="missing metadata") as e:
        Model.load(_minimal(tmp_path / "m.gguf", skip_key="block_count"), progress=False)
    assert e.value.field == "llama.block_count"


def test_missing_tensor(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="missing tensor") as e:
        Model.load(_minimal(tmp_path / "t.gguf"), progress=False)
    assert e.value.field == "output_norm.weight"


def test_unsupported_tensor_type(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="unsupported tensor type IQ4_NL") as e:
        Model.load(_minimal(tmp_path / "q.gguf", embd_type="IQ4_NL"), progress=False)
    assert e.value.field == "token_embd.weight"


def test_nan_weights(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="NaN") as e:
        Model.load(_minimal(tmp_path / "n.gguf", nan=True), progress=False)
    assert e.value.field == "token_embd.weight"


def test_loading_does_not_modify_the_file(tiny_gguf_dir: str, tmp_path) -> None:
    src = tiny_path(tiny_gguf_dir, "llama", "F32")
    p = shutil.copy(src, tmp_path / "copy.gguf")
    before = open(p, "rb").read()
    m = Model.load(p, device="cpu", progress=False)
    with torch.no_grad():
        m.net.tok_embeddings.weight.zero_()                  # weights are ours, not a view of the file
    assert open(p, "rb").read() == before and os.path.getsize(p) == len(before)


def test_loading_never_decodes_the_token_arrays(tiny_gguf_dir: str, monkeypatch) -> None:
    # gguf.GGUFReader decodes every metadata array in Python (~15 s for a 150k vocabulary here);
    # loading must read the metadata with the fast reader, the tokenizer's arrays stepped over.
    import halter.gguf.metadata as fast

    def refuse(*args, **kwargs):
        raise AssertionError("Model.load used gguf.GGUFReader")

    calls = []
    real = fast.read_gguf_metadata

    def spy(path, *, skip=()):
        calls.append(frozenset(skip))
        return real(path, skip=skip)

    monkeypatch.setattr(gguf, "GGUFReader", refuse)
    monkeypatch.setattr(fast, "read_gguf_metadata", spy)
    m = Model.load(tiny_path(tiny_gguf_dir, "qwen2", "Q8_0"), device="cpu", n_ctx=16, progress=False)
    assert m.n_vocab == 310 and len(calls) == 1
    assert {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"} <= calls[0]


def test_tensor_layout_matches_gguf_reader(tiny_gguf_dir: str) -> None:
    from halter.engine.gguf_loader import read_layout

    path = tiny_path(tiny_gguf_dir, "llama", "Q4_K")
    _, infos = read_layout(path)
    reader = gguf.GGUFReader(path)
    assert sorted(infos) == sorted(t.name for t in reader.tensors)
    for t in reader.tensors:
        info = infos[t.name]
        assert info.shape == tuple(int(d) for d in reversed(t.shape.tolist()))
        assert (info.type, info.offset, info.n_bytes) == (int(t.tensor_type), t.data_offset, int(t.n_bytes))


def test_random_model_with_a_real_tokenizer(tmp_path) -> None:
    """``build_tiny_gguf(vocab=path)`` copies a vocabulary file's tokenizer: same token bytes, same
    ids from the tokenizer as llama.cpp's test vectors, logits over the whole vocabulary."""
    from halter.engine import build_tiny_gguf
    from halter.grammar import Vocabulary
    from tests.conftest import shared_path
    from tests.gguf_files import read_test_vectors

    src = shared_path("vocab", "ggml-vocab-llama-spm.gguf")
    path = build_tiny_gguf(tmp_path / "spm.gguf", vocab=src, seed=2)
    assert Vocabulary.from_gguf(path).token_bytes == Vocabulary.from_gguf(src).token_bytes
    model = Model.load(path, device="cpu")
    assert model.n_vocab == 32000
    vectors = read_test_vectors(src.parent, "llama-spm")
    assert len(vectors) > 30
    for text, want in vectors:
        assert model.tokenizer.encode(text, add_bos=False) == want, text
    assert model.logits([1, 15043]).shape[-1] == 32000


def test_random_model_vocab_must_be_a_gguf_tokenizer(tmp_path) -> None:
    from halter.engine import build_tiny_gguf

    bad = tmp_path / "not.gguf"
    bad.write_bytes(b"nope")
    with pytest.raises(ValueError, match="not.gguf"):
        build_tiny_gguf(tmp_path / "m.gguf", vocab=bad)


@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_K"])
def test_packing_on_several_threads_gives_the_same_model(tiny_gguf_dir: str, dtype: str) -> None:
    """Layers are packed one per thread (torch's own pool set to one thread meanwhile): the packed
    weights are the same whatever the thread count, torch's thread count is what was asked for
    afterwards, and no packing thread is left behind."""
    import threading
    path = tiny_path(tiny_gguf_dir, "llama", dtype)
    before = torch.get_num_threads()
    try:
        two = Model.load(path, device="cpu", n_ctx=16, progress=False, n_threads=2)
        assert torch.get_num_threads() == 2
        assert not [t for t in threading.enumerate() if t.name.startswith("halter-pack")]
        one = Model.load(path, device="cpu", n_ctx=16, progress=False, n_threads=1)
        a, b = dict(two.net.named_buffers()), dict(one.net.named_buffers())
        assert a.keys() == b.keys() and any(k.endswith("packed0") for k in a)
        for name in a:
            assert torch.equal(a[name], b[name]), name
    finally:
        torch.set_num_threads(before)


def test_dense_gate_and_up_fused_into_one_product_give_the_same_logits(tiny_gguf_dir: str) -> None:
    # what the CUDA load does with float gate/up matrices, checked here on the CPU
    from halter.engine.weights import fuse_dense_gate_up
    m = Model.load(tiny_path(tiny_gguf_dir, "llama", "F16"), device="cpu", progress=False)
    ids = list(range(5, 45))
    before = m.logits(ids)
    sd = m.net.state_dict()
    fuse_dense_gate_up(m.net, sd)
    m.net.load_state_dict(sd, assign=True, strict=True)
    ff = m.net.layers[0].feed_forward
    assert ff.w1 is None and ff.w3 is None and ff.w13.weight.shape[0] == 2 * m.config.n_ff
    assert torch.allclose(m.logits(ids), before, atol=1e-5, rtol=1e-5)


def test_one_row_kernel_tuning_leaves_a_cpu_model_on_its_own_products(tiny_gguf_dir: str) -> None:
    from halter.engine import gemv
    m = Model.load(tiny_path(tiny_gguf_dir, "llama", "F16"), device="cpu", dtype="bf16", progress=False)
    assert not gemv.available(m.device)
    assert gemv.tune(m.net) == {}
    assert all(getattr(mod, "one_row_config", None) is None for mod in m.net.modules())
