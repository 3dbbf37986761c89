"""Q8_0 matrix products over the file's own 8-bit codes: the CPU ``"q8"`` kernel of ``QLinear``.

A Q8_0 block is 32 signed 8-bit codes and a float16 scale (34 bytes). torch's int4 kernel can only
take it as two 4-bit terms, 1.18x the file's bytes held and 1.25 bytes read per weight a product;
here the codes stay 8-bit and the scales float16, the file's bytes exactly, rearranged once at load
into tiles of ``TILE`` rows stored k-major in code pairs, the layout of the machine-code kernel
``q8_ir`` writes with AVX-512 (16-bit multiply-adds of code pairs, ``vpdpwssd``):

* ``codes``: ``int8 [N / 64, K / 32, 16, 64, 2]`` (tile, block, code pair, row, code of the pair);
* ``scales``: ``float16 [N / 64, K / 32, 64]``.

``product`` rounds the activations to 16-bit integers with a float32 scale per block of 32 (the
error is at most 2**-16 of the block's largest magnitude: llama.cpp rounds them to 8 bits, the int4
kernel to bfloat16's 8 significant bits), then runs the kernel over the tiles on numba's thread
team (as many threads as torch uses at the call), rows in groups of up to 4 per pass over the codes.
``product_reference`` is its numpy twin in float32; the tests hold both to the dequantized matrix.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Sequence

import numpy as np
import torch

from halter import jit
from halter.engine import q8_ir
from halter.engine.quant_tensor import QuantTensor, release_pages
from halter.errors import ModelLoadError

TILE = 64                       # rows a tile: four 16-lane vectors
BLOCK = 32
PAIRS = BLOCK // 2
_BLOCK_BYTES = 2 + BLOCK
_PACK_ROWS = 4096
_SPAN = 16                      # tiles a kernel call: ~640 KB of codes at K = 640, in L2 for every row group
_X_LIMIT = 32767
# numba's "workqueue" threading layer (where neither OpenMP nor TBB loads) aborts the process when
# two threads launch parallel work at once: calls are then taken one at a time
_serial = threading.Lock()


def supported(part: QuantTensor, rows: int) -> bool:
    """Whether ``rows`` rows of ``part``'s type and width can take this kernel (numba for the thread
    team, AVX-512 for the kernel)."""
    return part.type_name == "Q8_0" and rows % TILE == 0 and part.shape[1] % BLOCK == 0 and \
        jit.available() and q8_ir.available()


def pack(parts: Sequence[QuantTensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``parts`` (Q8_0, one width; each a multiple of ``TILE`` rows) as ``(codes, scales)`` in
    the kernel's tiles; a NaN or infinite scale is refused by name (``ModelLoadError``). File pages
    are dropped once read."""
    N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
    nb = K // BLOCK
    codes = torch.empty((N // TILE, nb, PAIRS, TILE, 2), dtype=torch.int8)
    scales = torch.empty((N // TILE, nb, TILE), dtype=torch.float16)
    codes_np, scales_np = codes.numpy(), scales.numpy().view(np.uint16)
    base = 0
    for q in parts:
        for start in range(0, q.shape[0], _PACK_ROWS):
            end = min(start + _PACK_ROWS, q.shape[0])
            chunk = q.row_slice(start, end)
            blocks = chunk.raw.numpy().reshape(end - start, nb, _BLOCK_BYTES)
            if not chunk.scales_finite():
                raise ModelLoadError("tensor contains NaN or infinite scales", path=q.source_path,
                                     field=q.source_name)
            half = np.ascontiguousarray(blocks[:, :, :2]).view(np.uint16)[:, :, 0]      # [n, nb]
            t0, t1 = (base + start) // TILE, (base + end) // TILE
            pairs = blocks[:, :, 2:].view(np.int16)                          # a code pair as one unit
            codes_np[t0:t1].view(np.int16)[..., 0] = pairs.reshape(t1 - t0, TILE, nb, PAIRS).transpose(0, 2, 3, 1)
            scales_np[t0:t1] = half.reshape(t1 - t0, TILE, nb).transpose(0, 2, 1)
            release_pages(chunk)
        base += q.shape[0]
        q.scales_checked = True
    return codes, scales


def product_reference(codes: np.ndarray, scales: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x [M, K] @ W.T`` in numpy (float32, activations as given), ``W`` the matrix the tiles hold."""
    n_tiles, nb = codes.shape[0], codes.shape[1]
    w = codes.astype(np.float32).transpose(0, 3, 1, 2, 4).reshape(n_tiles * TILE, nb, BLOCK)
    w *= scales.astype(np.float32).transpose(0, 2, 1).reshape(n_tiles * TILE, nb)[:, :, None]
    return x.astype(np.float32) @ w.reshape(n_tiles * TILE, nb * BLOCK).T


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Float rows ``[M, K]`` as ``(int16 [M, K], float32 scales [M, K / 32])``: each block of 32
    divided by its largest magnitude / 32767 and rounded to nearest (a block of zeros: scale 0);
    None when a value is NaN or infinite (its block's largest magnitude is then not finite)."""
    M, K = x.shape
    blocks = x.reshape(M, K // BLOCK, BLOCK)
    amax = np.abs(blocks).max(axis=2)
    if not np.isfinite(amax).all():
        return None
    inv = np.divide(np.float32(_X_LIMIT), amax, out=np.zeros_like(amax), where=amax > 0)
    q = np.rint(blocks * inv[:, :, None]).astype(np.int16).reshape(M, K)
    return q, (amax / np.float32(_X_LIMIT)).astype(np.float32)


def product(codes: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``x [M, K] @ W.T`` as float32 ``[M, N]`` (any float ``x``). Activations with a NaN or an
    infinity go through ``product_reference`` (which keeps them NaN or infinite, as a float product
    would)."""
    if torch.jit.is_tracing():
        raise RuntimeError("the q8 kernel runs outside torch: TorchScript cannot trace it")
    xs = x.detach().to(torch.float32).contiguous().numpy()
    c = codes.numpy()
    M, N = xs.shape[0], codes.shape[0] * TILE
    rounded = quantize_rows(xs)
    if rounded is None:
        return torch.from_numpy(np.ascontiguousarray(product_reference(c, scales.numpy(), xs)))
    xq, xscale = rounded
    drive, addresses = jit.build_once(_build)
    nb_mod = jit.numba_module()
    team = max(1, min(torch.get_num_threads(), nb_mod.config.NUMBA_NUM_THREADS))
    if nb_mod.get_num_threads() != team:     # torch's team (the thread governor may shrink it)
        nb_mod.set_num_threads(team)
    y = torch.empty((M, N), dtype=torch.float32)
    args = (addresses, c.ctypes.data, scales.numpy().ctypes.data, xq.ctypes.data, xscale.ctypes.data,
            y.numpy().ctypes.data, M, codes.shape[0], codes.shape[1], N, team)
    if nb_mod.threading_layer() == "workqueue":
        with _serial:
            drive(*args)
    else:
        drive(*args)
    return y


def _addresses() -> np.ndarray:
    """The kernels for 4, 2 and 1 rows at once (``q8_ir.ROW_GROUPS``), as addresses."""
    return np.array([q8_ir.kernel(r) for r in q8_ir.ROW_GROUPS], dtype=np.int64)


def _call_tiles(fn, codes, scales, xq, xs, y, t0, t1, nb, n_out):
    """Call the kernel at address ``fn``; replaced, for compiled callers, by the intrinsic in ``_build``."""
    raise NotImplementedError       # pragma: no cover - only its compiled form runs


prange = range           # numba's parallel range where the driver is compiled (``_build``)


def _drive(fns, codes, scales, xq, xs, y, M, n_tiles, nb, n_out, n_parts):
    """Tiles split evenly over ``n_parts`` threads; each thread takes its tiles ``_SPAN`` at a time
    and, for each span, every group of rows (4, then 2, then 1), so the span's codes are read from
    memory once and from cache for the other groups."""
    per = (n_tiles + n_parts - 1) // n_parts
    for part in prange(n_parts):
        t = part * per
        end = min(n_tiles, t + per)
        while t < end:
            t2 = min(end, t + _SPAN)
            m = 0
            while m < M:
                g = 0 if M - m >= 4 else (1 if M - m >= 2 else 2)
                _call_tiles(fns[g], codes, scales, xq + m * nb * BLOCK * 2, xs + m * nb * 4, y + m * n_out * 4,
                            t, t2, nb, n_out)
                m += 4 >> g
            t = t2


def _build(numba: Any) -> Any:
    """The driver compiled in place (module-level, so numba's disk cache keeps it), with the kernel
    call as an intrinsic (an indirect call through the address, which changes every process), and
    numba's thread team started.

    numba's OpenMP team is another runtime than torch's (each links its own libgomp), and an OpenMP
    team spins on its cores for a while after its work: numba's spinning through the next torch
    products of a decode step would take cores from torch's team. So numba's runtime is started
    with ``OMP_WAIT_POLICY=PASSIVE`` (read once, when it loads; torch's, loaded long before, keeps
    its own policy): its threads sleep as soon as the product is done.
    """
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def call_tiles(typingctx, fn, codes, scales, xq, xs, y, t0, t1, nb, n_out):
        sig = types.void(fn, codes, scales, xq, xs, y, t0, t1, nb, n_out)
        if not all(isinstance(t, types.Integer) for t in sig.args):
            return None

        def codegen(context, builder, signature, values):
            i64 = ir.IntType(64)
            wide = [context.cast(builder, v, t, types.int64) for v, t in zip(values, signature.args)]
            target = builder.inttoptr(wide[0], ir.FunctionType(ir.VoidType(), [i64] * 9).as_pointer())
            builder.call(target, wide[1:])
            return context.get_dummy_value()
        return sig, codegen

    try:
        numba.config.THREADING_LAYER_PRIORITY = ["omp", "tbb", "workqueue"]
    except AttributeError:               # pragma: no cover - older numba
        pass
    g = globals()
    g["prange"], g["_call_tiles"] = numba.prange, call_tiles
    drive = numba.njit(parallel=True, cache=True, nogil=True)(_drive)
    addresses = _addresses()
    old = os.environ.get("OMP_WAIT_POLICY")
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:                                 # the first parallel call loads the threading layer
        codes, scales = np.zeros((1, 1, PAIRS, TILE, 2), np.int8), np.zeros((1, 1, TILE), np.float16)
        xq, xs, y = np.zeros((1, BLOCK), np.int16), np.zeros((1, 1), np.float32), np.zeros((1, TILE), np.float32)
        drive(addresses, codes.ctypes.data, scales.ctypes.data, xq.ctypes.data, xs.ctypes.data,
              y.ctypes.data, 1, 1, 1, TILE, 1)
    finally:
        if old is None:
            del os.environ["OMP_WAIT_POLICY"]
        else:
            os.environ["OMP_WAIT_POLICY"] = old
    return drive, addresses
