"""Q8_0 matrix products over the file's own 8-bit codes: the CPU ``"q8"`` kernel of ``QLinear``.

A Q8_0 block is 32 signed 8-bit codes and a float16 scale (34 bytes). torch's int4 kernel can only
take it as two 4-bit terms, 1.18x the file's bytes held and 1.25 bytes read per weight a product;
here the codes stay 8-bit and the scales float16, the file's bytes exactly, rearranged once at load
into tiles of ``TILE`` rows stored k-major, so that the compiled loop multiplies a whole tile's rows
per code column with wide vector lanes:

* ``codes``: ``int8 [N / TILE, K / 32, 32, TILE]`` (tile, block, code within the block, row);
* ``scales``: ``uint16 [N / TILE, K / 32, TILE]``, the float16 bit patterns (numba has no float16).

``product`` runs the numba kernel on numba's thread team (as many threads as torch uses at the
call; the OpenMP team where numba has one, which shares the cores with torch's operators without
the two teams waiting on each other); ``product_reference`` is its numpy twin, and the tests hold
both to the dequantized matrix. The products are in float32 from float32 activations: exact up to
the order of the sums.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch

from halter import jit
from halter.engine.quant_tensor import QuantTensor, release_pages
from halter.errors import ModelLoadError

TILE = 64                       # rows a tile: the kernel's vector lanes (4 x 16 float32)
BLOCK = 32
_BLOCK_BYTES = 2 + BLOCK
_PACK_ROWS = 4096


def supported(part: QuantTensor, rows: int) -> bool:
    """Whether ``rows`` rows of ``part``'s type and width can take this kernel (where numba runs)."""
    return part.type_name == "Q8_0" and rows % TILE == 0 and part.shape[1] % BLOCK == 0 and jit.available()


def pack(parts: Sequence[QuantTensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``parts`` (Q8_0, one width; each a multiple of ``TILE`` rows) as ``(codes, scales)`` in
    the kernel's tiles; a NaN or infinite scale is refused by name (``ModelLoadError``). File pages
    are dropped once read."""
    N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
    nb = K // BLOCK
    codes = torch.empty((N // TILE, nb, BLOCK, TILE), dtype=torch.int8)
    scales = torch.empty((N // TILE, nb, TILE), dtype=torch.int16)
    codes_np, scales_np = codes.numpy(), scales.numpy().view(np.uint16)
    base = 0
    for q in parts:
        for start in range(0, q.shape[0], _PACK_ROWS):
            end = min(start + _PACK_ROWS, q.shape[0])
            chunk = q.row_slice(start, end)
            blocks = chunk.raw.numpy().reshape(end - start, nb, _BLOCK_BYTES)
            half = np.ascontiguousarray(blocks[:, :, :2]).view(np.uint16)[:, :, 0]      # [n, nb]
            if bool(((half & 0x7C00) == 0x7C00).any()):
                raise ModelLoadError("tensor contains NaN or infinite scales", path=q.source_path,
                                     field=q.source_name)
            t0, t1 = (base + start) // TILE, (base + end) // TILE
            tiles = blocks[:, :, 2:].view(np.int8).reshape(t1 - t0, TILE, nb, BLOCK)
            codes_np[t0:t1] = tiles.transpose(0, 2, 3, 1)
            scales_np[t0:t1] = half.reshape(t1 - t0, TILE, nb).transpose(0, 2, 1)
            release_pages(chunk)
        base += q.shape[0]
        q.scales_checked = True
    return codes, scales


def _scale_values(bits: np.ndarray) -> np.ndarray:
    """float16 bit patterns -> float32 values."""
    return bits.view(np.float16).astype(np.float32)


def product_reference(codes: np.ndarray, scales: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x [M, K] @ W.T`` in numpy (float32), ``W`` the matrix the tiles hold: the kernel's twin."""
    n_tiles, nb = codes.shape[0], codes.shape[1]
    w = codes.astype(np.float32) * _scale_values(scales.view(np.uint16))[:, :, None, :]    # [T, nb, 32, R]
    w = w.transpose(0, 3, 1, 2).reshape(n_tiles * TILE, nb * BLOCK)
    return x.astype(np.float32) @ w.T


prange = range           # numba's parallel range where the kernels are compiled (``_build``)


def _widen_scales(bits, su, sv):
    """``sv[:] = float32(the float16 values of bits)``, ``su`` the uint32 view of ``sv``: the bits
    moved into place (sign; exponent rebiased 15 -> 127; mantissa m). A zero or subnormal half
    (exponent 0) comes out as +-(2**-15 + m * 2**-25), where its value is +-m * 2**-24: twice that
    minus +-2**-14, exact in float32."""
    for r in range(TILE):
        h = np.uint32(bits[r])
        su[r] = ((h & np.uint32(0x8000)) << np.uint32(16)) | \
            ((h & np.uint32(0x7FFF)) + np.uint32(0x1C000)) << np.uint32(13)
    for r in range(TILE):
        v = sv[r]
        if np.uint32(bits[r]) & np.uint32(0x7C00) == 0:
            sv[r] = v + v - (np.float32(2.0 ** -14) if v > 0 else np.float32(-(2.0 ** -14)))


def _one_row(codes, scales, x, y):
    """``y = W @ x`` for one row ``x [K]``: tiles split over the team in chunks of 16."""
    n_tiles, nb = codes.shape[0], codes.shape[1]
    chunk = 16
    for c in prange((n_tiles + chunk - 1) // chunk):
        acc = np.empty(TILE, np.float32)
        out = np.empty(TILE, np.float32)
        sv = np.empty(TILE, np.float32)
        su = sv.view(np.uint32)
        for t in range(c * chunk, min(n_tiles, (c + 1) * chunk)):
            out[:] = 0
            for b in range(nb):
                acc[:] = 0
                for k in range(BLOCK):
                    xv = x[b * BLOCK + k]
                    w = codes[t, b, k]
                    for r in range(TILE):
                        acc[r] += np.float32(w[r]) * xv
                _widen_scales(scales[t, b], su, sv)
                for r in range(TILE):
                    out[r] += acc[r] * sv[r]
            for r in range(TILE):
                y[t * TILE + r] = out[r]


def _rows(codes, scales, x, y):
    """``y = x @ W.T`` for rows ``x [M, K]``: each code widened once for all rows."""
    n_tiles, nb = codes.shape[0], codes.shape[1]
    M = x.shape[0]
    for t in prange(n_tiles):
        wf = np.empty(TILE, np.float32)
        sv = np.empty(TILE, np.float32)
        su = sv.view(np.uint32)
        acc = np.empty((M, TILE), np.float32)
        out = np.zeros((M, TILE), np.float32)
        for b in range(nb):
            acc[:] = 0
            for k in range(BLOCK):
                w = codes[t, b, k]
                for r in range(TILE):
                    wf[r] = np.float32(w[r])
                for m in range(M):
                    xv = x[m, b * BLOCK + k]
                    for r in range(TILE):
                        acc[m, r] += wf[r] * xv
            _widen_scales(scales[t, b], su, sv)
            for m in range(M):
                for r in range(TILE):
                    out[m, r] += acc[m, r] * sv[r]
        for m in range(M):
            for r in range(TILE):
                y[m, t * TILE + r] = out[m, r]


def _build(numba: Any) -> tuple[Any, Any]:
    """The kernels compiled in place (module-level functions, so that numba's disk cache keeps
    them): reassociated sums and fused multiply-adds only (NaN and infinities keep their meaning)."""
    g = globals()
    g["prange"] = numba.prange
    g["_widen_scales"] = numba.njit(cache=True, nogil=True, inline="always")(_widen_scales)
    kernel = numba.njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
    return kernel(_one_row), kernel(_rows)


def product(codes: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``x [M, K] @ W.T`` as float32 ``[M, N]`` (any float ``x``; the compiled kernel where numba
    runs, else ``product_reference``)."""
    xs = x.detach().to(torch.float32).contiguous().numpy()
    c, s = codes.numpy(), scales.numpy().view(np.uint16)
    M, N = xs.shape[0], codes.shape[0] * TILE
    kernels = jit.build_once(_kernels)
    if kernels is None:
        return torch.from_numpy(np.ascontiguousarray(product_reference(c, s, xs)))
    nb_mod = jit.numba_module()
    team = max(1, min(torch.get_num_threads(), nb_mod.config.NUMBA_NUM_THREADS))
    if nb_mod.get_num_threads() != team:     # torch's team (the thread governor may shrink it)
        nb_mod.set_num_threads(team)
    y = torch.empty((M, N), dtype=torch.float32)
    if M == 1:
        kernels[0](c, s, xs[0], y.numpy()[0])
    else:
        kernels[1](c, s, xs, y.numpy())
    return y


def _kernels(nb_mod: Any) -> Any:
    """The compiled kernels (``jit.build_once``), started once on numba's OpenMP team where numba
    has one.

    numba's OpenMP team is another runtime than torch's (each links its own libgomp), and an
    OpenMP team spins on its cores for a while after its work: numba's spinning through the next
    torch products of a decode step would take cores from torch's team. So numba's runtime is
    started with ``OMP_WAIT_POLICY=PASSIVE`` (read once, when it loads; torch's, loaded long
    before, keeps its own policy): its threads sleep as soon as the product is done.
    """
    try:
        nb_mod.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]
    except AttributeError:               # pragma: no cover - older numba
        pass
    kernels = _build(nb_mod)
    old = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:                                 # the first parallel call loads the threading layer
        kernels[0](np.zeros((1, 1, BLOCK, TILE), np.int8), np.zeros((1, 1, TILE), np.uint16),
                   np.zeros(BLOCK, np.float32), np.zeros(TILE, np.float32))
    finally:
        if old is None:
            del os.environ["OMP_WAIT_POLICY"]
        else:
            os.environ["OMP_WAIT_POLICY"] = old
    return kernels
