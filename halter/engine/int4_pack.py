"""Packing quantized GGUF blocks into the layouts of torch's weight-only int4 kernels.

``QuantTensor.int4_terms`` says what the 4-bit terms of a tensor are; this module writes them the
way the kernels read them, with bfloat16 scales and offsets ``[K/32, N, 2]`` per term:

* CPU (``torch.ops.aten._weight_int4pack_mm_for_cpu``): rows in blocks of 64, each stored k-major
  as 32 bytes holding row ``i`` (low nibble) and row ``i + 32`` (high nibble); a last block of
  fewer rows holds rows ``2i`` and ``2i + 1`` (``pack_int4``, checked against torch's own
  ``_convert_weight_to_int4pack_for_cpu`` by a test). ``pack_codes`` builds it from the file's
  bytes: the nibble-packed codes (Q4_0, Q4_1, Q4_K, the low bits of the 5-bit types) and Q8_0's
  bytes of two rows sharing an output byte are combined byte by byte, then written k-major by
  one byte-wise transposition per term; only the 5-bit types' fifth bits go through a code
  matrix (``pack_int4``). ``pack_batch`` runs them over a tensor's rows in chunks (``pack_cpu``)
  or over many tensors at once.
* CUDA (``torch.ops.aten._weight_int4pack_mm``): codes as ``uint8 [N, K/2]`` nibble pairs, which
  torch's ``_convert_weight_to_int4pack`` then rearranges (``pack_cuda_nibbles``).

"""
from __future__ import annotations

from typing import Sequence

import torch

from halter.engine.quant_tensor import INT4_GROUP, Codes, QuantTensor

PACK_ROWS = 4096                      # rows packed at a time (a multiple of the kernel's tile of 64)


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes ``[n, K]`` (0..15) -> the CPU int4 kernel's packed ``uint8 [n, K/2]``."""
    n, K = codes.shape
    full = n - n % 64
    out = []
    if full:
        blk = codes[:full].view(full // 64, 2, 32, K)
        out.append((blk[:, 0] | (blk[:, 1] << 4)).transpose(1, 2).reshape(-1))
    if full < n:
        tail = codes[full:].view(-1, 2, K)
        out.append((tail[:, 0] | (tail[:, 1] << 4)).t().reshape(-1))
    return (out[0] if len(out) == 1 else torch.cat(out)).view(n, K // 2)


def pack_codes(rows: torch.Tensor, block_bytes: int, codes: Sequence[Codes], outs: Sequence[torch.Tensor]) -> None:
    """``pack_int4`` of the terms ``codes`` locates in the raw block rows ``rows``, into ``outs``.

    Pairs of rows (``i`` and ``i + 32`` of each 64-row block, ``2i`` and ``2i + 1`` in a last
    shorter block) are combined straight from the file's bytes: a nibble-packed byte of each row
    gives the packed bytes of two values, with no code matrix in between. One byte-wise
    transposition per output then writes the kernel's k-major order. The code bytes are copied
    out of the blocks once for all terms (Q8_0's two terms read the same bytes).
    """
    n, n_blk = rows.shape[0], rows.shape[1] // block_bytes
    c0 = codes[0]
    G, L = c0.groups, c0.length
    qs = rows.view(n, n_blk, block_bytes)[:, :, c0.off:c0.off + G * L].contiguous().view(n, -1)
    full = n - n % 64
    segments = []
    if full:
        segments.append((qs[:full].view(full // 64, 2, 32, -1), [o[:full] for o in outs], 32))
    if full < n:
        t = (n - full) // 2
        segments.append((qs[full:].view(1, t, 2, -1).transpose(1, 2), [o[full:] for o in outs], t))
    for src, dsts, R in segments:
        nb = src.shape[0]
        a, b = src[:, 0], src[:, 1]                                  # [nb, R, bytes] of each row

        def k_major(v: torch.Tensor) -> torch.Tensor:          # [nb, R, ...] bytes -> [nb, ..., R]
            return v.view(nb, R, n_blk, G, L).permute(0, 2, 3, 4, 1)
        # a byte of each row's codes gives one packed byte: low nibbles (a & 15) + 16 b, high
        # nibbles (a >> 4) + 16 (b >> 4), sums that wrap at 256 exactly as the nibbles join
        for c, dst in zip(codes, dsts):
            if c.kind == "nibbles":
                d = dst.view(nb, n_blk, G, 2, L, R)
                d[:, :, :, 0] = k_major(torch.add(a & 15, b, alpha=16))
                d[:, :, :, 1] = k_major(torch.add(a >> 4, b >> 4, alpha=16))
            elif c.kind == "low":
                dst.view(nb, n_blk, G, L, R).copy_(k_major(torch.add(a & 15, b, alpha=16)))
            else:
                dst.view(nb, n_blk, G, L, R).copy_(k_major(torch.add(a >> 4, b >> 4, alpha=16) ^ 0x88))


def pack_cuda_nibbles(parts: Sequence[QuantTensor], device: torch.device
                      ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Row ``parts`` of one type and width as ``uint8 [N, K/2]`` nibble pairs on ``device`` (value
    ``2j`` in the high nibble of byte ``j``: the input of torch's ``_convert_weight_to_int4pack``)
    and bf16 scales and offsets ``[K/32, N, 2]`` per term."""
    N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
    codes_out: list[torch.Tensor] = []
    sz: list[torch.Tensor] = []
    base = 0
    for q in parts:
        for start in range(0, q.shape[0], PACK_ROWS):
            end = min(start + PACK_ROWS, q.shape[0])
            r0, r1 = base + start, base + end
            terms = q.int4_terms(start, end)
            while len(codes_out) < len(terms):
                codes_out.append(torch.empty((N, K // 2), dtype=torch.uint8, device=device))
                sz.append(torch.empty((K // INT4_GROUP, N, 2), dtype=torch.bfloat16, device=device))
            for t, (c, scale, zero) in enumerate(terms):
                c = c.to(device)
                codes_out[t][r0:r1] = (c[:, 0::2] << 4) | c[:, 1::2]
                sz[t][:, r0:r1, 0] = scale.t().to(device)
                sz[t][:, r0:r1, 1] = zero.t().to(device)
        base += q.shape[0]
    return codes_out, sz
