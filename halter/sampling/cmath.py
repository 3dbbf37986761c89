"""The C math functions llama.cpp's samplers call, with the C library's exact results.

numpy's float32 ``exp``/``log`` (SIMD) and even float64-then-round disagree with glibc's ``expf``
/ ``logf`` in the last bit for a noticeable share of inputs, and a last-bit change moves a top-p
cut or a seeded draw now and then. So:

* ``expf`` (every softmax) reproduces glibc's algorithm (a 32-entry table of 2^(i/32) and a cubic,
  evaluated in double, one final rounding) with numpy over whole arrays;
* ``logf``, ``log2f``, ``powf``, ``exp`` and ``log`` call the C library itself through ctypes when
  it is glibc, element by element (they only run on short arrays or scalars in the samplers, or
  in samplers that are off by default), and fall back to float64 numpy rounded to float32
  elsewhere.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

_TAB = np.array([
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
], dtype=np.uint64)
_N = 32
_SHIFT = float.fromhex("0x1.8p+52")
_INV_LN2_N = float.fromhex("0x1.71547652b82fep+0") * _N
_C0 = float.fromhex("0x1.c6af84b912394p-5") / _N / _N / _N
_C1 = float.fromhex("0x1.ebfce50fac4f3p-3") / _N / _N
_C2 = float.fromhex("0x1.62e42ff0c52d6p-1") / _N
_OVERFLOW = np.float32(float.fromhex("0x1.62e42ep6"))
_UNDERFLOW = np.float32(float.fromhex("-0x1.9fe368p6"))


def expf(x: np.ndarray) -> np.ndarray:
    """glibc's ``expf`` over a float32 array (bit-exact)."""
    x = np.asarray(x, dtype=np.float32)
    xd = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        z = _INV_LN2_N * np.where(np.isfinite(xd), xd, 0.0)
        kd = z + _SHIFT
        ki = kd.view(np.uint64)
        kd = kd - _SHIFT
        r = z - kd
        s = (_TAB[ki % np.uint64(_N)] + (ki << np.uint64(47))).view(np.float64)
        y = (_C0 * r + _C1) * (r * r) + (_C2 * r + 1.0)
        out = (y * s).astype(np.float32)
    out = np.where(x > _OVERFLOW, np.float32(np.inf), out)
    out = np.where(x < _UNDERFLOW, np.float32(0.0), out)
    out = np.where(np.isnan(x), x, out)
    return out.astype(np.float32, copy=False)


def _load_libm():
    name = ctypes.util.find_library("m")
    try:
        lib = ctypes.CDLL(name or "libm.so.6")
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):
        return None
    fns = {}
    for fname, ty, n in (("logf", ctypes.c_float, 1), ("log2f", ctypes.c_float, 1), ("powf", ctypes.c_float, 2),
                         ("exp", ctypes.c_double, 1), ("log", ctypes.c_double, 1)):
        f = getattr(lib, fname)
        f.restype = ty
        f.argtypes = [ty] * n
        fns[fname] = f
    return fns


_LIBM = _load_libm()
HAVE_GLIBC = _LIBM is not None
_F32 = np.float32


def _f32(v: float) -> float:
    return float(_F32(v))


def logf(x: float) -> float:
    """``logf`` of one float32 value."""
    if _LIBM is not None:
        return _LIBM["logf"](float(x))
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f32(np.log(np.float64(_F32(x))))


def log2f(x: float) -> float:
    """``log2f`` of one float32 value."""
    if _LIBM is not None:
        return _LIBM["log2f"](float(x))
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f32(np.log2(np.float64(_F32(x))))


def powf(x: float, y: float) -> float:
    """``powf`` of two float32 values."""
    if _LIBM is not None:
        return _LIBM["powf"](float(x), float(y))
    try:
        return _f32(math.pow(float(_F32(x)), float(_F32(y))))
    except (OverflowError, ValueError):
        with np.errstate(all="ignore"):
            return _f32(np.power(np.float64(_F32(x)), np.float64(_F32(y))))


def _map(name: str, x: np.ndarray, dtype) -> np.ndarray:
    f = _LIBM[name]
    return np.fromiter(map(f, x.tolist()), dtype=dtype, count=x.shape[0])


def logf_array(x: np.ndarray) -> np.ndarray:
    """``logf`` over a float32 array."""
    x = np.asarray(x, dtype=np.float32)
    if _LIBM is not None:
        return _map("logf", x, np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(x.astype(np.float64)).astype(np.float32)


def log2f_array(x: np.ndarray) -> np.ndarray:
    """``log2f`` over a float32 array."""
    x = np.asarray(x, dtype=np.float32)
    if _LIBM is not None:
        return _map("log2f", x, np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(x.astype(np.float64)).astype(np.float32)


def exp_array(x: np.ndarray) -> np.ndarray:
    """``exp`` (double) over a float64 array."""
    x = np.asarray(x, dtype=np.float64)
    if _LIBM is not None:
        return _map("exp", x, np.float64)
    with np.errstate(over="ignore"):
        return np.exp(x)


def log(x: float) -> float:
    """``log`` (double) of one value."""
    if _LIBM is not None:
        return _LIBM["log"](float(x))
    return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)


def sum_f32(x: np.ndarray) -> np.float32:
    """A float32 sum added left to right (``float s = 0; s += x[i]``), not numpy's pairwise sum."""
    if x.shape[0] == 0:
        return _F32(0)
    return np.cumsum(x, dtype=np.float32)[-1]


def sum_f64(x: np.ndarray) -> float:
    """A double sum added left to right."""
    if x.shape[0] == 0:
        return 0.0
    return float(np.cumsum(x, dtype=np.float64)[-1])
