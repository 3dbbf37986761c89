"""Model hyper-parameters read from GGUF metadata, with the per-architecture rules halter supports.

``ModelConfig.from_gguf_fields`` turns the ``{general.architecture}.*`` keys of a GGUF file into a
frozen dataclass; a missing or malformed key becomes a ``ModelLoadError`` naming the key.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Mapping

from halter.errors import ModelLoadError
from halter.limits import LIMITS

@dataclass(frozen=True)
class ArchRules:
    """What one ``general.architecture`` changes in the llama block.

    ``rope``: llama.cpp's converter permutes llama Q/K rows so ggml's NORM rope (adjacent pairs)
    applies; the others keep the Hugging Face layout, rotated with the NEOX (half-split) rope.
    ``swa_every``: every ``swa_every``-th layer attends globally, the others over a sliding window
    (``attention.sliding_window``); 0 means no sliding window. ``rope_base_swa``: the rope base of
    the sliding layers (gemma3's local base) when the file does not give ``rope.freq_base_swa``.
    """

    rope: str
    attn_bias: bool = False        # Q/K/V biases (qwen2)
    qk_norm: bool = False          # RMSNorm of each query/key head before the rope (qwen3, gemma3)
    post_norms: bool = False       # RMSNorm after attention and after the FFN (gemma2, gemma3)
    act: str = "silu"              # gate activation: silu (SwiGLU) or gelu_tanh (GeGLU)
    embed_scale: bool = False      # embeddings times sqrt(n_embd) (gemma)
    swa_every: int = 0
    softcaps: bool = False         # attention and final logit soft-capping (gemma2)
    rope_base_swa: float = 0.0
    fused_gate_up: bool = False    # ``ffn_up`` holds the gate rows, then the up rows (phi3)


ARCHITECTURES: dict[str, ArchRules] = {
    "llama": ArchRules("norm"),
    "qwen2": ArchRules("neox", attn_bias=True),
    "qwen3": ArchRules("neox", qk_norm=True),
    "gemma2": ArchRules("neox", post_norms=True, act="gelu_tanh", embed_scale=True, swa_every=2,
                        softcaps=True),
    "gemma3": ArchRules("neox", qk_norm=True, post_norms=True, act="gelu_tanh", embed_scale=True,
                        swa_every=6, rope_base_swa=10000.0),
    # phi3 (Phi-3, Phi-3.5, Phi-4, Phi-4-mini): fused Q/K/V (``attn_qkv``) and gate/up; the 128k
    # variants carry LongRoPE factors (``rope_factors_long/short.weight``). llama.cpp disables its
    # sliding window (``attention.sliding_window``), and so does halter.
    "phi3": ArchRules("neox", fused_gate_up=True),
}
# rope.scaling.type values halter reads; "longrope" also comes from the rope_factors_* tensors
ROPE_SCALINGS = ("none", "linear", "yarn", "longrope")
LONGROPE_TENSORS = ("rope_factors_long.weight", "rope_factors_short.weight")
# llama.cpp scales gemma queries by 1/sqrt(head_dim), except for the 27B models (recognised by
# their layer count), which use 1/sqrt(n_embd / n_head): the files carry no key for it.
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and constants of a llama-family transformer."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    norm_eps: float
    rope_base: float
    rope_dim: int
    rope_type: str            # "norm" (adjacent pairs) or "neox" (first half / second half)
    rope_linear_scale: float  # positions are divided by this (llama.cpp rope.scaling.type=linear)
    attn_bias: bool
    n_ctx_train: int
    qk_norm: bool = False
    post_norms: bool = False
    act: str = "silu"
    embed_scale: float = 1.0          # embeddings are multiplied by this
    attn_scale: float = 0.0           # query scale; 0 means 1/sqrt(head_dim)
    attn_softcap: float = 0.0         # 0: off; else scores = cap * tanh(scores / cap)
    final_softcap: float = 0.0
    sliding_window: int = 0           # 0: every layer attends globally
    swa_layers: tuple[bool, ...] = () # per layer: attends over the sliding window
    rope_base_swa: float = 0.0        # rope base of the sliding layers; 0: same as rope_base
    fused_qkv: bool = False           # the file has ``attn_qkv`` instead of ``attn_q/k/v``
    fused_gate_up: bool = False       # ``ffn_up`` holds gate then up rows (phi3)
    rope_scaling: str = "none"        # one of ROPE_SCALINGS
    rope_factor: float = 1.0          # rope.scaling.factor (linear, yarn)
    rope_orig_ctx: int = 0            # rope.scaling.original_context_length (yarn, longrope)
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    rope_attn_factor: float = 1.0     # cos/sin magnitude (YaRN/LongRoPE); folded into attn_scale

    @staticmethod
    def from_gguf_fields(get: Callable[[str], Any], n_vocab: int, path: Any = None,
                         tensor_names: Collection[str] = ()) -> "ModelConfig":
        """Build from a metadata getter ``get(key) -> value or None``; ``n_vocab`` from the embedding.

        ``tensor_names`` (the file's tensors) decide what the metadata cannot: a fused ``attn_qkv``
        and LongRoPE factor tensors.
        """
        arch = get("general.architecture")
        if arch is None:
            raise ModelLoadError("not a model file (no architecture)", path=path,
                                 field="general.architecture")
        if not isinstance(arch, str):
            raise ModelLoadError(f"architecture must be a string, not {type(arch).__name__}", path=path,
                                 field="general.architecture")
        if arch not in ARCHITECTURES:
            raise ModelLoadError(
                f"unsupported architecture {arch!r} (supported: {', '.join(sorted(ARCHITECTURES))})",
                path=path, field="general.architecture")
        rules = ARCHITECTURES[arch]

        def need(key: str) -> Any:
            value = get(f"{arch}.{key}")
            if value is None:
                raise ModelLoadError("missing metadata", path=path, field=f"{arch}.{key}")
            return value

        def num(key: str, default: Any = None, kind: type = int) -> Any:
            value = get(f"{arch}.{key}") if default is not None else need(key)
            if value is None:
                return default
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ModelLoadError(f"expected a number, found {value!r}", path=path,
                                     field=f"{arch}.{key}")
            return checked_number(value, kind, path, f"{arch}.{key}")

        n_embd = num("embedding_length")
        n_head = num("attention.head_count")
        n_head_kv = num("attention.head_count_kv", n_head)
        if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv:
            raise ModelLoadError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}",
                                 path=path, field=f"{arch}.attention.head_count_kv")
        head_dim = num("attention.key_length", n_embd // n_head)
        rope_dim = num("rope.dimension_count", head_dim)
        if not 2 <= rope_dim <= head_dim or rope_dim % 2:
            raise ModelLoadError(f"rotary dimensions must be even and at most the head size {head_dim}, "
                                 f"found {rope_dim}", path=path, field=f"{arch}.rope.dimension_count")
        if rope_dim != head_dim and rules.rope == "norm":
            raise ModelLoadError(f"partial rotary embeddings ({rope_dim} of {head_dim}) are not supported "
                                 f"for {arch} (only for the NEOX layout)", path=path,
                                 field=f"{arch}.rope.dimension_count")
        n_ctx_train = num("context_length", 4096)
        rope = read_rope_scaling(get, num, arch, path, n_ctx_train,
                                 all(t in tensor_names for t in LONGROPE_TENSORS))
        n_layer = num("block_count")
        if not 1 <= n_layer <= LIMITS.model_layers:
            raise ModelLoadError(f"{n_layer} blocks (1 to {LIMITS.model_layers} allowed; limit model_layers: "
                                 "halter.limits.set(model_layers=...))", path=path, field=f"{arch}.block_count")
        value_dim = num("attention.value_length", head_dim)
        if value_dim != head_dim:
            raise ModelLoadError(f"value heads of {value_dim} differ from key heads of {head_dim}",
                                 path=path, field=f"{arch}.attention.value_length")
        window, swa_layers = 0, ()
        if rules.swa_every:
            window = num("attention.sliding_window")
            swa_layers = tuple((i + 1) % rules.swa_every != 0 for i in range(n_layer))
        attn_scale = 0.0
        if n_layer == _GEMMA_27B_LAYERS.get(arch):
            attn_scale = (n_embd / n_head) ** -0.5
        if rope["rope_attn_factor"] != 1.0 and rules.rope_base_swa:
            # the magnitude would reach gemma3's unscaled sliding layers through the shared scale
            raise ModelLoadError(f"rope scaling {rope['rope_scaling']!r} with a magnitude factor is not "
                                 f"supported for {arch}", path=path, field=f"{arch}.rope.scaling.type")
        if rope["rope_attn_factor"] != 1.0:   # cos and sin scaled by m: q.k scaled by m**2
            attn_scale = (attn_scale or head_dim ** -0.5) * rope["rope_attn_factor"] ** 2
        config = ModelConfig(
            arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
            head_dim=head_dim, n_ff=num("feed_forward_length"), n_vocab=n_vocab,
            norm_eps=num("attention.layer_norm_rms_epsilon", 1e-5, float),
            rope_base=num("rope.freq_base", 10000.0, float), rope_dim=rope_dim, rope_type=rules.rope,
            attn_bias=rules.attn_bias, n_ctx_train=n_ctx_train, qk_norm=rules.qk_norm,
            post_norms=rules.post_norms, act=rules.act,
            embed_scale=float(n_embd) ** 0.5 if rules.embed_scale else 1.0, attn_scale=attn_scale,
            attn_softcap=num("attn_logit_softcapping", 0.0, float) if rules.softcaps else 0.0,
            final_softcap=num("final_logit_softcapping", 0.0, float) if rules.softcaps else 0.0,
            sliding_window=window, swa_layers=swa_layers,
            rope_base_swa=num("rope.freq_base_swa", rules.rope_base_swa or 0.0, float)
            if rules.rope_base_swa else 0.0,
            fused_qkv="blk.0.attn_qkv.weight" in tensor_names, fused_gate_up=rules.fused_gate_up, **rope)
        config.check_values(path)
        return config

    def check_values(self, path: Any = None) -> None:
        """``ModelLoadError`` naming the field for a hyper-parameter no model can have."""
        a = self.arch
        for value, key in ((self.n_layer, "block_count"), (self.n_embd, "embedding_length"),
                           (self.n_head, "attention.head_count"), (self.head_dim, "attention.key_length"),
                           (self.n_ff, "feed_forward_length"), (self.n_ctx_train, "context_length")):
            if value < 1:
                raise ModelLoadError(f"must be at least 1, found {value}", path=path, field=f"{a}.{key}")
        for value, key in ((self.norm_eps, "attention.layer_norm_rms_epsilon"), (self.rope_base, "rope.freq_base")):
            if not value > 0:
                raise ModelLoadError(f"must be a positive number, found {value}", path=path, field=f"{a}.{key}")
        if self.head_dim % 2:
            raise ModelLoadError(f"head dimension {self.head_dim} must be even for rotary embeddings",
                                 path=path, field=f"{a}.attention.key_length")

    def expected_tensors(self) -> Mapping[str, tuple[int, ...]]:
        """GGUF tensor name -> torch shape for every tensor the model needs (output.weight optional).

        Fused files list ``attn_qkv`` (Q, K, V rows) and, for phi3, an ``ffn_up`` of gate and up
        rows; ``halter.engine.gguf_loader`` splits them into the separate names.
        """
        e, kv, ff = self.n_embd, self.n_head_kv * self.head_dim, self.n_ff
        q = self.n_head * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (self.n_vocab, e),
                                              "output_norm.weight": (e,)}
        if self.rope_scaling == "longrope":
            shapes.update({name: (self.rope_dim // 2,) for name in LONGROPE_TENSORS})
        for i in range(self.n_layer):
            b = f"blk.{i}."
            if self.fused_qkv:
                shapes[b + "attn_qkv.weight"] = (q + 2 * kv, e)
            else:
                shapes.update({b + "attn_q.weight": (q, e), b + "attn_k.weight": (kv, e),
                               b + "attn_v.weight": (kv, e)})
            shapes.update({b + "attn_norm.weight": (e,), b + "attn_output.weight": (e, q),
                           b + "ffn_norm.weight": (e,), b + "ffn_down.weight": (e, ff)})
            if self.fused_gate_up:
                shapes[b + "ffn_up.weight"] = (2 * ff, e)
            else:
                shapes.update({b + "ffn_gate.weight": (ff, e), b + "ffn_up.weight": (ff, e)})
            if self.attn_bias:
                shapes.update({b + "attn_q.bias": (q,), b + "attn_k.bias": (kv,),
                               b + "attn_v.bias": (kv,)})
            if self.qk_norm:
                shapes.update({b + "attn_q_norm.weight": (self.head_dim,),
                               b + "attn_k_norm.weight": (self.head_dim,)})
            if self.post_norms:
                shapes.update({b + "post_attention_norm.weight": (e,), b + "post_ffw_norm.weight": (e,)})
        return shapes


def read_rope_scaling(get: Callable[[str], Any], num: Callable[..., Any], arch: str, path: Any,
                      n_ctx_train: int, longrope_tensors: bool) -> dict[str, Any]:
    """The ``ModelConfig`` rope-scaling fields from ``{arch}.rope.scaling.*``, as llama.cpp reads them.

    The type defaults to ``linear`` with ``rope.scaling.factor`` (or the old ``rope.scale_linear``),
    factor 1 when absent; files with ``rope_factors_long/short.weight`` tensors (phi3 128k) are
    LongRoPE. YaRN reads the factor, ``original_context_length`` (default: the training context),
    ``yarn_beta_fast``/``yarn_beta_slow`` (32 and 1) and ``yarn_attn_factor`` (default
    ``0.1 ln(factor) + 1``) as transformers' ``_compute_yarn_parameters`` does; LongRoPE's magnitude
    is ``attn_factor``, else ``sqrt(1 + ln(s) / ln(original))`` with ``s`` the context ratio.
    ``rope.scaling.attn_factor`` multiplies the magnitude (llama.cpp). Anything else is refused
    by name: other types, ``yarn_ext_factor`` other than 1, ``yarn_log_multiplier``.
    """
    def field(key: str) -> str:
        return f"{arch}.rope.scaling.{key}"

    def refuse(message: str, key: str) -> ModelLoadError:
        return ModelLoadError(message, path=path, field=field(key))

    kind = get(field("type"))
    if kind is not None and (not isinstance(kind, str) or kind not in ROPE_SCALINGS):
        raise refuse(f"unsupported rope scaling {kind!r} (supported: {', '.join(ROPE_SCALINGS)})", "type")
    factor = num("rope.scaling.factor", 0.0, float) or num("rope.scale_linear", 0.0, float) or 1.0
    if factor < 0:
        raise refuse(f"must be positive, found {factor}", "factor")
    if longrope_tensors:
        if kind not in (None, "none", "linear", "longrope") or (kind != "longrope" and factor != 1.0):
            raise refuse(f"rope scaling {kind!r} with factor {factor} and LongRoPE factor tensors "
                         "(rope_factors_long.weight) is not supported", "type")
        kind = "longrope"
    elif kind == "longrope":
        raise refuse("longrope needs the tensors rope_factors_long.weight and rope_factors_short.weight",
                     "type")
    kind = kind or "linear"
    for key, neutral in (("yarn_ext_factor", 1.0), ("yarn_log_multiplier", 0.0)):
        value = num(f"rope.scaling.{key}", neutral, float)
        if value != neutral:
            raise refuse(f"{key} {value} is not supported (only {neutral})", key)
    orig = num("rope.scaling.original_context_length", -1)
    if orig == -1:
        orig = n_ctx_train                    # (a bad context_length is named by check_values)
    elif orig < 1:
        raise refuse(f"must be at least 1, found {orig}", "original_context_length")
    out: dict[str, Any] = {"rope_scaling": "none", "rope_linear_scale": 1.0, "rope_factor": 1.0,
                           "rope_orig_ctx": orig, "rope_attn_factor": 1.0}
    if kind == "linear" and factor != 1.0:
        out.update(rope_scaling="linear", rope_linear_scale=factor, rope_factor=factor)
    elif kind == "yarn":
        given = num("rope.scaling.yarn_attn_factor", 0.0, float)
        out.update(rope_scaling="yarn", rope_factor=factor,
                   yarn_beta_fast=num("rope.scaling.yarn_beta_fast", 0.0, float) or 32.0,
                   yarn_beta_slow=num("rope.scaling.yarn_beta_slow", 0.0, float) or 1.0,
                   rope_attn_factor=given or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0))
    elif kind == "longrope":
        ratio = n_ctx_train / orig
        out.update(rope_scaling="longrope", rope_attn_factor=math.sqrt(
            1 + math.log(ratio) / math.log(orig)) if ratio > 1 and orig > 1 else 1.0)
        given = num("rope.scaling.attn_factor", 0.0, float)
        if given:
            out["rope_attn_factor"] = given
        return out
    out["rope_attn_factor"] *= num("rope.scaling.attn_factor", 0.0, float) or 1.0
    return out


def checked_number(value: int | float, kind: type, path: Any, field: str) -> Any:
    """``value`` as ``kind``; NaN, infinities and (for integers) fractions are a ``ModelLoadError``."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ModelLoadError(f"expected a finite number, found {value}", path=path, field=field)
    if kind is int and value != int(value):
        raise ModelLoadError(f"expected an integer, found {value}", path=path, field=field)
    return kind(value)
