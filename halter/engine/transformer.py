"""The llama-family transformer in plain PyTorch: RMSNorm, rotary attention with GQA, SwiGLU.

Architecture variants are switches of ``ModelConfig`` read here: Q/K head norms (qwen3, gemma3),
norms after attention and the FFN, GeGLU and scaled embeddings (gemma), sliding-window layers with
their own rope base (gemma2/3), attention and final logit soft-capping (gemma2). Fused projections
(phi3) arrive split by the loader; rope scalings live in ``Rope`` and the attention scale.

Written in the spirit of gpt-fast's ``model.py``: one small module per part, shapes noted where
they matter. Attention reads keys and values from a ``KVCache`` (written first, then attended
over with ``scaled_dot_product_attention`` and a mask built from the cache's positions), so a
prompt chunk, one decode step or a batch of independent sequences are all the same call.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from halter.engine import gemv
from halter.engine.config import ModelConfig
from halter.engine.kv_cache import KVCache
from halter.engine.rope import Rope


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, computed in float32; the result in ``x``'s dtype, or in float32 for
    a bf16 ``x`` (a quantized product's result) in a float32 model."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == self.weight.dtype:
            # one operator: on CUDA a fused kernel (in place of about eight); for bf16/f16 it
            # reduces and scales in float32, as below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        if self.weight.dtype == torch.float32:  # a bf16 product's result in a float32 model
            return F.rms_norm(x.float(), self.weight.shape, self.weight, self.eps)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


class Linear(nn.Linear):
    """``nn.Linear`` that, while a CUDA graph is captured, runs a one-row product with the Triton
    kernel ``gemv.tune`` found faster than cuBLAS for its weight shape (``one_row_config``)."""

    one_row_config: tuple[int, int, int, int] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.one_row_config is not None and gemv.active() and x.numel() == x.shape[-1]:
            return gemv.one_row(x, self.weight, self.bias, self.one_row_config)
        return F.linear(x, self.weight, self.bias)


class Attention(nn.Module):
    """Grouped-query attention with one fused QKV projection (biases for qwen2)."""

    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer, self.n_head, self.n_head_kv, self.head_dim = layer, c.n_head, c.n_head_kv, c.head_dim
        q, kv = c.n_head * c.head_dim, c.n_head_kv * c.head_dim
        self.wqkv = Linear(c.n_embd, q + 2 * kv, bias=c.attn_bias)
        self.wo = Linear(q, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.norm_eps) if c.qk_norm else None
        self.k_norm = RMSNorm(c.head_dim, c.norm_eps) if c.qk_norm else None
        self.scale = c.attn_scale or c.head_dim ** -0.5
        self.softcap = c.attn_softcap
        self.sliding = bool(c.swa_layers and c.swa_layers[layer])

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: Rope
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated queries ``[B, T, H, D]``, rotated keys and values ``[B, T, Hkv, D]`` of ``x``
        (``[B, T, E]``, or ``[B, E]`` for one token a row: then ``T = 1``).

        ``cos``/``sin`` are ``Rope.tables`` (full head width, broadcast over heads).
        """
        # a static step's [B, E] rows are one token each: no shape reads (a trace records them)
        B, T = (-1, 1) if x.dim() == 2 else x.shape[:2]
        H, Hkv, D = self.n_head, self.n_head_kv, self.head_dim
        qkv = self.wqkv(x)
        if qkv.dtype != x.dtype:         # a quantized product's bf16 result: attention in x's dtype
            qkv = qkv.to(x.dtype)
        v = qkv[..., (H + Hkv) * D:].view(B, T, Hkv, D)
        if self.q_norm is None:          # queries and keys rotated together, as one [B, T, H + Hkv, D]
            qk = rope.rotate(qkv[..., :(H + Hkv) * D].view(B, T, H + Hkv, D), cos, sin)
            q, k = qk.split([H, Hkv], dim=2)
            return q, k, v
        q, k = qkv[..., :H * D].view(B, T, H, D), qkv[..., H * D:(H + Hkv) * D].view(B, T, Hkv, D)
        q, k = self.q_norm(q), self.k_norm(k)
        return rope.rotate(q, cos, sin), rope.rotate(k, cos, sin), v

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               mask: torch.Tensor, one_token: bool = False) -> torch.Tensor:
        """Output projection of ``q [B, T, H, D]`` attending over ``keys/values [B, Hkv, L, D]``:
        ``[B, T, E]``, or ``[B, E]`` with ``one_token`` (``T == 1``)."""
        if self.softcap:
            y = _softcapped_attention(q.transpose(1, 2), keys, values, mask, self.scale, self.softcap)
        else:
            y = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                               scale=self.scale, enable_gqa=self.n_head != self.n_head_kv)
        if one_token:                                              # [B, H, 1, D] -> [B, H * D]
            return self.wo(y.reshape(-1, self.n_head * self.head_dim))
        return self.wo(y.transpose(1, 2).flatten(2))              # [B, T, H * D]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rope: Rope,
                cache: KVCache, row_ids: torch.Tensor, rows: torch.Tensor | slice,
                cells: torch.Tensor | slice, mask: torch.Tensor, n_attend: int) -> torch.Tensor:
        q, k, v = self.project(x, cos, sin, rope)
        k_cache, v_cache = cache.k[self.layer], cache.v[self.layer]   # [S, Hkv, C, D]
        if isinstance(cells, slice):                                   # same cells in consecutive rows
            k_cache[rows, :, cells] = k.transpose(1, 2)                # a view: [B, Hkv, T, D]
            v_cache[rows, :, cells] = v.transpose(1, 2)
        else:
            k_cache[row_ids[:, None], :, cells] = k                    # indexed view: [B, T, Hkv, D]
            v_cache[row_ids[:, None], :, cells] = v
        keys, values = _rows(k_cache, rows, n_attend), _rows(v_cache, rows, n_attend)  # [B, Hkv, L, D]
        return self.attend(q, keys, values, mask)


def _softcapped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                          scale: float, cap: float) -> torch.Tensor:
    """Attention with ``cap * tanh(scores / cap)`` before the mask (gemma2); ``q [B, H, T, D]``."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) * scale
    scores = torch.tanh(scores / cap) * cap
    scores = scores.masked_fill(~mask, float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype)


def _rows(cache: torch.Tensor, rows: torch.Tensor | slice, n_attend: int) -> torch.Tensor:
    """The first ``n_attend`` cells of the given cache rows: a view for a slice, else a gather."""
    if isinstance(rows, slice):
        return cache[rows, :, :n_attend]
    return cache[:, :, :n_attend].index_select(0, rows)


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)`` (w1 = gate, w3 = up, w2 = down); GeGLU with gelu_tanh."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.w1 = Linear(c.n_embd, c.n_ff, bias=False)
        self.w3 = Linear(c.n_embd, c.n_ff, bias=False)
        self.w2 = Linear(c.n_ff, c.n_embd, bias=False)
        self.gelu = c.act == "gelu_tanh"
        self.n_ff = c.n_ff
        self.w13: nn.Module | None = None     # gate and up as one product, when the loader fuses them

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w13 is not None:
            gate, up = self.w13(x).split(self.n_ff, dim=-1)
        else:
            gate, up = self.w1(x), self.w3(x)
        gate = F.gelu(gate, approximate="tanh") if self.gelu else F.silu(gate)
        return self.w2(gate * up)


class TransformerBlock(nn.Module):
    def __init__(self, c: ModelConfig, layer: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.attention = Attention(c, layer)
        self.ffn_norm = RMSNorm(c.n_embd, c.norm_eps)
        self.feed_forward = FeedForward(c)
        # gemma: norms of the attention and FFN outputs, before the residual additions
        self.post_attention_norm: nn.Module = RMSNorm(c.n_embd, c.norm_eps) if c.post_norms else nn.Identity()
        self.post_ffn_norm: nn.Module = RMSNorm(c.n_embd, c.norm_eps) if c.post_norms else nn.Identity()

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:
        h = x + self.post_attention_norm(self.attention(self.attention_norm(x), *attn_args))
        return h + self.post_ffn_norm(self.feed_forward(self.ffn_norm(h)))


class Transformer(nn.Module):
    """Embeddings, ``n_layer`` blocks, final norm and output projection (possibly tied)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.config = c
        self.tok_embeddings = nn.Embedding(c.n_vocab, c.n_embd)
        self.layers = nn.ModuleList(TransformerBlock(c, i) for i in range(c.n_layer))
        self.norm = RMSNorm(c.n_embd, c.norm_eps)
        self.output = Linear(c.n_embd, c.n_vocab, bias=False)
        self.rope_swa: Rope | None = None     # the sliding layers' rope, when it differs (gemma3)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``[B, T, E]`` (scaled by sqrt(n_embd) for gemma, in the model's dtype)."""
        x = self.tok_embeddings(tokens)
        scale = self.config.embed_scale
        return x if scale == 1.0 else x * torch.tensor(scale, dtype=x.dtype)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Final norm and output projection: float32 logits (soft-capped for gemma2)."""
        logits = self.output(self.norm(x)).float()
        cap = self.config.final_softcap
        return logits if not cap else torch.tanh(logits / cap) * cap

    def layer_inputs(self, pos: torch.Tensor, cached_pos: torch.Tensor, rope: Rope
                     ) -> dict[bool, tuple[torch.Tensor, torch.Tensor, Rope, torch.Tensor]]:
        """(cos, sin, rope, mask) for global (False) and sliding-window (True) layers.

        ``pos [B, T]`` are the new tokens' positions, ``cached_pos [B, L]`` those of the cells
        attended over (-1 when empty). cos/sin are ``Rope.tables`` ``[B, T, 1, head_dim]``; masks
        are ``[B, 1, T, L]`` (``_mask``); a sliding layer also hides keys ``sliding_window`` or more positions
        back, as llama.cpp and transformers do.
        """
        causal = (cached_pos[:, None, :] <= pos[:, :, None]) & (cached_pos[:, None, :] >= 0)
        D = self.config.head_dim
        cos, sin = rope.tables(pos, D)
        out = {False: (cos.unsqueeze(2), sin.unsqueeze(2), rope, self._mask(causal.unsqueeze(1)))}
        window = self.config.sliding_window
        if window:
            local = self.rope_swa or rope
            cos_l, sin_l = (cos, sin) if local is rope else local.tables(pos, D)
            near = causal & (pos[:, :, None] - cached_pos[:, None, :] < window)
            out[True] = (cos_l.unsqueeze(2), sin_l.unsqueeze(2), local, self._mask(near.unsqueeze(1)))
        return out

    def _mask(self, keep: torch.Tensor) -> torch.Tensor:
        """The attention mask as the layers take it: additive (0 / -inf, in the model's dtype),
        which ``scaled_dot_product_attention`` would otherwise rebuild from the booleans in every
        layer (six operators on the CPU, two or three kernels on CUDA); the booleans for
        soft-capped attention, which masks its scores itself."""
        if self.config.attn_softcap:
            return keep
        return torch.zeros(keep.shape, dtype=self.norm.weight.dtype, device=keep.device) \
            .masked_fill_(~keep, float("-inf"))

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor, row_ids: torch.Tensor,
                cells: torch.Tensor | slice, cache: KVCache, rope: Rope, n_attend: int,
                last_only: bool = False, row_span: tuple[int, int] | None = None) -> torch.Tensor:
        """Logits (float32) for ``tokens [B, T]`` at positions ``pos [B, T]`` of sequences ``rows [B]``.

        ``cells [B, T]`` are the cache cells reserved for the new tokens; attention covers the
        first ``n_attend`` cells of each row. When the rows are consecutive, ``row_span``
        (first, end) lets attention read views of the cache instead of gathering copies, and
        ``cells`` may then be a slice (every row writes the same consecutive cells). Returns ``[B, T, n_vocab]``, or ``[B, 1, n_vocab]``
        when ``last_only``.
        """
        rows: torch.Tensor | slice = row_ids if row_span is None else slice(*row_span)
        cached_pos = _rows(cache.pos[:, None], rows, n_attend)[:, 0]               # [B, L]
        inputs = self.layer_inputs(pos, cached_pos, rope)    # cos, sin [B, T, 1, D]; mask [B, 1, T, L]
        x = self.embed(tokens)
        for layer in self.layers:
            cos, sin, layer_rope, mask = inputs[layer.attention.sliding]
            x = layer(x, cos, sin, layer_rope, cache, row_ids, rows, cells, mask, n_attend)
        if last_only:
            x = x[:, -1:]
        return self.head(x)
