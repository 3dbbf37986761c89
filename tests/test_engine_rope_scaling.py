"""Rope scalings and phi3's long-context files on tiny random GGUF models, against transformers.

transformers' GGUF loader reads the weights of these files but none of their rope scaling: not
``rope.scaling.*`` for llama/qwen2 (it reconstructs rope scaling for gpt-oss only), nor phi3's
``rope_factors_long/short.weight`` tensors and ``rope.scaling.original_context_length``. Each
reference is therefore transformers' model loaded from the same GGUF file with ``rope_parameters``
passed in, built from the very values written into the file. Logits within 1e-4 in F32, the KV
cache equal to a full forward, and a context shift (re-rotating cached keys) equal to evaluating at
the shifted positions.
"""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

from halter.engine import Model, build_tiny_gguf

transformers = pytest.importorskip("transformers")

ORIG, TRAIN = 32, 128                    # phi3 LongRoPE: original and extended context
RNG = np.random.default_rng(0)
LONG = (1 + 7 * RNG.random(8)).astype(np.float32)          # head size 16: 8 rotary pairs
SHORT = (1 + 0.5 * RNG.random(8)).astype(np.float32)
YARN = {"type": "yarn", "factor": 4.0, "original_context_length": 256}
YARN_TUNED = {**YARN, "yarn_beta_fast": 16.0, "yarn_beta_slow": 2.0, "yarn_attn_factor": 1.3}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = tmp_path_factory.mktemp("rope_models")
    attn = math.sqrt(1 + math.log(TRAIN / ORIG) / math.log(ORIG))      # what the converter writes
    build_tiny_gguf(d / "phi3-long.gguf", arch="phi3", seed=12, n_ctx_train=TRAIN,
                    rope_scaling={"original_context_length": ORIG, "attn_factor": attn},
                    rope_factors=(LONG, SHORT))
    build_tiny_gguf(d / "phi3-long-old.gguf", arch="phi3", seed=12, n_ctx_train=TRAIN,   # no attn_factor
                    rope_scaling={"original_context_length": ORIG}, rope_factors=(LONG, SHORT))
    build_tiny_gguf(d / "phi3-partial.gguf", arch="phi3", seed=13, rope_dim=12)        # Phi-4-mini style
    build_tiny_gguf(d / "phi3-q8.gguf", arch="phi3", seed=15, dtype="Q8_0")
    for arch in ("qwen2", "llama"):
        for name, scaling in (("yarn", YARN), ("yarn-tuned", YARN_TUNED)):
            build_tiny_gguf(d / f"{arch}-{name}.gguf", arch=arch, seed=14, n_ctx_train=1024,
                            rope_scaling=scaling)
    return str(d)


def _tokens(n: int, seed: int = 3) -> list[int]:
    return np.random.default_rng(seed).integers(0, 300, n).tolist()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _hf(files: str, name: str, **overrides):
    return transformers.AutoModelForCausalLM.from_pretrained(files, gguf_file=name, dtype=torch.float32,
                                                              **overrides)


def _hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def _phi3_longrope(files: str, name: str):
    params = {"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": LONG.tolist(),
              "short_factor": SHORT.tolist(), "original_max_position_embeddings": ORIG}
    return _hf(files, name, pad_token_id=None, original_max_position_embeddings=ORIG,
               rope_parameters=params)


@pytest.mark.slow     # two transformers models, four halter loads
@pytest.mark.parametrize("name", ["phi3-long.gguf", "phi3-long-old.gguf"])
def test_phi3_longrope_short_and_long_factors_match_transformers(files: str, name: str) -> None:
    """A cache up to the original context rotates with the short factors, a longer one with the
    long factors (llama.cpp's choice by ``n_ctx``; transformers switches on the sequence length, so
    sequences on the same side of it agree). The magnitude ``sqrt(1 + ln 4 / ln 32)`` applies either
    way, read from ``attn_factor`` or, in files without it, computed as transformers does."""
    hf = _phi3_longrope(files, name)
    path = os.path.join(files, name)
    short_ids, long_ids = _tokens(30), _tokens(40)
    short = Model.load(path, device="cpu", n_ctx=ORIG, progress=False)
    long = Model.load(path, device="cpu", n_ctx=2 * ORIG, progress=False)
    assert short.config.rope_scaling == "longrope"
    assert short.config.rope_attn_factor == pytest.approx(math.sqrt(1 + math.log(4) / math.log(32)))
    assert _rel(short.logits(short_ids), _hf_logits(hf, short_ids)) < 1e-4
    assert _rel(long.logits(long_ids), _hf_logits(hf, long_ids)) < 1e-4
    assert _rel(long.logits(short_ids), short.logits(short_ids)) > 1e-3      # the factors matter


@pytest.mark.slow     # the static step is built on first use
def test_phi3_longrope_cache_and_shift(files: str) -> None:
    m = Model.load(os.path.join(files, "phi3-long.gguf"), device="cpu", n_ctx=2 * ORIG, n_batch=5,
                   progress=False)
    ids = _tokens(40)
    full = m.logits(ids)
    steps = [m.eval_prompt(ids[:17], 0)] + [m.decode([[t]], [0])[0] for t in ids[17:]]
    assert _rel(torch.stack(steps), full[16:]) < 1e-5
    for mode in ("static", "trace"):
        m.cache.clear()
        m.set_decode(mode)
        steps = [m.eval_prompt(ids[:17], 0)] + [m.decode([[t]], [0])[0] for t in ids[17:]]
        assert _rel(torch.stack(steps), full[16:]) < 1e-5, mode
    m.cache.clear()
    m.eval_prompt(ids[:9], 0)
    m.cache.seq_add(0, 0, None, 5)       # relative positions are unchanged: so are the logits
    assert _rel(m.decode([[ids[9]]], [0])[0], full[9]) < 1e-4


def test_phi3_partial_rotary_matches_transformers(files: str) -> None:
    """``rope.dimension_count`` 12 of a head of 16 (Phi-4-mini rotates 96 of 128)."""
    hf = _hf(files, "phi3-partial.gguf", pad_token_id=None,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.75})
    m = Model.load(os.path.join(files, "phi3-partial.gguf"), device="cpu", n_ctx=64, progress=False)
    ids = _tokens(40)
    full = m.logits(ids)
    assert m.config.rope_dim == 12 and _rel(full, _hf_logits(hf, ids)) < 1e-4
    m.eval_prompt(ids[:9], 0)
    m.cache.seq_add(0, 0, None, 3)
    assert _rel(m.decode([[ids[9]]], [0])[0], full[9]) < 1e-4


def test_phi3_packed_fused_weights_follow_the_dequantized_reference(files: str) -> None:
    """Q8_0 ``attn_qkv`` and ``ffn_up`` split into row views of the quantized blocks."""
    path = os.path.join(files, "phi3-q8.gguf")
    ref = Model.load(path, device="cpu", progress=False, weights="dequantize")
    packed = Model.load(path, device="cpu", progress=False)
    ids = _tokens(30, 4)
    assert _rel(packed.logits(ids), ref.logits(ids)) < 2e-2
    hf = _hf(os.path.dirname(path), "phi3-q8.gguf", pad_token_id=None)
    assert _rel(ref.logits(ids), _hf_logits(hf, ids)) < 1e-4


@pytest.mark.slow     # four transformers models
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_yarn_matches_transformers(files: str, arch: str) -> None:
    """``rope.scaling.type = yarn`` as transformers' ``_compute_yarn_parameters`` computes it: factor 4
    over an original context of 256 with the default betas (32, 1) and magnitude 0.1 ln 4 + 1,
    then with ``yarn_beta_fast``/``yarn_beta_slow``/``yarn_attn_factor`` given."""
    ids = _tokens(40)
    plain = None
    for name, params in (("yarn", {}),
                         ("yarn-tuned", {"beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.3})):
        hf = _hf(files, f"{arch}-{name}.gguf", rope_parameters={
            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
            "original_max_position_embeddings": 256, **params})
        ref = _hf_logits(hf, ids)
        m = Model.load(os.path.join(files, f"{arch}-{name}.gguf"), device="cpu", progress=False)
        assert m.config.rope_scaling == "yarn"
        assert _rel(m.logits(ids), ref) < 1e-4
        if plain is None:
            plain = _hf_logits(_hf(files, f"{arch}-{name}.gguf"), ids)     # unscaled rope
            assert _rel(plain, ref) > 1e-3
            assert m.config.rope_attn_factor == pytest.approx(0.1 * math.log(4) + 1)


@pytest.mark.slow     # the static step is built on first use
def test_yarn_cache_static_step_and_shift(files: str) -> None:
    m = Model.load(os.path.join(files, "qwen2-yarn-tuned.gguf"), device="cpu", n_ctx=64, n_batch=5,
                   progress=False)
    ids = _tokens(30)
    full = m.logits(ids)
    steps = [m.eval_prompt(ids[:11], 0)] + [m.decode([[t]], [0])[0] for t in ids[11:]]
    assert _rel(torch.stack(steps), full[10:]) < 1e-5
    for mode in ("static", "trace"):
        m.cache.clear()
        m.set_decode(mode)
        steps = [m.eval_prompt(ids[:11], 0)] + [m.decode([[t]], [0])[0] for t in ids[11:]]
        assert _rel(torch.stack(steps), full[10:]) < 1e-5, mode
    m.cache.clear()
    m.eval_prompt(ids[:9], 0)
    m.cache.seq_add(0, 0, None, 20)      # keys re-rotated once: the magnitude is not applied twice
    assert _rel(m.decode([[ids[9]]], [0])[0], full[9]) < 1e-4


def test_non_positive_rope_factors_are_refused_by_name(tmp_path) -> None:
    from halter.errors import ModelLoadError

    bad = SHORT.copy()
    bad[3] = 0.0
    path = build_tiny_gguf(tmp_path / "bad.gguf", arch="phi3", n_ctx_train=TRAIN,
                           rope_scaling={"original_context_length": ORIG}, rope_factors=(LONG, bad))
    with pytest.raises(ModelLoadError, match="must be positive") as e:
        Model.load(path, progress=False)
    assert e.value.field == "rope_factors_short.weight"


def test_gemma3_yarn_is_refused_by_name(tmp_path) -> None:
    """Its sliding layers rotate unscaled: a YaRN magnitude on the shared attention scale would
    reach them, so the combination is refused rather than computed wrongly."""
    from halter.errors import ModelLoadError

    path = build_tiny_gguf(tmp_path / "g.gguf", arch="gemma3", n_layer=6, rope_scaling=YARN)
    with pytest.raises(ModelLoadError, match="'yarn' with a magnitude factor") as e:
        Model.load(path, progress=False)
    assert e.value.field == "gemma3.rope.scaling.type"


@pytest.mark.parametrize("kind", ["norm", "neox"])
def test_rotating_bf16_values_rounds_the_float32_rotation_once(kind: str) -> None:
    from halter.engine.rope import Rope
    rope = Rope(64, 10000.0, kind, rope_dim=48)
    x = torch.randn(2, 3, 5, 64).to(torch.bfloat16)
    cos, sin = rope.tables(torch.arange(3).expand(2, 3), 64)
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    got = rope.rotate(x, cos, sin)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, rope.rotate(x.float(), cos, sin).to(torch.bfloat16))
