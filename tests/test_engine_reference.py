"""The engine's logits against an independent implementation: transformers loading the same GGUF."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from tests.conftest import TINY_SPECS, tiny_path
from halter.engine import Model

transformers = pytest.importorskip("transformers")

# Relative error (Frobenius norm) allowed between the two implementations. Both sides decode the
# same quantized blocks to float32, so quantized files should agree as closely as F32; the looser
# bound leaves room for a reference that dequantizes in another order.
TOLERANCE = {"F32": 1e-4, "F16": 1e-4, "Q8_0": 1e-3, "Q4_K": 1e-3}


def _prompt(n_vocab: int) -> list[int]:
    return np.random.default_rng(3).integers(0, n_vocab, 40).tolist()


@pytest.mark.parametrize("arch,dtype", list(TINY_SPECS))
def test_logits_match_transformers(tiny_gguf_dir: str, arch: str, dtype: str) -> None:
    path = tiny_path(tiny_gguf_dir, arch, dtype)
    model = Model.load(path, device="cpu", progress=False, weights="dequantize")
    ids = _prompt(model.n_vocab)
    ours = model.logits(ids)
    assert ours.dtype == torch.float32 and ours.shape == (40, model.n_vocab)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(path), gguf_file=os.path.basename(path), torch_dtype=torch.float32)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    rel = ((ours - ref).norm() / ref.norm()).item()
    assert rel < TOLERANCE[dtype], f"{arch} {dtype}: relative error {rel:.2e}"
    # the logits must carry signal, or agreement would be vacuous
    assert ref.std().item() > 0.1


def test_q4_k_model_really_holds_q4_k_tensors(tiny_gguf_dir: str) -> None:
    import gguf

    reader = gguf.GGUFReader(tiny_path(tiny_gguf_dir, "llama", "Q4_K"))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_q.weight"] == "Q4_K"
    assert types["blk.1.ffn_down.weight"] == "Q4_K"
    assert types["output_norm.weight"] == "F32"


def test_tied_output_uses_the_embedding(tiny_gguf_dir: str) -> None:
    model = Model.load(tiny_path(tiny_gguf_dir, "qwen2", "F32"), device="cpu", progress=False)
    assert model.net.output.weight.data_ptr() == model.net.tok_embeddings.weight.data_ptr()
