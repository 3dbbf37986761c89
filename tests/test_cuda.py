"""The CUDA paths (``pytest -m cuda``; skipped without a CUDA device): packed quantized weights,
sampling on the device, bf16 decode with CUDA graphs and a schema, against the CPU references."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import halter
from halter import Model
from halter.engine import build_tiny_gguf
from halter.engine.qlinear import QLinear

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K"]


@pytest.fixture(scope="module")
def cuda_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cuda")
    return {t: build_tiny_gguf(os.path.join(d, f"{t}.gguf"), n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                               n_ff=512, dtype=t, seed=5) for t in TYPES}


@pytest.mark.parametrize("name", TYPES)
def test_packed_weights_on_cuda_follow_the_cpu_reference(cuda_models: dict[str, str], name: str) -> None:
    ref = Model.load(cuda_models[name], device="cpu", weights="dequantize", progress=False)
    gpu = Model.load(cuda_models[name], device="cuda", dtype="bf16", progress=False)
    kernels = {k for m in gpu.net.modules() if isinstance(m, QLinear) for k in m.kernels}
    assert "int4" in kernels                                  # tinygemm, not per-call dequantization
    ids = np.random.default_rng(1).integers(0, ref.n_vocab, 40).tolist()
    a, b = ref.logits(ids), gpu.logits(ids)
    assert ((a - b).norm() / a.norm()).item() < 3e-2          # bf16 activations and weights


@pytest.mark.parametrize("name", ["Q4_0", "Q8_0"])
def test_packed_weights_use_file_sized_gpu_memory(cuda_models: dict[str, str], name: str) -> None:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    gpu = Model.load(cuda_models[name], device="cuda", dtype="bf16", n_ctx=16, n_seq_max=1, progress=False)
    used = torch.cuda.memory_allocated() - before
    dense_bytes = sum(p.numel() for p in Model.load(cuda_models[name], device="cpu", weights="dequantize",
                                                    progress=False).net.parameters()) * 2
    assert used < 0.7 * dense_bytes, (used, dense_bytes)
    del gpu


@pytest.mark.parametrize("kw", [dict(temperature=0.9, seed=3), dict(temperature=0.0),
                                dict(temperature=1.2, top_k=0, top_p=0.9, min_p=0.05, seed=7)])
def test_device_sampling_agrees_with_the_cpu_chain(cuda_models: dict[str, str], kw) -> None:
    model = Model.load(cuda_models["Q8_0"], device="cuda", dtype="f32", progress=False)
    host = model.generate("Once", max_tokens=24, device_sampling=False, **kw)
    dev = model.generate("Once", max_tokens=24, **kw)              # auto: on the device on CUDA
    prefix = next((k for k, (a, b) in enumerate(zip(host.tokens, dev.tokens)) if a != b), len(host.tokens))
    assert prefix >= 20, (host.tokens, dev.tokens)   # GPU and CPU float rounding may flip a rare boundary


def test_schema_constrained_bf16_decode_with_cuda_graphs(cuda_models: dict[str, str]) -> None:
    model = Model.load(cuda_models["Q4_K"], device="cuda", progress=False)
    assert model.decode_mode == "cuda-graph" and model.dtype == torch.bfloat16
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string", "maxLength": 5}},
              "required": ["n", "s"]}
    for seed in range(3):
        out = halter.generate(model, "JSON:", json_schema=schema, max_tokens=60, seed=seed, temperature=0.8)
        if out.complete:
            assert set(json.loads(out.text)) == {"n", "s"}


def test_batch_16_decode_equals_single_rows(cuda_models: dict[str, str]) -> None:
    from halter.engine.generation import Request
    model = Model.load(cuda_models["Q4_0"], device="cuda", dtype="f32", n_seq_max=16, progress=False)
    reqs = [Request(f"{i}:", max_tokens=8, sampling_fields={"temperature": 0.0}) for i in range(16)]
    batch = model.generate_batch(reqs)
    single = [model.generate(r.prompt, max_tokens=8, temperature=0.0) for r in reqs[:4]]
    assert [r.tokens for r in batch[:4]] == [r.tokens for r in single]


@pytest.mark.parametrize("name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
def test_every_quantized_type_multiplies_on_cuda_with_its_default_kernel(name: str) -> None:
    from tests.test_engine_packed import random_quant
    q = random_quant(name, (112, 512), seed=3)
    dev = torch.device("cuda")
    lin = QLinear([q], None, dtype=torch.bfloat16, device=dev)          # as the loader builds it
    expected = {"Q6_K": "bf16", "Q2_K": "dequant", "Q3_K": "dequant"}.get(name, "int4")
    assert lin.kernels == [expected]
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(1))
    ref = x @ q.dequantize().T
    rel = ((lin(x.to(dev)).float().cpu() - ref).norm() / ref.norm()).item()
    assert rel < 2e-2, rel
