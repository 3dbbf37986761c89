"""CPU decode steps as products plus compiled glue (``decode="fused"``).

A step is the layers' quantized products (torch's int4 / bfloat16 kernels, as in every other
mode) with one call of a ``fused_kernels`` kernel between each two of them: the norm before
attention, attention itself (head norms, rotation, cache write, masked softmax over the row's cells,
all in one), the residual and the FFN's norm, the gated activation. Four products and four compiled
calls a layer, where the traced step runs ~50 torch operators a layer, each paying a few
microseconds of dispatch. The embedding lookup and the head (final norm, output product,
soft-capping) stay the model's own modules. A step of ``n`` sequences runs the products on ``n``
rows and the kernels once per row; its rows are the sequences' own cache rows, so no bucket, no
padding row.

It computes what ``static_decode.static_layers`` computes, in float32 between bfloat16 products,
with the same roundings to bfloat16; the sums run in another order, so where a product's input lies
near a bfloat16 rounding boundary the two round it apart and the logits differ by ~0.2-3 %
(relative norm; the traced step is no closer to the float32 reference than this one). Used while
every sequence of the step holds at most ``MAX_SPAN`` cells: attention here runs on one thread,
and over longer rows torch's (all threads) wins.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from halter import jit
from halter.engine import fused_kernels
from halter.engine.kv_cache import KVCache
from halter.engine.qlinear import QLinear
from halter.engine.rope import Rope
from halter.engine.transformer import RMSNorm, Transformer

MAX_SPAN = 1024            # most cells a sequence of a fused step may hold (then: traced)
_EMPTY = np.zeros(0, dtype=np.float32)


def unsupported(net: Transformer, cache: KVCache) -> str | None:
    """Why ``decode="fused"`` cannot run this model (None: it can)."""
    c = net.config
    if cache.k.device.type != "cpu":
        return f"it runs on the CPU (this model is on {cache.k.device})"
    if net.norm.weight.dtype != torch.float32 or cache.k.dtype != torch.float32:
        return "it needs a float32 model (dtype=torch.float32)"
    ffns = [layer.feed_forward for layer in net.layers]
    linears = [m for layer in net.layers for m in (layer.attention.wqkv, layer.attention.wo)] + \
        [m for ff in ffns for m in ((ff.w13,) if ff.w13 is not None else (ff.w1, ff.w3)) + (ff.w2,)]
    if not all(isinstance(m, QLinear) for m in linears):
        return "it needs quantized matrices kept quantized (weights='packed' on a quantized file)"
    if c.n_head % c.n_head_kv:
        return "query heads must be a multiple of key/value heads"
    if not jit.available():
        return "it needs numba (pip install numba; HALTER_NO_NUMBA unset)"
    return None


def _bits(y: torch.Tensor) -> np.ndarray:
    """A product's ``[n, N]`` result as the kernels take it: bfloat16 as int16 bits, else float32."""
    if y.dtype == torch.bfloat16:
        return y.view(torch.int16).numpy()
    return y.float().numpy()


def _weight(norm: Any) -> np.ndarray:
    """An ``RMSNorm``'s weight as float32 (an empty array for ``nn.Identity``)."""
    return norm.weight.detach().numpy() if isinstance(norm, RMSNorm) else _EMPTY


class FusedStep:
    """Runs decode steps of ``n`` sequences (one token each, any cache rows) over ``cache``.

    ``stage(tokens, seq_ids, positions, cells)`` writes a step's inputs; ``run()`` computes it into
    ``logits`` (``[n, n_vocab]``, rows in ``seq_ids`` order) and the cache.
    """

    def __init__(self, net: Transformer, rope: Rope, cache: KVCache, n: int) -> None:
        reason = unsupported(net, cache)
        if reason is not None:
            raise ValueError(f"decode mode 'fused' cannot run this model: {reason}")
        self.k = fused_kernels.build()
        if self.k is None:
            raise ValueError("decode mode 'fused' cannot run this model: numba failed to load")
        c = net.config
        self.net, self.cache, self.n = net, cache, n
        self.inputs = torch.zeros((4, n), dtype=torch.long)    # token, position, cell, cache row
        self.host = self.inputs.numpy()
        self.tokens = self.inputs[0][:, None]                  # [n, 1], a view of the buffer
        self.logits = torch.zeros((n, c.n_vocab), dtype=torch.float32)
        E, H, Hkv, D, F = c.n_embd, c.n_head, c.n_head_kv, c.head_dim, c.n_ff
        self.dims = (H, Hkv, D, F)
        self.eps = np.float32(c.norm_eps)
        self.x = np.zeros((n, E), dtype=np.float32)            # the residual streams
        self.x_t = torch.from_numpy(self.x)
        # each product's input, bfloat16, and the same memory as uint16 for the kernels
        self.ins = [torch.zeros((n, width), dtype=torch.bfloat16) for width in (E, H * D, F)]
        self.outs = [t.view(torch.int16).numpy().view(np.uint16) for t in self.ins]
        self.tmp = np.zeros(max(E, 3 * (H + Hkv) * D, 4 * F), dtype=np.float32)
        self.scores = np.zeros(cache.n_ctx, dtype=np.float32)
        self.pos = cache.pos.numpy()
        self.n_cells = np.zeros(n, dtype=np.int64)
        self.tables = {}
        for sliding, r in {False: rope, True: net.rope_swa or rope}.items():
            idx = np.arange(D)
            h = r.rope_dim // 2
            if r.kind == "norm":
                idx[:r.rope_dim] ^= 1
            else:
                idx[:h], idx[h:r.rope_dim] = np.arange(h, r.rope_dim), np.arange(h)
            self.tables[sliding] = (r.inv_freq.numpy(), r.kind == "neox", r.rope_dim, idx,
                                    np.zeros((n, D), dtype=np.float32), np.zeros((n, D), dtype=np.float32))
        self.layers = [self._layer(layer) for layer in net.layers]

    def _layer(self, layer: Any) -> tuple[Any, ...]:
        at, ff = layer.attention, layer.feed_forward
        qk = at.q_norm is not None
        gate_up = (ff.w13.direct(), None) if ff.w13 is not None else (ff.w1.direct(), ff.w3.direct())
        window = self.net.config.sliding_window if at.sliding else 0
        return (_weight(layer.attention_norm), at.wqkv.direct(),
                _weight(at.q_norm) if qk else _EMPTY, _weight(at.k_norm) if qk else _EMPTY, qk,
                self.cache.k[at.layer].numpy(), self.cache.v[at.layer].numpy(),
                self.tables[at.sliding], window, np.float32(at.scale), np.float32(at.softcap or 0.0),
                at.wo.direct(), _weight(layer.post_attention_norm), _weight(layer.ffn_norm),
                gate_up, ff.w2.direct(), _weight(layer.post_ffn_norm), ff.gelu)

    def stage(self, tokens: Sequence[int], seq_ids: Sequence[int], positions: np.ndarray,
              cells: np.ndarray) -> None:
        """The step's inputs: one token per sequence, its position and cache cell (reserved)."""
        h = self.host
        h[0], h[1], h[2], h[3] = tokens, positions, cells, seq_ids

    def run(self) -> None:
        k, x, tmp, eps = self.k, self.x, self.tmp, self.eps
        H, Hkv, D, F = self.dims
        xE, xQ, xF = self.ins
        oE, oQ, oF = self.outs
        _, pos, cells, rows = self.host
        self.pos[rows, cells] = pos
        np.maximum(self.cache.used[rows], cells + 1, out=self.n_cells)
        for inv_freq, neox, rope_dim, _, cos, sin in self.tables.values():
            k.rope_rows(inv_freq, neox, rope_dim, pos, cos, sin)
        self.x_t.copy_(self.net.embed(self.tokens)[:, 0])
        add, post = x, _EMPTY                  # (no residual to add before the first layer)
        for (norm_w, qkv, q_w, k_w, qk, kl, vl, (_, _, _, partner, cos, sin), window, scale, cap,
             wo, post_attn, ffn_w, (gate_up, up), down, post_ffn, gelu) in self.layers:
            k.residual_norm_rows(x, add, add is not x, post, post.size > 0, eps, norm_w, tmp, oE)
            k.attend_rows(_bits(qkv(xE)), H, Hkv, D, q_w, k_w, qk, eps, cos, sin, partner, kl, vl, rows,
                          cells, self.pos, pos, self.n_cells, window, scale, cap, tmp, self.scores, oQ)
            k.residual_norm_rows(x, _bits(wo(xQ)), True, post_attn, post_attn.size > 0, eps, ffn_w, tmp, oE)
            g = _bits(gate_up(xE))
            if up is None:
                k.gated_rows(g, 0, g, F, F, gelu, tmp, oF)
            else:
                k.gated_rows(g, 0, _bits(up(xE)), 0, F, gelu, tmp, oF)
            add, post = _bits(down(xF)), post_ffn
        k.residual_norm_rows(x, add, True, post, post.size > 0, eps, _EMPTY, tmp, oE)
        self.logits.copy_(self.net.head(self.x_t))
