"""The ``"q8"`` CPU kernel: Q8_0 matrices kept as the file's codes and scales (``q8_product``),
held to the dequantized matrix, through ``QLinear``, a whole model and the packed-weight cache."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from halter import Model, cache
from halter.engine import build_tiny_gguf, packed_cache, q8_product
from halter.engine import qlinear as qlinear_mod
from halter.engine.gguf_loader import read_layout
from halter.engine.qlinear import QLinear, pick_kernel, weight_bytes
from halter.errors import ModelLoadError
from tests.test_engine_packed import random_quant

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(not (q8_product.jit.available() and q8_product.q8_ir.available()),
                                reason="the q8 kernel needs numba and AVX-512")


def _edge_scales(q) -> None:
    """Blocks whose float16 scale is zero, subnormal (both signs), the largest half and negative."""
    for block, value in enumerate([0.0, 3e-7, -5e-8, 65504.0, -0.002]):
        q.raw[block, block * 34:block * 34 + 2] = torch.tensor([value], dtype=torch.float16).view(torch.uint8)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _assert_close_product(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor, *, rounded_x: bool) -> None:
    """Every output within float32 rounding of the exact product (relative to the sum of the
    magnitudes it adds), so a row with a tiny or zero scale is held as tightly as the others; with
    ``rounded_x``, plus what rounding each activation to 16 bits of its block's largest magnitude
    may add (half a step: 2**-16 of that magnitude, times the weight)."""
    exact = x.double() @ w.double().T
    bound = 1e-5 * (x.double().abs() @ w.double().abs().T) + 1e-30
    if rounded_x:
        block_max = x.double().abs().reshape(x.shape[0], -1, 32).amax(-1).repeat_interleave(32, dim=1)
        bound += 2.0 ** -16 * (block_max @ w.double().abs().T)
    assert bool(((got.double() - exact).abs() <= bound).all()), ((got.double() - exact).abs() / bound).max()


@pytest.mark.parametrize("rows", [64, 4096 + 128])          # one tile; past the packing's row chunk
@pytest.mark.parametrize("n_in", [1, 2, 7])              # row groups of 1, 2 and 4 + 2 + 1
def test_products_are_the_dequantized_matrixs(rows: int, n_in: int) -> None:
    q = random_quant("Q8_0", (rows, 256), seed=rows)
    _edge_scales(q)
    x = torch.randn(n_in, 256, generator=torch.Generator().manual_seed(n_in))
    lin = QLinear([q], None, dtype=torch.float32, device=CPU, kernel="q8")
    got = lin(x)
    assert got.dtype == torch.float32 and got.shape == (n_in, rows)
    _assert_close_product(got, x, q.dequantize(), rounded_x=True)
    codes, scales = lin.parts[0].codes, lin.parts[0].scales
    ref = q8_product.product_reference(codes.numpy(), scales.numpy(), x.numpy())
    _assert_close_product(torch.from_numpy(ref), x, q.dequantize(), rounded_x=False)


def test_zero_and_non_finite_activations() -> None:
    q = random_quant("Q8_0", (128, 256), seed=9)
    lin = QLinear([q], None, dtype=torch.float32, device=CPU, kernel="q8")
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(3))
    x[0, :64] = 0                                       # whole blocks of zeros: scale 0, no division
    _assert_close_product(lin(x), x, q.dequantize(), rounded_x=True)
    x[1, 5] = float("nan")
    got = lin(x)
    assert bool(got[1].isnan().all()) and bool(got[[0, 2]].isfinite().all())     # as a float product


def test_fused_parts_pack_as_one_matrix() -> None:
    parts = [random_quant("Q8_0", (128, 320), 1), random_quant("Q8_0", (64, 320), 2)]
    lin = QLinear(parts, None, dtype=torch.float32, device=CPU, kernel="q8")
    x = torch.randn(2, 320, generator=torch.Generator().manual_seed(0))
    _assert_close_product(lin(x), x, torch.cat([p.dequantize() for p in parts]), rounded_x=True)
    assert weight_bytes(lin) == sum(p.nbytes for p in parts)     # the file's bytes exactly


def test_direct_product_is_the_modules_own() -> None:
    lin = QLinear([random_quant("Q8_0", (128, 256), 4)], None, dtype=torch.float32, device=CPU, kernel="q8")
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(2)).bfloat16()   # as the fused step passes it
    assert torch.equal(lin.direct()(x), lin(x))
    assert torch.equal(lin.direct()(x[:1]), lin(x[:1]))


def test_output_layers_take_it_where_numba_runs(monkeypatch) -> None:
    head = random_quant("Q8_0", (qlinear_mod.Q8_MIN_ROWS, 64))
    assert pick_kernel(head, CPU) == "q8"
    assert pick_kernel(random_quant("Q8_0", (256, 256)), CPU) == "int4"       # a layer's projection
    assert pick_kernel(random_quant("Q4_0", (qlinear_mod.Q8_MIN_ROWS, 64)), CPU) == "int4"
    monkeypatch.setattr(q8_product.jit, "available", lambda: False)
    assert pick_kernel(head, CPU) == "int4"


def test_prebuilt_buffers_give_the_same_product() -> None:
    parts = [random_quant("Q8_0", (128, 256), 1)]
    lin = QLinear(parts, None, dtype=torch.float32, device=CPU, kernel="q8")
    stored = {k: v.clone() for k, v in lin.stored_buffers().items()}
    assert set(stored) == {"0.codes", "0.scales"}
    again = QLinear(parts, None, dtype=torch.float32, device=CPU, kernel="q8", prebuilt=stored)
    x = torch.randn(2, 256)
    assert torch.equal(lin(x), again(x))
    with pytest.raises(packed_cache.Mismatch, match="codes"):
        QLinear([random_quant("Q8_0", (192, 256))], None, dtype=torch.float32, device=CPU, kernel="q8",
                prebuilt=stored)


def test_a_non_finite_scale_is_refused_by_name() -> None:
    q = random_quant("Q8_0", (64, 256), seed=2)
    q.raw[10, 34:36] = torch.tensor([np.nan], dtype=torch.float16).view(torch.uint8)
    q.source_path, q.source_name = "m.gguf", "output.weight"
    with pytest.raises(ModelLoadError, match="NaN") as err:
        q8_product.pack([q])
    assert err.value.field == "output.weight" and err.value.path == "m.gguf"


@pytest.fixture
def q8_everywhere(monkeypatch) -> None:
    """Every Q8_0 matrix of a tiny model through the q8 kernel (not only vocabulary-sized ones)."""
    monkeypatch.setattr(qlinear_mod, "Q8_MIN_ROWS", 64)


def test_a_model_on_q8_products_follows_the_reference(q8_everywhere, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(packed_cache, "MIN_BYTES", 0)
    path = build_tiny_gguf(tmp_path / "q8.gguf", n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                           dtype="Q8_0", seed=5)
    ref = Model.load(path, progress=False, weights="dequantize")
    packed = Model.load(path, progress=False)
    kernels = {k for m in packed.net.modules() if isinstance(m, QLinear) for k in m.kernels}
    assert "q8" in kernels
    ids = [1, 5, 9, 2, 7, 40, 3]
    want = ref.logits(ids)
    assert _rel(packed.logits(ids), want) < 1e-4        # float32 products (int4: bfloat16, ~0.5 %)
    a = ref.generate("ab", max_tokens=8, temperature=0.0, ignore_eos=True)
    b = packed.generate("ab", max_tokens=8, temperature=0.0, ignore_eos=True)
    assert a.tokens == b.tokens
    _, infos = read_layout(path)                      # the file's bytes, nothing rewritten wider
    assert weight_bytes(packed.net, resident=True) < 1.02 * sum(i.n_bytes for i in infos.values())
    cache.wait_for_writes()                           # the packing stored: a second load maps it

    def no_packing(*args, **kwargs):
        raise AssertionError("packed again although the packing is stored")
    monkeypatch.setattr(q8_product, "pack", no_packing)
    again = Model.load(path, progress=False)
    assert torch.equal(again.logits(ids), packed.logits(ids))


@pytest.mark.parametrize("mode", ["eager", "static", "trace", "fused"])
def test_every_decode_mode_runs_q8_products(q8_everywhere, tmp_path: Path, mode: str) -> None:
    # a traced step cannot record the kernel (numpy and numba inside), so a bucket that would be
    # traced runs the static step instead: the same tokens as the reference either way
    path = build_tiny_gguf(tmp_path / "q8.gguf", n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512,
                           dtype="Q8_0", seed=6)
    ref = Model.load(path, progress=False, weights="dequantize", decode="eager")
    m = Model.load(path, progress=False, decode=mode)
    want = ref.generate("abc", max_tokens=12, temperature=0.0, ignore_eos=True).tokens
    if mode == "trace":                               # asked for explicitly: said why it is not
        with pytest.warns(RuntimeWarning, match="cannot trace it"):
            got = m.generate("abc", max_tokens=12, temperature=0.0, ignore_eos=True).tokens
    else:
        got = m.generate("abc", max_tokens=12, temperature=0.0, ignore_eos=True).tokens
    assert got == want


SPM_VOCAB = Path(__file__).resolve().parents[2] / "shared" / "vocab" / "ggml-vocab-llama-spm.gguf"


@pytest.mark.skipif(not SPM_VOCAB.exists(), reason="needs ../shared/vocab")
def test_a_q8_output_layer_follows_a_traced_step(tmp_path: Path) -> None:
    # a real 32,000-token vocabulary: the tied Q8_0 output layer takes the q8 kernel by default,
    # the layers stay int4; the traced step (also what the fused mode runs past 1,024 cells) runs
    # the layers and leaves the output layer to Python, with the plain step's tokens
    path = build_tiny_gguf(tmp_path / "spm.gguf", n_layer=2, n_embd=64, n_head=4, n_head_kv=2, n_ff=128,
                           dtype="Q8_0", seed=7, vocab=SPM_VOCAB, tied_output=True)
    m = Model.load(path, progress=False, decode="trace")
    assert m.net.output.kernels == ["q8"]
    assert all(k == "int4" for mod in m.net.layers.modules() if isinstance(mod, QLinear) for k in mod.kernels)
    ref = Model.load(path, progress=False, decode="eager")
    want = ref.generate("The cat", max_tokens=10, temperature=0.0, ignore_eos=True).tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)       # traced, not fallen back to the static step
        assert m.generate("The cat", max_tokens=10, temperature=0.0, ignore_eos=True).tokens == want


def test_products_from_two_threads_at_once() -> None:
    # a server's scheduler and another caller may multiply at the same time
    from concurrent.futures import ThreadPoolExecutor
    lin = QLinear([random_quant("Q8_0", (512, 256), 11)], None, dtype=torch.float32, device=CPU, kernel="q8")
    xs = [torch.randn(2, 256, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    want = [lin(x) for x in xs]
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda x: [lin(x) for _ in range(10)][-1], xs))
    assert all(torch.equal(a, b) for a, b in zip(got, want))
