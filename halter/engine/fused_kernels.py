"""The work between a decoded token's matrix products, as loops over flat arrays compiled by numba.

A traced CPU decode step runs ~1,500 small torch operators a token (norms, rotations, cache
writes, attention over a few cells, casts, views), each a few microseconds of dispatch whatever its
size: on SmolLM2 more time than the non-product work itself. ``fused_decode`` runs a step as the
quantized products (torch's int4 kernel, unchanged) with one compiled call between each pair of
them; the calls below are those (``*_rows``: once per sequence of the step). They compute what the layers of ``transformer.py`` compute,
in float32, and read and write bfloat16 as raw 16-bit patterns (numpy has no bfloat16): a product's
bfloat16 result arrives as int16, and the next product's bfloat16 input is written through a
uint16 view, rounded to nearest even as torch rounds.

Kernels take a product's result of either dtype (int16 = bfloat16 bits, or float32, from a product
of two terms or with a bias): ``_widen`` compiles to the right load for each.

Built only where numba is installed (``build``, which compiles these functions in place); without
it the traced step runs, and the tests hold this code to the static step it replaces.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np

from halter import jit


def _widen(src, dst):
    """``dst[:n] = float32(src[:n])``; replaced, for compiled callers, by the overload in ``_build``."""
    raise NotImplementedError       # pragma: no cover - only its compiled overloads run


def _narrow(src_bits, dst):
    """``dst[i]`` = the bfloat16 bits of the float32 whose bits are ``src_bits[i]`` (round to nearest
    even; NaN stays NaN)."""
    for i in range(dst.shape[0]):
        b = src_bits[i]
        if (b & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            dst[i] = np.uint16((b >> np.uint32(16)) | np.uint32(0x40))
        else:
            dst[i] = np.uint16((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


def _rms_scale(v, n, eps):
    ss = np.float32(0.0)
    for i in range(n):
        ss += v[i] * v[i]
    return np.float32(1.0) / np.sqrt(ss / np.float32(n) + eps)


def rope_tables(inv_freq, neox, rope_dim, pos, cos, sin):
    """``Rope.tables`` for one position: full-width ``cos`` and signed ``sin`` (pass-through past
    ``rope_dim``: 1 and 0)."""
    h = rope_dim // 2
    for j in range(h):
        a = np.float32(pos) * inv_freq[j]
        c, s = np.float32(math.cos(a)), np.float32(math.sin(a))
        if neox:
            cos[j], cos[j + h], sin[j], sin[j + h] = c, c, -s, s
        else:
            cos[2 * j], cos[2 * j + 1], sin[2 * j], sin[2 * j + 1] = c, c, -s, s
    for i in range(rope_dim, cos.shape[0]):
        cos[i], sin[i] = np.float32(1.0), np.float32(0.0)


def residual_norm(x, add, has_add, post_w, has_post, eps, w, tmp, out):
    """``x += post_norm(add)`` (``add`` a product's result for this row; the norm only with
    ``has_post``), then ``out`` = bfloat16 bits of ``rms_norm(x) * w`` (nothing with an empty ``w``)."""
    n = x.shape[0]
    if has_add:
        _widen(add, tmp)
        if has_post:
            r = _rms_scale(tmp, n, eps)
            for i in range(n):
                x[i] += tmp[i] * r * post_w[i]
        else:
            for i in range(n):
                x[i] += tmp[i]
    if w.shape[0] == 0:
        return
    r = _rms_scale(x, n, eps)
    for i in range(n):
        tmp[i] = x[i] * r * w[i]
    _narrow(tmp.view(np.uint32)[:n], out[:n])


def attend(qkv, H, Hkv, D, q_w, k_w, has_qk_norm, eps, cos, sin, partner, kc, vc, cell, posrow,
           pos, n_cells, window, scale, softcap, tmp, scores, out):
    """One token's attention from its ``(H + 2 Hkv) D`` QKV product: head norms, the rotation,
    key and value written into cache cell ``cell`` of ``kc``/``vc`` (``[Hkv, n_ctx, D]``), then each
    query head over the row's cells ``< n_cells`` whose position (``posrow``) is set and at most
    ``pos`` (and, with a ``window``, fewer than ``window`` back); ``out`` = bfloat16 bits of the
    heads' outputs side by side."""
    n = (H + 2 * Hkv) * D
    _widen(qkv, tmp)
    f = tmp[:n]
    rot = tmp[n:n + (H + Hkv) * D]
    o = tmp[n + (H + Hkv) * D:n + (2 * H + Hkv) * D]
    for h in range(H + Hkv):
        b = h * D
        if has_qk_norm:
            hw = q_w if h < H else k_w
            r = _rms_scale(f[b:b + D], D, eps)
            for i in range(D):
                f[b + i] = f[b + i] * r * hw[i]
        for i in range(D):
            rot[b + i] = f[b + i] * cos[i] + f[b + partner[i]] * sin[i]
    for g in range(Hkv):
        kb, vb = (H + g) * D, (H + Hkv + g) * D
        for i in range(D):
            kc[g, cell, i] = rot[kb + i]
            vc[g, cell, i] = f[vb + i]
    group = H // Hkv
    for h in range(H):
        g = h // group
        q = rot[h * D:(h + 1) * D]
        kg, vg = kc[g], vc[g]
        best = np.float32(-np.inf)
        for c in range(n_cells):
            p = posrow[c]
            if p < 0 or p > pos or (window > 0 and pos - p >= window):
                scores[c] = -np.inf
                continue
            kr = kg[c]
            s = np.float32(0.0)
            for i in range(D):
                s += q[i] * kr[i]
            s *= scale
            if softcap > 0:
                s = np.float32(math.tanh(s / softcap)) * softcap
            scores[c] = s
            best = max(best, s)
        ob = o[h * D:(h + 1) * D]
        ob[:] = 0.0
        total = np.float32(0.0)
        for c in range(n_cells):
            if scores[c] == -np.inf:
                continue
            e = np.float32(math.exp(scores[c] - best))
            total += e
            vr = vg[c]
            for i in range(D):
                ob[i] += e * vr[i]
        inv = np.float32(1.0) / total if total > 0 else np.float32(np.nan)
        for i in range(D):
            ob[i] *= inv
    _narrow(o.view(np.uint32), out[:H * D])


def _exp(x, p, scale_bits):
    """``p[i] * scale[i] = exp(x[i])`` (float32, within ~2 ulp; ``scale`` the float32 view of
    ``scale_bits``): Cephes' ``expf`` as straight-line arithmetic, which the compiler vectorizes,
    where a call of the C library's ``expf`` per value does not. Inputs are clamped to
    [-87, 88] (beyond: 0 and the largest float32 powers)."""
    for i in range(x.shape[0]):
        v = min(max(x[i], np.float32(-87.0)), np.float32(88.0))
        n = np.floor(v * np.float32(1.4426950408889634) + np.float32(0.5))
        r = v - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
        q = np.float32(1.9875691500e-4)
        q = q * r + np.float32(1.3981999507e-3)
        q = q * r + np.float32(8.3334519073e-3)
        q = q * r + np.float32(4.1665795894e-2)
        q = q * r + np.float32(1.6666665459e-1)
        q = q * r + np.float32(5.0000001201e-1)
        p[i] = q * r * r + r + np.float32(1.0)
        scale_bits[i] = np.int32(n + np.float32(127.0)) << np.int32(23)


def gated(gate, g_off, up, u_off, F, gelu, tmp, out):
    """``out`` = bfloat16 bits of ``act(gate) * up`` over ``F`` values (product rows read from
    ``g_off``/``u_off``); ``act`` is SiLU, or GELU's tanh form with ``gelu``. The activation is
    rounded to bfloat16 before the multiplication, as the layer's bfloat16 tensors are.
    ``tmp`` holds at least ``4 F`` values."""
    v, u, p = tmp[:F], tmp[F:2 * F], tmp[2 * F:3 * F]
    scale = tmp[3 * F:4 * F]
    _widen(gate[g_off:g_off + F], v)
    _widen(up[u_off:u_off + F], u)
    if gelu:                    # tanh(y) = 1 - 2 / (exp(2y) + 1), y = sqrt(2/pi) (v + 0.044715 v^3)
        for i in range(F):
            p[i] = np.float32(1.5957691216057308) * (v[i] + np.float32(0.044715) * v[i] * v[i] * v[i])
        _exp(p, p, scale.view(np.int32))
        for i in range(F):
            t = np.float32(1.0) - np.float32(2.0) / (p[i] * scale[i] + np.float32(1.0))
            v[i] = np.float32(0.5) * v[i] * (np.float32(1.0) + t)
    else:                       # v / (1 + exp(-v))
        for i in range(F):
            p[i] = -v[i]
        _exp(p, p, scale.view(np.int32))
        for i in range(F):
            v[i] = v[i] / (np.float32(1.0) + p[i] * scale[i])
    bits = v.view(np.uint32)
    _narrow(bits, out[:F])
    for i in range(F):                  # act(gate) as bfloat16, times up, rounded again
        bits[i] = np.uint32(out[i]) << np.uint32(16)
        v[i] *= u[i]
    _narrow(bits, out[:F])


# -- the entry points: one row of each 2-D argument per sequence --------------------------------
def rope_rows(inv_freq, neox, rope_dim, pos, cos, sin):
    for r in range(pos.shape[0]):
        rope_tables(inv_freq, neox, rope_dim, pos[r], cos[r], sin[r])


def residual_norm_rows(x, add, has_add, post_w, has_post, eps, w, tmp, out):
    for r in range(x.shape[0]):
        residual_norm(x[r], add[r], has_add, post_w, has_post, eps, w, tmp, out[r])


def attend_rows(qkv, H, Hkv, D, q_w, k_w, has_qk_norm, eps, cos, sin, partner, k_layer, v_layer,
                rows, cells, pos_cache, pos, n_cells, window, scale, softcap, tmp, scores, out):
    """``attend`` for each sequence: cache row ``rows[r]`` of ``k_layer``/``v_layer``
    (``[n_seq, Hkv, n_ctx, D]``) and ``pos_cache`` (``[n_seq, n_ctx]``)."""
    for r in range(qkv.shape[0]):
        s = rows[r]
        attend(qkv[r], H, Hkv, D, q_w, k_w, has_qk_norm, eps, cos[r], sin[r], partner, k_layer[s],
               v_layer[s], cells[r], pos_cache[s], pos[r], n_cells[r], window, scale, softcap, tmp,
               scores, out[r])


def gated_rows(gate, g_off, up, u_off, F, gelu, tmp, out):
    for r in range(gate.shape[0]):
        gated(gate[r], g_off, up[r], u_off, F, gelu, tmp, out[r])


def _build(numba: Any) -> SimpleNamespace:
    from numba import types
    from numba.extending import overload

    @overload(_widen, inline="always")
    def _widen_impl(src, dst):
        if src.dtype == types.int16:                          # bfloat16 bits
            def load_bits(src, dst):
                bits = dst.view(np.uint32)
                for i in range(src.shape[0]):
                    bits[i] = np.uint32(np.uint16(src[i])) << np.uint32(16)
            return load_bits

        def load(src, dst):
            for i in range(src.shape[0]):
                dst[i] = src[i]
        return load

    inner = numba.njit(cache=True, nogil=True, inline="always")
    # reassociation (vectorized sums) and contraction (fused multiply-adds) only: the masks and
    # empty rows rely on infinities and NaN
    kernel = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract", "nsz"})
    g = globals()
    for name in ("_narrow", "_rms_scale", "_exp"):
        g[name] = inner(g[name])
    for name in ("rope_tables", "residual_norm", "attend", "gated"):
        g[name] = kernel(g[name])
    return SimpleNamespace(rope_rows=kernel(rope_rows), residual_norm_rows=kernel(residual_norm_rows),
                           attend_rows=kernel(attend_rows), gated_rows=kernel(gated_rows))


def build() -> SimpleNamespace | None:
    """The compiled entry points (``rope_rows``, ``residual_norm_rows``, ``attend_rows``,
    ``gated_rows``: the kernels above for each row of their 2-D arguments), or None without numba."""
    return jit.build_once(_build)
