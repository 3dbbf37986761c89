"""Quantized weights kept quantized: the int4 rewrite is exact, packed logits follow the dequantized
reference, resident weight bytes stay near the file's, and the dequant kernel covers every type."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from halter import Model
from halter.engine import build_tiny_gguf
from halter.engine.dequant import GGML_TYPES, SCALE_FIELDS, dequantize_blocks
from halter.engine.gguf_loader import read_layout
from halter.engine.int4_pack import PACK_ROWS, pack_int4
from halter.engine.pack_batch import pack_cpu
from halter.engine.qlinear import QEmbedding, QLinear, pick_kernel, weight_bytes
from halter.engine.quant_tensor import INT4_GROUP, INT4_TYPES, QuantTensor

_IDS = {v[0]: k for k, v in GGML_TYPES.items()}
QUANT_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
# the builder quantizes these itself (gguf-py or halter's Q4_K encoder)
MODEL_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K"]


def random_quant(name: str, shape: tuple[int, int], seed: int = 0) -> QuantTensor:
    """Random blocks of type ``name`` with finite, moderate float16 scale fields."""
    _, block_len, block_bytes = GGML_TYPES[_IDS[name]]
    n_blocks = shape[0] * shape[1] // block_len
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for off in SCALE_FIELDS[name]:
        raw[:, off:off + 2] = rng.uniform(-0.05, 0.05, n_blocks).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return QuantTensor(torch.from_numpy(raw), _IDS[name], shape)


@pytest.fixture(scope="module")
def quant_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("packed")
    return {t: build_tiny_gguf(os.path.join(d, f"{t}.gguf"), n_layer=2, n_embd=256, n_head=4, n_head_kv=2,
                               n_ff=512, dtype=t, seed=11)
            for t in MODEL_TYPES}


@pytest.mark.parametrize("name", INT4_TYPES)
def test_int4_terms_rebuild_the_dequantized_weight(name: str) -> None:
    q = random_quant(name, (32, 512), seed=len(name))
    ref = q.dequantize()
    rebuilt = torch.zeros_like(ref)
    for codes, scale, zero in q.int4_terms():
        assert int(codes.min()) >= 0 and int(codes.max()) <= 15
        s = scale.repeat_interleave(INT4_GROUP, dim=1)
        z = zero.repeat_interleave(INT4_GROUP, dim=1)
        rebuilt += (codes.float() - 8) * s + z
    assert torch.allclose(rebuilt, ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item())


@pytest.mark.parametrize("name", QUANT_TYPES)
@pytest.mark.parametrize("kernel", ["int4", "bf16", "dequant"])
def test_qlinear_matches_the_dense_product(name: str, kernel: str) -> None:
    if kernel == "int4" and name not in INT4_TYPES:
        pytest.skip(f"{name} has no int4 form")
    q = random_quant(name, (112, 512), seed=3)          # a block of 64 rows and a shorter one
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(1))
    bias = torch.randn(112)
    lin = QLinear([q], bias, dtype=torch.float32, device=torch.device("cpu"), kernel=kernel)
    ref = x @ q.dequantize().T + bias
    rel = ((lin(x) - ref).norm() / ref.norm()).item()
    assert rel < (1e-6 if kernel == "dequant" else 1e-2), rel


def test_qlinear_of_mixed_parts_concatenates_their_outputs() -> None:
    parts = [random_quant("Q5_0", (64, 256), 1), random_quant("Q5_0", (32, 256), 2),
             random_quant("Q8_0", (32, 256), 3)]
    lin = QLinear(parts, None, dtype=torch.float32, device=torch.device("cpu"))
    assert len(lin.parts) == 2                            # the two Q5_0 parts fused into one
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(0))
    ref = x @ torch.cat([p.dequantize() for p in parts]).T
    assert ((lin(x) - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("name,kernel", [("Q4_0", "int4"), ("Q8_0", "int4"), ("Q6_K", "bf16"),
                                         ("Q3_K", "dequant")])
def test_direct_product_is_the_modules_own(name: str, kernel: str) -> None:
    # what the fused decode step calls: the same kernels, without the module's wrappers
    q = random_quant(name, (128, 512), seed=4)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(2)).bfloat16()
    lin = QLinear([q], None, dtype=torch.float32, device=torch.device("cpu"), kernel=kernel)
    got, want = lin.direct()(x), lin(x)
    assert got.dtype == want.dtype and torch.equal(got, want)
    biased = QLinear([q], torch.ones(128), dtype=torch.float32, device=torch.device("cpu"), kernel=kernel)
    assert biased.direct() is biased                  # a bias: the module itself


@pytest.mark.parametrize("name", ["Q8_0", "Q4_K", "Q6_K"])
def test_embedding_rows_are_the_dequantized_rows(name: str) -> None:
    q = random_quant(name, (40, 256), seed=5)
    emb = QEmbedding(q, dtype=torch.float32, device=torch.device("cpu"))
    ids = torch.tensor([[3, 0, 39], [7, 7, 1]])
    assert torch.equal(emb(ids), q.dequantize()[ids])


@pytest.mark.parametrize("name", MODEL_TYPES)
def test_packed_logits_follow_the_dequantized_reference(quant_models: dict[str, str], name: str) -> None:
    path = quant_models[name]
    ref = Model.load(path, device="cpu", progress=False, weights="dequantize")
    packed = Model.load(path, device="cpu", progress=False)
    assert any(isinstance(m, QLinear) for m in packed.net.modules())
    ids = np.random.default_rng(4).integers(0, packed.n_vocab, 40).tolist()
    a, b = ref.logits(ids), packed.logits(ids)
    assert a.std().item() > 0.1
    # bfloat16 activations and scales in the int4 products: ~0.5 % relative error on these models
    assert ((a - b).norm() / a.norm()).item() < 2e-2


@pytest.mark.parametrize("rows", [16, 48, 64, 80, 4096 + 32])
def test_int4_packing_is_torchs_layout(rows: int) -> None:
    codes = torch.randint(0, 16, (rows, 96), generator=torch.Generator().manual_seed(rows), dtype=torch.int32)
    ref = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
    assert torch.equal(pack_int4(codes.to(torch.uint8)), ref)


def test_cpu_kernels_are_picked_per_type() -> None:
    cpu = torch.device("cpu")
    picked = {name: pick_kernel(random_quant(name, (64, 256)), cpu) for name in QUANT_TYPES}
    assert picked == {"Q4_0": "int4", "Q4_1": "int4", "Q5_0": "int4", "Q5_1": "int4", "Q8_0": "int4",
                      "Q2_K": "dequant", "Q3_K": "dequant", "Q4_K": "int4", "Q5_K": "int4", "Q6_K": "bf16"}
    assert pick_kernel(random_quant("Q4_0", (40, 256)), cpu) == "dequant"      # rows not a multiple of 16


# resident bytes / file bytes of the matrices: 4-bit codes plus a bf16 scale and offset per 32 values
# and term (Q8_0 and the 5-bit types: two terms)
RESIDENT_BOUND = {"Q4_0": 1.25, "Q4_1": 1.25, "Q4_K": 1.25, "Q8_0": 1.25, "Q5_0": 1.9, "Q5_1": 1.9}


@pytest.mark.parametrize("name", MODEL_TYPES)
def test_resident_weights_stay_near_the_file_size(quant_models: dict[str, str], name: str) -> None:
    path = quant_models[name]
    _, infos = read_layout(path)
    file_bytes = sum(i.n_bytes for i in infos.values())
    packed = Model.load(path, device="cpu", progress=False)
    dense = Model.load(path, device="cpu", progress=False, weights="dequantize")
    resident = weight_bytes(packed.net, resident=True)
    assert resident <= RESIDENT_BOUND[name] * file_bytes, (resident, file_bytes)
    assert weight_bytes(dense.net) > 2.5 * file_bytes          # what packing saves


def test_greedy_generation_agrees_with_the_reference(quant_models: dict[str, str]) -> None:
    path = quant_models["Q4_0"]
    ref = Model.load(path, device="cpu", progress=False, weights="dequantize")
    packed = Model.load(path, device="cpu", progress=False)
    a = ref.generate("{\"a\": 1", max_tokens=12, temperature=0.0, ignore_eos=True)
    b = packed.generate("{\"a\": 1", max_tokens=12, temperature=0.0, ignore_eos=True)
    # a random model's logits are nearly flat, so near-ties may flip; the start must agree
    assert a.tokens[:4] == b.tokens[:4]


def test_bad_weights_mode_and_threads_are_refused(quant_models: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="weights"):
        Model.load(quant_models["Q8_0"], device="cpu", progress=False, weights="int3")
    with pytest.raises(ValueError, match="n_threads"):
        Model.load(quant_models["Q8_0"], device="cpu", progress=False, n_threads=0)


# a packed projection (checked by the packing) and a table only looked up (the llama model is untied)
@pytest.mark.parametrize("tensor", ["blk.1.ffn_up.weight", "token_embd.weight"])
def test_nan_scale_is_refused_by_name(quant_models: dict[str, str], tmp_path, tensor: str) -> None:
    from halter.errors import ModelLoadError
    path = quant_models["Q8_0"]
    _, infos = read_layout(path)
    info = infos[tensor]
    data = bytearray(open(path, "rb").read())
    data[info.offset + 34 * 5:info.offset + 34 * 5 + 2] = np.array([np.nan], dtype=np.float16).tobytes()
    bad = tmp_path / "nan.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="NaN") as err:
        Model.load(bad, device="cpu", progress=False)
    assert err.value.field == tensor


def test_dequant_blocks_cover_every_quantized_type() -> None:
    for name in QUANT_TYPES:
        q = random_quant(name, (2, 256))
        assert dequantize_blocks(q.blocks(), name).shape == (q.blocks().shape[0], GGML_TYPES[_IDS[name]][1])


@pytest.mark.parametrize("name", INT4_TYPES)
def test_packing_from_the_blocks_equals_packing_the_codes(name: str) -> None:
    # chunks of PACK_ROWS rows, a last 64-row block and a shorter one, fused parts
    for rows in (16, 48, 80, PACK_ROWS + 112):
        q = random_quant(name, (rows, 256), seed=rows)
        packed, sz = pack_cpu([q])
        terms = q.int4_terms()
        assert len(packed) == len(terms)
        for p, s, (codes, scale, zero) in zip(packed, sz, terms):
            assert torch.equal(p, pack_int4(codes))
            assert torch.equal(s, torch.stack([scale.t(), zero.t()], dim=-1).to(torch.bfloat16))
    parts = [random_quant(name, (128, 256), 1), random_quant(name, (64, 256), 2), random_quant(name, (48, 256), 3)]
    whole = QuantTensor(torch.cat([p.raw for p in parts]), parts[0].ggml_type, (240, 256))
    for p, (codes, _, _) in zip(pack_cpu(parts)[0], whole.int4_terms()):
        assert torch.equal(p, pack_int4(codes))


def test_packing_refuses_an_infinite_scale_by_name() -> None:
    from halter.errors import ModelLoadError
    q = random_quant("Q4_K", (64, 512), seed=2)
    q.raw[40, 2:4] = torch.tensor([np.inf], dtype=torch.float16).view(torch.uint8)     # a dmin field
    q.source_path, q.source_name = "m.gguf", "blk.0.ffn_up.weight"
    with pytest.raises(ModelLoadError, match="infinite") as err:
        pack_cpu([q])
    assert err.value.field == "blk.0.ffn_up.weight" and err.value.path == "m.gguf"
