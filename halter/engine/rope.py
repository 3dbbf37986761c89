"""Rotary position embeddings in the two layouts llama.cpp uses: NORM (adjacent pairs) and NEOX.

Angles are computed from positions on the fly (no table to outgrow), in float32. Rotating by a
position delta is the same operation, which is how the KV cache re-rotates shifted keys.
"""
from __future__ import annotations

import torch


class Rope:
    """Rotary embedding for one model: ``head_dim``, ``base``, layout ``kind`` in {"norm", "neox"}.

    ``freq_factors`` (llama 3's ``rope_freqs.weight``) divide the per-pair frequencies;
    ``linear_scale`` divides positions (llama.cpp's linear rope scaling).
    """

    def __init__(self, head_dim: int, base: float, kind: str, *, linear_scale: float = 1.0,
                 freq_factors: torch.Tensor | None = None, device: torch.device | str = "cpu") -> None:
        if kind not in ("norm", "neox"):
            raise ValueError(f"rope kind must be 'norm' or 'neox', not {kind!r}")
        self.kind = kind
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
        inv_freq = (1.0 / (base ** exponents)) / linear_scale
        if freq_factors is not None:
            inv_freq = inv_freq / freq_factors.detach().to("cpu", torch.float64)
        self.inv_freq = inv_freq.to(device=device, dtype=torch.float32)

    def cos_sin(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions of any shape -> (cos, sin), each float32 of shape ``[*pos.shape, head_dim // 2]``."""
        angles = pos.to(torch.float32).unsqueeze(-1) * self.inv_freq
        return torch.cos(angles), torch.sin(angles)

    def apply(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate ``x [..., head_dim]``; ``cos``/``sin`` broadcast against ``x[..., :head_dim // 2]``."""
        xf = x.float()
        if self.kind == "norm":
            pairs = xf.unflatten(-1, (-1, 2))
            x0, x1 = pairs[..., 0], pairs[..., 1]
            out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)
        else:
            x0, x1 = xf.chunk(2, dim=-1)
            out = torch.cat((x0 * cos - x1 * sin, x1 * cos + x0 * sin), dim=-1)
        return out.to(x.dtype)
