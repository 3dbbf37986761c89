"""Rotary position embeddings in the two layouts llama.cpp uses (NORM: adjacent pairs; NEOX), scaled.

Angles are computed from positions on the fly (no table to outgrow), in float32. Rotating by a
position delta is the same operation, which is how the KV cache re-rotates shifted keys. The
scalings a GGUF file may ask for change only the per-pair frequencies: linear (positions divided
by a factor), Llama 3's ``rope_freqs.weight`` and phi3's LongRoPE factors (per-pair divisors), and
YaRN (a per-pair blend of interpolated and original frequencies). Their magnitude factor
(``ModelConfig.rope_attn_factor``) is folded into the attention scale instead of cos/sin, so a
re-rotated key is not scaled twice.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from halter.engine.config import ModelConfig


class Rope:
    """Rotary embedding for one model: ``head_dim``, ``base``, layout ``kind`` in {"norm", "neox"}.

    ``rope_dim`` (default ``head_dim``): only the first ``rope_dim`` values of each head rotate,
    the rest pass through (partial rotary embeddings). ``freq_factors`` (``rope_freqs.weight``,
    LongRoPE factors) divide the per-pair frequencies; ``linear_scale`` divides positions;
    ``yarn = (factor, original_context, beta_fast, beta_slow)`` blends frequencies as YaRN does.
    """

    def __init__(self, head_dim: int, base: float, kind: str, *, linear_scale: float = 1.0,
                 freq_factors: torch.Tensor | None = None, rope_dim: int | None = None,
                 yarn: tuple[float, int, float, float] | None = None,
                 device: torch.device | str = "cpu") -> None:
        if kind not in ("norm", "neox"):
            raise ValueError(f"rope kind must be 'norm' or 'neox', not {kind!r}")
        self.kind = kind
        self.rope_dim = head_dim if rope_dim is None else rope_dim
        exponents = torch.arange(0, self.rope_dim, 2, dtype=torch.float64) / self.rope_dim
        inv_freq = (1.0 / (base ** exponents)) / linear_scale
        if freq_factors is not None:
            inv_freq = inv_freq / freq_factors.detach().to("cpu", torch.float64)
        if yarn is not None:
            inv_freq = inv_freq * yarn_blend(self.rope_dim, base, *yarn)
        self.inv_freq = inv_freq.to(device=device, dtype=torch.float32)
        self._partner: dict[tuple[int, torch.device], torch.Tensor] = {}

    def tables(self, pos: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width rotation tables for ``rotate``: ``(cos, signed sin)``, ``[*pos.shape, head_dim]``.

        Value ``i`` of a head becomes ``x[i] cos[i] + x[partner(i)] sin[i]``, with the sine's sign
        and the partner (the other value of its pair) given by the layout; values past
        ``rope_dim`` keep ``cos = 1``, ``sin = 0``.
        """
        cos, sin = self.cos_sin(pos)
        if self.kind == "norm":
            c = torch.stack((cos, cos), dim=-1).flatten(-2)
            s = torch.stack((-sin, sin), dim=-1).flatten(-2)
        else:
            c, s = torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
        if self.rope_dim < head_dim:
            pad = head_dim - self.rope_dim
            c = torch.cat((c, c.new_ones(*c.shape[:-1], pad)), dim=-1)
            s = torch.cat((s, s.new_zeros(*s.shape[:-1], pad)), dim=-1)
        return c, s

    def rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``apply`` with the tables of ``tables``: one gather and three arithmetic ops.

        The same products and sums as ``apply`` (a negation moved into sin), up to the rounding of
        a fused multiply-add.
        """
        D = int(x.shape[-1])         # (a plain int when traced too: the memo then hits, and a
        key = (D, x.device)          # traced step reads the gather's index as a constant)
        partner = self._partner.get(key)
        if partner is None:
            h = self.rope_dim // 2
            idx = torch.arange(D)
            if self.kind == "norm":
                idx[:self.rope_dim] = idx[:self.rope_dim] ^ 1
            else:
                idx[:h], idx[h:self.rope_dim] = idx[h:self.rope_dim].clone(), idx[:h].clone()
            partner = self._partner[key] = idx.to(x.device)
        out = x * cos                 # float32 (cos is), also for a bf16/f16 ``x``: no upcast copy
        out.addcmul_(x.index_select(-1, partner), sin)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def cos_sin(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of any shape -> (cos, sin), each float32 of shape ``[*pos.shape, rope_dim // 2]``."""
        angles = pos.to(torch.float32).unsqueeze(-1) * self.inv_freq
        return torch.cos(angles), torch.sin(angles)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., head_dim]``; ``cos``/``sin`` broadcast against ``x[..., :rope_dim // 2]``."""
        xf = x.float()
        rest = None
        if self.rope_dim < xf.shape[-1]:
            xf, rest = xf[..., :self.rope_dim], xf[..., self.rope_dim:]
        if self.kind == "norm":
            pairs = xf.unflatten(-1, (-1, 2))
            x0, x1 = pairs[..., 0], pairs[..., 1]
            out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        else:
            x0, x1 = xf.chunk(2, dim=-1)
            out = torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
        if rest is not None:
            out = torch.cat((out, rest), dim=-1)
        return out.to(x.dtype)


def yarn_blend(dim: int, base: float, factor: float, original_ctx: int, beta_fast: float,
               beta_slow: float) -> torch.Tensor:
    """Per-pair multipliers of the frequencies under YaRN (float64, ``dim // 2`` values).

    Pairs that turn more than ``beta_fast`` times over the original context keep their frequency,
    pairs that turn fewer than ``beta_slow`` times are interpolated (divided by ``factor``), and a
    linear ramp over the pair index mixes the two in between, with the ramp's ends rounded
    outwards to whole pairs: transformers' ``_compute_yarn_parameters`` and ggml's
    ``rope_yarn_corr_dims`` / ``rope_yarn_ramp``.
    """
    def pair_index(turns: float) -> float:
        return dim * math.log(original_ctx / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_index(beta_fast)), 0)
    high = min(math.ceil(pair_index(beta_slow)), dim - 1)
    span = high - low if high != low else 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / span).clamp(0, 1)
    keep = 1 - ramp                          # 1: original frequency, 0: interpolated
    return (1 - keep) / factor + keep


def rope_for(config: ModelConfig, tensors: Mapping[str, Any], n_ctx: int,
             device: torch.device | str = "cpu") -> Rope:
    """The model's rope for a cache of ``n_ctx`` positions per sequence.

    LongRoPE takes ``rope_factors_long.weight`` when ``n_ctx`` exceeds the original context length
    and ``rope_factors_short.weight`` otherwise (llama.cpp's choice; transformers switches on the
    sequence length instead, which gives the same rotation for sequences on the same side of it).
    ``rope_freqs.weight``, when present, takes precedence, as in llama.cpp.
    """
    factors = tensors.get("rope_freqs.weight")
    if factors is None and config.rope_scaling == "longrope":
        long = n_ctx > config.rope_orig_ctx
        factors = tensors["rope_factors_long.weight" if long else "rope_factors_short.weight"]
    yarn = None
    if config.rope_scaling == "yarn":
        yarn = (config.rope_factor, config.rope_orig_ctx, config.yarn_beta_fast, config.yarn_beta_slow)
    return Rope(config.head_dim, config.rope_base, config.rope_type, rope_dim=config.rope_dim,
                linear_scale=config.rope_linear_scale, freq_factors=factors, yarn=yarn, device=device)
