"""qwen3, gemma2, gemma3 and phi3 on tiny random GGUF files, against transformers' GGUF loader.

Each architecture's switches (Q/K head norms, post norms, GeGLU, scaled embeddings, sliding-window
layers with their own rope base, soft-capping, phi3's fused Q/K/V and gate/up) are checked the way
llama and qwen2 are: logits
within 1e-4 of transformers in F32, the KV cache equal to a full forward (prompts longer than the
sliding window, so the window matters), batched rows independent, static decode equal to eager.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from halter.engine import Model, build_tiny_gguf
from halter.errors import ModelLoadError

transformers = pytest.importorskip("transformers")

HEAD_DIM = 16
# arch -> (builder keywords, transformers config overrides the GGUF keys cannot carry)
SPECS = {
    "qwen3": ({"n_layer": 2, "head_dim": 24}, {"head_dim": 24}),     # its GGUF map skips key_length
    # gemma2: layer 0 slides over 8 positions, layer 1 is global; both soft-caps set
    "gemma2": ({"n_layer": 2}, {"query_pre_attn_scalar": HEAD_DIM}),
    # gemma3: layers 0-4 slide (rope base 10000), layer 5 is global (rope base 1e6)
    "gemma3": ({"n_layer": 6, "rope_base": 1e6}, {"query_pre_attn_scalar": HEAD_DIM}),
    # phi3: attn_qkv and a gate+up ffn_up; Phi3Config's default pad id (32000) is outside the vocab
    "phi3": ({"n_layer": 2}, {"pad_token_id": None}),
}


@pytest.fixture(scope="session")
def arch_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("arch_models")
    for arch, (kw, _) in SPECS.items():
        build_tiny_gguf(d / f"{arch}.gguf", arch=arch, seed=11, n_embd=64, n_head=4, n_head_kv=2,
                        n_ff=128, **kw)
    return str(d)


def _tokens(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 300, n).tolist()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("arch", list(SPECS))
def test_logits_match_transformers(arch_dir: str, arch: str) -> None:
    path = os.path.join(arch_dir, f"{arch}.gguf")
    model = Model.load(path, device="cpu", progress=False)
    ids = _tokens(40, 3)
    ours = model.logits(ids)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        arch_dir, gguf_file=f"{arch}.gguf", torch_dtype=torch.float32, **SPECS[arch][1])
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    assert ref.std().item() > 0.1
    assert _rel(ours, ref) < 1e-4, f"{arch}: relative error {_rel(ours, ref):.2e}"


@pytest.mark.parametrize("arch", list(SPECS))
def test_kv_cache_equals_full_forward_and_rows_do_not_leak(arch_dir: str, arch: str) -> None:
    m = Model.load(os.path.join(arch_dir, f"{arch}.gguf"), device="cpu", n_ctx=64, n_batch=5,
                   n_seq_max=2, progress=False)
    ids = _tokens(24)
    full = m.logits(ids)
    steps = [m.eval_prompt(ids[:11], 0)]
    steps += [m.decode([[t]], [0])[0] for t in ids[11:]]
    assert _rel(torch.stack(steps), full[10:]) < 1e-5
    m.cache.clear()
    a, b = _tokens(9, 1), _tokens(17, 2)
    alone_a, alone_b = m.logits(a), m.logits(b)
    m.eval_prompt(a[:-1], 0)
    m.eval_prompt(b[:-1], 1)
    both = m.decode([[a[-1]], [b[-1]]], [0, 1])
    assert _rel(both[0], alone_a[-1]) < 1e-5 and _rel(both[1], alone_b[-1]) < 1e-5
    for mode in ("eager", "static", "trace"):
        m.cache.clear()
        m.set_decode(mode)
        steps = [m.eval_prompt(ids[:11], 0)] + [m.decode([[t]], [0])[0] for t in ids[11:]]
        assert _rel(torch.stack(steps), full[10:]) < 1e-5, mode


def test_gemma3_shift_re_rotates_each_layer_with_its_own_base(arch_dir: str) -> None:
    m = Model.load(os.path.join(arch_dir, "gemma3.gguf"), device="cpu", n_ctx=64, progress=False)
    ids = _tokens(6, 5)               # shorter than the window: a shift must change nothing
    reference = m.logits(ids)[-1]
    m.eval_prompt(ids[:-1], 0)
    m.cache.seq_add(0, 0, None, 7)
    assert _rel(m.decode([[ids[-1]]], [0])[0], reference) < 1e-4


def test_sliding_window_and_soft_caps_are_read(arch_dir: str) -> None:
    g2 = Model.load(os.path.join(arch_dir, "gemma2.gguf"), device="cpu", progress=False).config
    assert (g2.sliding_window, g2.swa_layers, g2.attn_softcap, g2.final_softcap) == \
        (8, (True, False), 50.0, 30.0)
    g3 = Model.load(os.path.join(arch_dir, "gemma3.gguf"), device="cpu", progress=False).config
    assert g3.swa_layers == (True,) * 5 + (False,) and g3.rope_base_swa == 10000.0
    assert g3.embed_scale == 8.0 and g3.act == "gelu_tanh"


def test_gemma_without_sliding_window_names_the_key(tmp_path) -> None:
    import gguf

    path = tmp_path / "g.gguf"
    w = gguf.GGUFWriter(os.fspath(path), "gemma3")
    for key, value in (("embedding_length", 64), ("block_count", 1), ("feed_forward_length", 128),
                       ("attention.head_count", 4), ("context_length", 128)):
        w.add_uint32(f"gemma3.{key}", value)
    w.add_tensor("token_embd.weight", np.zeros((10, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="missing metadata") as e:
        Model.load(path, progress=False)
    assert e.value.field == "gemma3.attention.sliding_window"


def _llama3_factors(head_dim: int, base: float, factor: float, low: float, high: float,
                    old_ctx: int) -> np.ndarray:
    """The ``rope_freqs.weight`` llama.cpp's converter writes for ``rope_type: llama3``."""
    import math

    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * base ** (i / head_dim)
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


@pytest.mark.slow   # two transformers models
def test_llama3_rope_scaling_matches_transformers(tmp_path) -> None:
    base, params = 500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}
    factors = _llama3_factors(HEAD_DIM, base, params["factor"], params["low_freq_factor"],
                              params["high_freq_factor"], params["original_max_position_embeddings"])
    assert {1.0, 8.0} < set(factors.tolist())          # high, low and smoothed frequencies all occur
    path = build_tiny_gguf(tmp_path / "llama3.gguf", seed=5, rope_base=base, rope_freqs=factors,
                           n_ctx_train=131072)
    model = Model.load(path, device="cpu", n_ctx=2048, progress=False)
    ids = _tokens(40, 9)
    model.eval_prompt(ids[:20], 0)
    model.cache.seq_add(0, 0, None, 1500)               # far positions, where the scaling matters
    ours = model.eval_prompt(ids[20:], 0, all_logits=True)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, gguf_file="llama3.gguf", dtype=torch.float32,
        rope_parameters={"rope_type": "llama3", "rope_theta": base, **params})
    pos = torch.tensor([list(range(1500, 1520)) + list(range(1520, 1540))])
    with torch.no_grad():
        ref = hf(torch.tensor([ids]), position_ids=pos).logits[0, 20:]
    assert _rel(ours, ref) < 1e-4, _rel(ours, ref)
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="llama3.gguf",
                                                              dtype=torch.float32)
    with torch.no_grad():
        unscaled = plain(torch.tensor([ids]), position_ids=pos).logits[0, 20:]
    assert _rel(unscaled, ref) > 1e-3                    # the scaling changes the logits


@pytest.mark.parametrize("key,value,message", [
    ("llama.rope.scaling.type", "dynamic", "unsupported rope scaling 'dynamic'"),
    ("llama.rope.scaling.type", "longrope", "longrope needs the tensors rope_factors_long.weight"),
    ("llama.rope.scaling.yarn_log_multiplier", 0.1, "yarn_log_multiplier 0.1"),
    ("llama.rope.scaling.yarn_ext_factor", 0.5, "yarn_ext_factor 0.5"),
    ("llama.rope.scaling.factor", -2.0, "must be positive"),
    ("llama.rope.dimension_count", 8, "partial rotary embeddings .8 of 16. are not supported for llama"),
    ("llama.rope.dimension_count", 7, "rotary dimensions must be even"),
])
def test_unsupported_fields_are_refused_by_name(tmp_path, key: str, value, message: str) -> None:
    import gguf

    src = build_tiny_gguf(tmp_path / "src.gguf", seed=1)
    reader = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(os.fspath(tmp_path / "bad.gguf"), "llama")
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in ("general.architecture", key):
            continue
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), field.types[0], sub)
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    else:
        w.add_uint32(key, value)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match=message) as e:
        Model.load(tmp_path / "bad.gguf", progress=False)
    assert e.value.field == key


def test_other_architectures_are_refused_by_name(tmp_path) -> None:
    import gguf

    w = gguf.GGUFWriter(os.fspath(tmp_path / "phi.gguf"), "phi2")
    w.add_tensor("token_embd.weight", np.zeros((10, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelLoadError, match="unsupported architecture 'phi2'.*gemma3.*phi3") as e:
        Model.load(tmp_path / "phi.gguf", progress=False)
    assert e.value.field == "general.architecture"
