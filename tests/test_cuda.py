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


def test_dense_bf16_model_on_cuda_fuses_gate_and_up_and_follows_the_cpu_reference(tmp_path) -> None:
    path = build_tiny_gguf(os.path.join(tmp_path, "f16.gguf"), n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                           n_ff=512, dtype="F16", seed=6)
    ref = Model.load(path, device="cpu", progress=False)
    gpu = Model.load(path, device="cuda", dtype="bf16", progress=False)
    ff = gpu.net.layers[0].feed_forward
    assert ff.w1 is None and ff.w13.weight.shape == (1024, 256)       # gate and up: one product
    ids = np.random.default_rng(2).integers(0, ref.n_vocab, 40).tolist()
    a, b = ref.logits(ids), gpu.logits(ids)
    assert ((a - b).norm() / a.norm()).item() < 3e-2


@pytest.mark.parametrize("shape", [(37, 100), (259, 2048), (3072, 2048), (2048, 8192)])
def test_one_row_kernel_rounds_the_exact_product_once_for_every_config(shape) -> None:
    from halter.engine import gemv
    if not gemv.available(torch.device("cuda")):
        pytest.skip("no Triton")
    n, k = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g)
    x = torch.randn(1, 1, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    exact = x.double() @ w.double().T + b.double()
    # float32 sums rounded once to bfloat16 (bias included): within half a bf16 step of the exact
    # value, give or take float32's own rounding
    half_step = torch.exp2(torch.floor(torch.log2(exact.abs().clamp(min=1e-30))) - 8)
    bound = half_step + 1e-5 * exact.abs().max()
    for cfg in gemv.CONFIGS:
        got = gemv.one_row(x, w, b, cfg)
        assert got.shape == (1, 1, n) and got.dtype == torch.bfloat16
        assert ((got.double() - exact).abs() <= bound).all(), cfg
        assert ((gemv.one_row(x, w, None, cfg).double() - (exact - b.double())).abs()
                <= torch.exp2(torch.floor(torch.log2((exact - b.double()).abs().clamp(min=1e-30))) - 8)
                + 1e-5 * exact.abs().max()).all(), cfg


def test_cuda_graph_step_with_tuned_one_row_products_follows_the_eager_step(tmp_path) -> None:
    path = build_tiny_gguf(os.path.join(tmp_path, "f16.gguf"), n_layer=2, n_embd=512, n_head=8, n_head_kv=2,
                           n_ff=1024, dtype="F16", seed=7)
    eager = Model.load(path, device="cuda", dtype="bf16", decode="eager", progress=False)
    graph = Model.load(path, device="cuda", dtype="bf16", decode="cuda-graph", progress=False)
    prompt = list(range(3, 30))
    eager.eval_prompt(prompt, 0)
    graph.eval_prompt(prompt, 0)
    a = eager.decode([[40]], [0]).float().cpu()
    b = graph.decode([[40]], [0]).float().cpu()
    assert getattr(graph.net, "_one_row_configs", None) is not None     # tuned before the capture
    assert ((a - b).norm() / a.norm()).item() < 2e-2
