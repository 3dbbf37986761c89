"""Linear layers and embeddings whose weights stay quantized in memory.

``QLinear`` computes ``x @ W.T (+ b)`` for a weight given as ``QuantTensor`` row parts, with one of
four kernels, picked per device and type (``pick_kernel``):

* ``"q8"`` (CPU with AVX-512, where numba runs; Q8_0 matrices of at least ``Q8_MIN_ROWS`` rows:
  the output layers): the file's 8-bit codes and float16 scales as they are, rearranged into the
  tiles of ``q8_product``'s kernel (the file's bytes exactly; activations rounded to 16 bits per
  block of 32, products summed exactly in 32-bit integers, then scaled in float32).
* ``"int4"`` (CPU; Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q8_0): the weight is rewritten once, at
  load, as one or two 4-bit terms (``QuantTensor.int4_terms``) packed for
  ``torch.ops.aten._weight_int4pack_mm_for_cpu`` with bfloat16 scales and offsets per group of 32.
  The activations are rounded to bfloat16 for the product and the terms are summed in float32.
  Resident: half a byte per code plus 4 bytes of scale/offset per 32 values and term.
* ``"bf16"`` (CPU; Q6_K): decoded once, at load, to a bfloat16 matrix (2 bytes a value, 2.4x
  the file's 6.56 bits): its sub-blocks of 16 values have no exact int4 form of fewer than four
  terms, and decoding 6-bit blocks at every call costs more than the product.
* ``"int4"`` on CUDA (compute capability 8.0 or later; the same types and terms): packed for
  torch's tinygemm kernel ``torch.ops.aten._weight_int4pack_mm`` (bfloat16 in and out), the
  terms' products summed in float32 where there are two.
* ``"bf16"`` on CUDA too for Q6_K (decoded once at load: per-call decoding of a matrix costs
  about nine int4 products there).
* ``"dequant"`` (CUDA for the 2-, 3-bit types, or int4 types before 8.0; the CPU for Q2_K, Q3_K, whose 2- and 3-bit codes would grow 5-6x in
  any other form): the raw blocks stay as they are in the file; each call dequantizes them into a
  buffer shared by every layer with the same weight size and multiplies in the compute dtype.

``QEmbedding`` looks rows up in the raw blocks and dequantizes only those rows. Float tensors
(F32, F16, BF16) never come here: they load as ordinary tensors.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from halter.engine import q8_product
from halter.engine.int4_pack import PACK_ROWS, pack_cuda_nibbles
from halter.engine.pack_batch import pack_cpu
from halter.engine.packed_cache import Mismatch
from halter.engine.quant_tensor import INT4_GROUP, LAZY_CODES, QuantTensor, release_pages

KERNELS = ("int4", "bf16", "dequant", "q8")
INT4_DEFAULT = ("Q4_0", "Q4_1", "Q4_K", "Q8_0", "Q5_0", "Q5_1", "Q5_K")
BF16_DEFAULT = ("Q6_K",)
# the "q8" kernel from this many rows up: vocabulary-sized output layers, where it was measured
# (Gemma 3's [262144, 640]: 8.1 ms against 12.8 for two int4 terms; SmolLM2's [49152, 576]: 1.3
# against 2.2); a smaller product would pay the wake-up of numba's thread team (~35 us), which is
# not torch's
Q8_MIN_ROWS = 16384
_scratch: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}


def int4_available() -> bool:
    """Whether this torch has the CPU weight-only int4 kernels."""
    return hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu") and \
        hasattr(torch.ops.aten, "_convert_weight_to_int4pack_for_cpu")


def int4_cuda_available(device: torch.device) -> bool:
    """Whether torch's tinygemm int4 kernel runs on ``device`` (NVIDIA, compute capability >= 8.0,
    torch >= 2.5, whose packing takes ``uint8 [N, K/2]``)."""
    if device.type != "cuda" or torch.version.hip is not None:
        return False
    if torch.torch_version.TorchVersion(torch.__version__) < (2, 5):
        return False
    return hasattr(torch.ops.aten, "_weight_int4pack_mm") and \
        torch.cuda.get_device_capability(device) >= (8, 0)


def pick_kernel(part: QuantTensor, device: torch.device, rows: int | None = None) -> str:
    """The kernel for ``part``'s type on ``device`` (``"int4"`` needs rows a multiple of 16 on
    the CPU, of 8 on CUDA), else ``"dequant"``.

    On the CPU: ``"q8"`` for Q8_0 output layers (``Q8_MIN_ROWS``; the file's bytes, where numba
    runs and the CPU has AVX-512); ``"int4"`` for Q4_0, Q4_1, Q4_K (1.0-1.11x the file's bytes),
    Q8_0 (1.18x) and the 5-bit types (1.8x: their second term spends four bits on each one-bit
    plane, the price of an exact form the fast kernel takes); ``"bf16"`` for Q6_K (2.4x);
    ``"dequant"`` for Q2_K, Q3_K.
    """
    rows = part.shape[0] if rows is None else rows          # (of the group ``part`` heads)
    if device.type == "cuda":
        if part.type_name in INT4_DEFAULT and rows % 8 == 0 and part.shape[1] % INT4_GROUP == 0 \
                and int4_cuda_available(device):
            return "int4"
        return "bf16" if part.type_name in BF16_DEFAULT else "dequant"
    if device.type != "cpu":
        return "dequant"
    if rows >= Q8_MIN_ROWS and q8_product.supported(part, rows):
        return "q8"
    if part.type_name in INT4_DEFAULT and rows % 16 == 0 and part.shape[1] % INT4_GROUP == 0 \
            and int4_available():
        return "int4"
    if part.type_name in BF16_DEFAULT:
        return "bf16"
    return "dequant"


def scratch(n_values: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The process-wide reused buffer of ``n_values`` elements for just-in-time dequantization."""
    key = (n_values, dtype, device)
    buf = _scratch.get(key)
    if buf is None:
        buf = _scratch[key] = torch.empty(n_values, dtype=dtype, device=device)
    return buf


class _Int4Part(nn.Module):
    """Row parts of one type packed as int4 terms for the CPU kernel: ``(packed uint8, scales_and_zeros
    bf16 [K/32, N, 2])`` per term, packed in chunks of whole 64-row blocks."""

    def __init__(self, parts: Sequence[QuantTensor], prebuilt: Mapping[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        if prebuilt is None:
            packed, sz = pack_cpu(parts)
        else:                                    # a stored packing of the same file (packed_cache)
            N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
            n_terms = len(LAZY_CODES[parts[0].type_name])
            packed = [_stored(prebuilt, f"packed{t}", (N, K // 2), torch.uint8) for t in range(n_terms)]
            sz = [_stored(prebuilt, f"sz{t}", (K // INT4_GROUP, N, 2), torch.bfloat16) for t in range(n_terms)]
        self.n_terms = len(packed)
        for t in range(self.n_terms):
            self.register_buffer(f"packed{t}", packed[t], persistent=False)
            self.register_buffer(f"sz{t}", sz[t], persistent=False)
        self.out_features = packed[0].shape[0]

    def bound(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """``forward`` for bfloat16 rows, as a closure over the buffers and the kernel's overload:
        no module attribute lookups, no overload resolution per call."""
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu.default
        p0, s0 = self.packed0, self.sz0
        if self.n_terms == 1:
            return lambda xb: mm(xb, p0, INT4_GROUP, s0)
        p1, s1 = self.packed1, self.sz1
        return lambda xb: mm(xb, p0, INT4_GROUP, s0).float().add_(mm(xb, p1, INT4_GROUP, s1))

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        xb = x2 if x2.dtype == torch.bfloat16 else x2.to(torch.bfloat16)
        mm = torch.ops.aten._weight_int4pack_mm_for_cpu
        y = mm(xb, self.packed0, INT4_GROUP, self.sz0)
        if self.n_terms > 1:                     # the terms summed in float32
            y = y.float().add_(mm(xb, self.packed1, INT4_GROUP, self.sz1))
        return y


class _CudaInt4Part(nn.Module):
    """Row parts of one type packed for torch's CUDA tinygemm kernel, one tensor per int4 term.

    The kernel's packing takes ``uint8 [N, K/2]`` with value ``2j`` in the high nibble of byte
    ``j`` and ``2j + 1`` in the low one; scales and offsets are the CPU path's ``[K/32, N, 2]``.
    """

    def __init__(self, parts: Sequence[QuantTensor], device: torch.device) -> None:
        super().__init__()
        K = parts[0].shape[1]
        inner = 8 if K % 128 == 0 else 4 if K % 64 == 0 else 2     # k-tiles of 16 per load
        nibbles, sz = pack_cuda_nibbles(parts, device)
        self.n_terms = len(nibbles)
        for t in range(self.n_terms):
            self.register_buffer(f"packed{t}", torch.ops.aten._convert_weight_to_int4pack(nibbles[t], inner),
                                 persistent=False)
            self.register_buffer(f"sz{t}", sz[t], persistent=False)
        self.out_features = nibbles[0].shape[0]

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        xb = x2.to(torch.bfloat16).contiguous()
        mm = torch.ops.aten._weight_int4pack_mm
        y = mm(xb, self.packed0, INT4_GROUP, self.sz0)
        if self.n_terms > 1:
            y = y.float().add_(mm(xb, self.packed1, INT4_GROUP, self.sz1))
        return y


class _Q8Part(nn.Module):
    """Q8_0 row parts kept as the file's codes and scales in ``q8_product``'s tiles; float32 out."""

    def __init__(self, parts: Sequence[QuantTensor], prebuilt: Mapping[str, torch.Tensor] | None = None) -> None:
        super().__init__()
        if prebuilt is None:
            codes, scales = q8_product.pack(parts)
        else:
            N, K = sum(p.shape[0] for p in parts), parts[0].shape[1]
            T, nb = N // q8_product.TILE, K // q8_product.BLOCK
            codes = _stored(prebuilt, "codes", (T, nb, q8_product.PAIRS, q8_product.TILE, 2), torch.int8)
            scales = _stored(prebuilt, "scales", (T, nb, q8_product.TILE), torch.float16)
        self.register_buffer("codes", codes, persistent=False)
        self.register_buffer("scales", scales, persistent=False)
        self.out_features = codes.shape[0] * q8_product.TILE

    def bound(self) -> Callable[[torch.Tensor], torch.Tensor]:
        codes, scales, product = self.codes, self.scales, q8_product.product
        return lambda x2: product(codes, scales, x2)

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        return q8_product.product(self.codes, self.scales, x2)


class _Bf16Part(nn.Module):
    """One row part decoded once to a bfloat16 matrix; products in bfloat16, returned as float32."""

    def __init__(self, q: QuantTensor, prebuilt: Mapping[str, torch.Tensor] | None = None,
                 rows: int | None = None) -> None:
        """``prebuilt``: the stored matrix of ``rows`` rows (``q`` and the parts after it) instead of
        decoding ``q``."""
        super().__init__()
        if prebuilt is not None:
            w = _stored(prebuilt, "weight", (q.shape[0] if rows is None else rows, q.shape[1]), torch.bfloat16)
        else:
            w = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
            for start in range(0, q.shape[0], PACK_ROWS):
                part = q.row_slice(start, min(start + PACK_ROWS, q.shape[0]))
                w[start:start + part.shape[0]] = part.dequantize(torch.bfloat16)
                release_pages(part)
        self.register_buffer("weight", w, persistent=False)
        self.out_features = w.shape[0]

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        return F.linear(x2.to(torch.bfloat16), self.weight)


def _stored(prebuilt: Mapping[str, torch.Tensor], name: str, shape: tuple[int, ...], dtype: torch.dtype
            ) -> torch.Tensor:
    """Buffer ``name`` of a stored packing, checked against the shape and dtype the part needs."""
    t = prebuilt.get(name)
    if t is None or tuple(t.shape) != tuple(shape) or t.dtype != dtype:
        found = "missing" if t is None else f"{t.dtype} {tuple(t.shape)}"
        raise Mismatch(f"stored buffer {name}: {found}, expected {dtype} {tuple(shape)}")
    return t


class _DequantPart(nn.Module):
    """One row part kept as raw blocks, dequantized into a shared buffer at every call."""

    def __init__(self, q: QuantTensor, dtype: torch.dtype) -> None:
        super().__init__()
        self.q, self.dtype = q, dtype
        self.register_buffer("raw", q.raw, persistent=False)
        self.out_features = q.shape[0]

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        self.q.raw = self.raw                        # follows .to() moves of the module
        n = self.q.shape[0] * self.q.shape[1]
        w = self.q.dequantize(self.dtype, out=scratch(n, self.dtype, self.raw.device)[:n])
        return F.linear(x2.to(self.dtype), w.view(self.q.shape))


class QLinear(nn.Module):
    """``y = x @ W.T + b`` with ``W`` the row-wise concatenation of quantized ``parts``.

    The result is in the model's dtype, except on the CPU, where a one-kernel bfloat16 product
    (``"int4"`` with one term, ``"bf16"``) returns bfloat16 (``narrow_out``)."""

    def __init__(self, parts: Sequence[QuantTensor], bias: torch.Tensor | None, *, dtype: torch.dtype,
                 device: torch.device, kernel: str | None = None,
                 prebuilt: Mapping[str, torch.Tensor] | None = None) -> None:
        """``prebuilt``: the buffers ``stored_buffers()`` returned for the same parts before (a
        ``packed_cache`` hit), used instead of packing; ``Mismatch`` if they do not fit."""
        super().__init__()
        if kernel is not None and kernel not in KERNELS:
            raise ValueError(f"kernel {kernel!r} not understood (use one of {KERNELS})")
        groups = group_parts(parts)
        self.kernels = [kernel or pick_kernel(g[0], device, rows=sum(p.shape[0] for p in g)) for g in groups]
        self.parts = nn.ModuleList(
            _make_part(g, k, dtype, device, None if prebuilt is None else _prefixed(prebuilt, f"{j}."))
            for j, (g, k) in enumerate(zip(groups, self.kernels)))
        self.in_features = parts[0].shape[1]
        self.out_features = sum(p.shape[0] for p in parts)
        self.dtype = dtype
        # on the CPU a product's bfloat16 result is returned as it is: the layers that take it
        # widen it where they need float32 (a residual sum promotes it for free), which saves a
        # cast after most products and before the FFN's down projection
        self.narrow_out = device.type == "cpu"
        self.register_buffer("bias", None if bias is None else bias.to(device=device, dtype=dtype),
                             persistent=False)
        # the single part's forward, called directly (no module dispatch per product)
        self._one = self.parts[0].forward if len(self.parts) == 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # rows as they are ([B, E]: a static step) or a decode step's [B, 1, E] squeezed, not
        # reshaped: no shape reads in a traced step
        flat = x.dim() == 2
        one_token = x.dim() == 3 and x.shape[1] == 1
        x2 = x if flat else x.squeeze(1) if one_token else x.reshape(-1, self.in_features)
        if self._one is not None:
            y = self._one(x2)
            if y.dtype != self.dtype and not (self.narrow_out and y.dtype == torch.bfloat16):
                y = y.to(self.dtype)
        else:
            y = torch.cat([p(x2).to(self.dtype) for p in self.parts], dim=-1)
        if self.bias is not None:
            y = y + self.bias
        if flat:
            return y
        return y.unsqueeze(1) if one_token else y.view(*x.shape[:-1], self.out_features)

    def direct(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """A call computing this product of ``[n, K]`` bfloat16 rows, in the part's own output
        dtype (bfloat16, or float32 for two int4 terms) and without the module's wrappers where
        it has one part and no bias (the fused decode step's products); else the module itself."""
        if self._one is None or self.bias is not None:
            return self
        bound = getattr(self.parts[0], "bound", None)
        return bound() if bound is not None else self._one

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, kernels={self.kernels}"

    def stored_buffers(self) -> dict[str, torch.Tensor]:
        """The buffers made at load by packing on the CPU (``"<part>.<buffer>"``), what ``prebuilt``
        takes back; empty where nothing was packed (CUDA, raw blocks dequantized per call)."""
        return {f"{j}.{name}": b for j, p in enumerate(self.parts) if isinstance(p, (_Int4Part, _Bf16Part, _Q8Part))
                for name, b in p.named_buffers()}


def _prefixed(d: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in d.items() if k.startswith(prefix)}


def _make_part(group: list[QuantTensor], kernel: str, dtype: torch.dtype, device: torch.device,
               prebuilt: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
    if kernel == "int4" and device.type == "cuda":
        return _CudaInt4Part(group, device)
    if prebuilt is not None and device.type == "cpu":      # a stored packing of the whole group
        for p in group:
            p.scales_checked = True                # (checked when the stored packing was made)
        if kernel == "int4":
            return _Int4Part(group, prebuilt)
        if kernel == "q8":
            return _Q8Part(group, prebuilt)
        if kernel == "bf16":
            return _Bf16Part(group[0], prebuilt, rows=sum(p.shape[0] for p in group))
    if kernel == "q8":
        return _Q8Part(group)
    if kernel == "int4" and all(p.shape[0] % 64 == 0 for p in group[:-1]):
        return _Int4Part(group)                    # packed part by part into one result
    q = group[0] if len(group) == 1 else QuantTensor.cat(group)
    if kernel == "int4":
        return _Int4Part([q])
    if kernel == "bf16":
        return _Bf16Part(q.to(device))
    return _DequantPart(q.to(device), dtype)


def group_parts(parts: Sequence[QuantTensor]) -> list[list[QuantTensor]]:
    """Consecutive parts of one type form one group, multiplied as one matrix (a fused projection)."""
    merged: list[list[QuantTensor]] = []
    for p in parts:
        if merged and merged[-1][0].ggml_type == p.ggml_type:
            merged[-1].append(p)
        else:
            merged.append([p])
    return merged


class QEmbedding(nn.Module):
    """Embedding lookups in a quantized ``[n_vocab, n_embd]`` table: only the rows used are decoded."""

    def __init__(self, q: QuantTensor, *, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.q, self.dtype = q.to(device), dtype
        self.register_buffer("raw", self.q.raw, persistent=False)
        self.num_embeddings, self.embedding_dim = q.shape

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.q.raw = self.raw
        return self.q.rows(tokens, self.dtype)


def weight_bytes(module: nn.Module, *, resident: bool = False) -> int:
    """Bytes held by a module's parameters and buffers (each storage counted once).

    ``resident=True`` leaves out tables read in place from the memory-mapped file (a CPU
    ``QEmbedding``: only the rows looked up are ever read, and they stay file-backed).
    """
    mapped = {m.raw.untyped_storage().data_ptr() for m in module.modules()
              if isinstance(m, QEmbedding) and m.q.file_backed}
    seen: dict[int, int] = {}
    for t in list(module.parameters()) + list(module.buffers()):
        st = t.untyped_storage()
        if not (resident and st.data_ptr() in mapped):
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())
