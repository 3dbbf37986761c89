"""Read a GGUF model file: metadata into a ``ModelConfig``, tensors dequantized into torch tensors.

Metadata is read by halter's fast reader (the tokenizer's arrays are stepped over, not decoded),
the tensor-info section by ``read_layout`` here, and tensor data through a read-only memory map
(``gguf.GGUFReader``, which decodes every metadata array in Python, is not used). Each tensor is checked against the shape the
configuration implies and decoded with ``halter.engine.dequant`` straight to the target dtype and
device. Every failure (not GGUF, truncated, unsupported architecture or tensor type, missing or
misshapen tensor) is a ``ModelLoadError`` naming the file and the field or tensor.
"""
from __future__ import annotations

import math
import mmap
import os
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np
import torch

from halter.engine.config import ModelConfig
from halter.engine.dequant import GGML_TYPES, dequantize, type_name
from halter.engine.quant_tensor import QuantTensor
from halter.errors import ModelLoadError
from halter.limits import LIMITS

Progress = Union[bool, Callable[[int, int, str], None]]


# Metadata arrays the model configuration never reads: stepped over, not decoded.
_TOKENIZER_KEYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                   "tokenizer.ggml.merges", "tokenizer.huggingface.json", "tokenizer.chat_template")
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies in the file: torch-order ``shape``, ggml ``type``, byte range."""

    name: str
    shape: tuple[int, ...]
    type: int
    offset: int                 # absolute, from the start of the file
    n_bytes: int | None         # None for a type halter cannot decode


def read_layout(path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, TensorInfo]]:
    """(metadata, tensor infos) of a GGUF file, without decoding the tokenizer's arrays.

    Metadata comes from ``halter.gguf.metadata.read_gguf_metadata`` (the tokenizer's
    arrays skipped), which also says where the key/value section ends; the tensor-info section
    is read here. ``gguf.GGUFReader`` is not used: it decodes every array element in Python (seconds
    for a 100k-token vocabulary). Problems are ``ModelLoadError``s naming the file and the field.
    """
    from halter.gguf.metadata import read_gguf_metadata

    if not os.path.isfile(path):
        raise ModelLoadError("no such file", path=path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelLoadError(f"not a GGUF file (starts with {magic!r}, expected b'GGUF')", path=path)
    meta = read_gguf_metadata(path, skip=_TOKENIZER_KEYS)
    alignment = meta.get("general.alignment", 32)
    if (not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0
            or alignment & (alignment - 1) or alignment > 1 << 20):
        raise ModelLoadError(f"alignment must be a power of two up to 2**20, not {alignment!r}", path=path,
                             field="general.alignment")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return meta, _tensor_infos(buf, len(buf), path, alignment, meta.end)


def _tensor_infos(buf: mmap.mmap, size: int, path: Any, alignment: int, pos: int) -> dict[str, TensorInfo]:
    """The tensor-info section, which starts at ``pos`` (the end of the key/value section)."""
    field = "header"

    def need(pos: int, n: int) -> None:
        if pos + n > size:
            raise ModelLoadError("file is truncated", path=path, field=field)

    need(0, 24)
    n_tensors = _U64.unpack_from(buf, 8)[0]
    if n_tensors * 24 > size - pos:                 # a tensor info needs at least 24 bytes
        raise ModelLoadError(f"header claims {n_tensors} tensors, more than the file holds", path=path,
                             field="header")
    raw = []
    for index in range(n_tensors):
        field = f"tensor info #{index}"
        need(pos, 8)
        name_end = pos + 8 + _U64.unpack_from(buf, pos)[0]
        need(name_end, 4)
        name = bytes(buf[pos + 8:name_end]).decode("utf-8", errors="replace")
        n_dims = _U32.unpack_from(buf, name_end)[0]
        field = name
        if not 1 <= n_dims <= LIMITS.tensor_dims:
            raise ModelLoadError(f"tensor has {n_dims} dimensions (1 to {LIMITS.tensor_dims} allowed)",
                                 path=path, field=name)
        need(name_end + 4, 8 * n_dims + 12)
        dims = struct.unpack_from(f"<{n_dims}Q", buf, name_end + 4)
        ttype, offset = struct.unpack_from("<IQ", buf, name_end + 4 + 8 * n_dims)
        pos = name_end + 16 + 8 * n_dims
        raw.append((name, tuple(int(d) for d in reversed(dims)), ttype, offset))
    data_start = -(-pos // alignment) * alignment
    infos = {}
    for name, shape, ttype, offset in raw:
        n_bytes = None
        elements = math.prod(shape)                # Python integers: no overflow
        if min(shape) < 1 or elements > size * 8 or data_start + offset > size:
            raise ModelLoadError(f"tensor of shape {shape} at offset {offset} does not fit in a file of "
                                 f"{size} bytes", path=path, field=name)
        if ttype in GGML_TYPES:
            _, block_len, block_bytes = GGML_TYPES[ttype]
            n_bytes = elements // block_len * block_bytes
        infos[name] = TensorInfo(name, shape, ttype, data_start + offset, n_bytes)
    return infos


def _report(progress: Progress, path: Any) -> Callable[[int, int, str], None]:
    if callable(progress):
        return progress
    if not progress:
        return lambda done, total, name: None
    tty = sys.stderr.isatty()
    start = time.perf_counter()
    name_shown = os.path.basename(str(path))

    def show(done: int, total: int, name: str) -> None:
        if tty or done in (0, total):
            end = "\n" if done == total else ("\r" if tty else "\n")
            sys.stderr.write(f"halter: loading {name_shown}: {done}/{total} tensors "
                             f"({time.perf_counter() - start:.1f} s){end}")
            sys.stderr.flush()
    return show


def _quant_view(path: Any, data: np.ndarray, info: TensorInfo, device: torch.device) -> QuantTensor:
    """The tensor's raw blocks (file-backed view on the CPU; copied to another device).

    Its scale fields are checked for NaN/inf here on other devices; on the CPU the int4 packing
    checks the scales it computes (reading the blocks once), and ``check_scales`` the rest.
    """
    name, block_len, _ = GGML_TYPES[info.type]
    if len(info.shape) < 2 or info.shape[1] % block_len:
        raise ModelLoadError(f"{name} rows of {info.shape[1] if len(info.shape) > 1 else '?'} values are not whole "
                             f"blocks of {block_len}", path=path, field=info.name)
    q = QuantTensor.from_map(data, info.offset, info.type, info.shape)  # type: ignore[arg-type]
    q.source_path, q.source_name = str(path), info.name
    if device.type == "cpu":
        return q
    check_scales(q)
    return q.to(device)


def check_scales(q: QuantTensor) -> None:
    """Refuse a tensor with a NaN or infinite float16 scale field by name (once per tensor)."""
    if not q.scales_checked:
        if not q.scales_finite():
            raise ModelLoadError("tensor contains NaN or infinite scales", path=q.source_path,
                                 field=q.source_name)
        q.scales_checked = True


def load_gguf(path: str | os.PathLike[str], *, dtype: torch.dtype, device: torch.device,
              progress: Progress = True, weights: str = "dequantize"
              ) -> tuple[ModelConfig, dict[str, Any], Any]:
    """Config, ``{gguf tensor name: tensor}`` (dequantized to ``dtype`` on ``device``) and the metadata.

    ``rope_freqs.weight`` (llama 3 frequency factors) is kept in float32 when present; the
    returned dict has ``output.weight`` only when the file has one (else the output is tied).
    With ``weights="packed"`` a quantized matrix is returned as a ``QuantTensor`` instead: on the
    CPU a view of the memory-mapped file (nothing read but its scale fields, checked for NaN), on
    another device its raw blocks copied there.
    """
    if weights not in ("packed", "dequantize"):
        raise ValueError(f"weights must be 'packed' or 'dequantize', not {weights!r}")
    meta, infos = read_layout(path)
    emb = infos.get("token_embd.weight")
    if emb is None:
        raise ModelLoadError("missing tensor", path=path, field="token_embd.weight")
    if len(emb.shape) != 2:
        raise ModelLoadError(f"the embedding must have 2 dimensions, not shape {emb.shape}", path=path,
                             field="token_embd.weight")
    config = ModelConfig.from_gguf_fields(meta.get, n_vocab=int(emb.shape[0]), path=path,
                                          tensor_names=infos.keys())
    # every block has tensors of its own: a block count the file cannot hold is refused before
    # the expected tensors are even listed (a missing one is then named below)
    if config.n_layer > len(infos):
        raise ModelLoadError(f"block_count {config.n_layer} is more than the file's {len(infos)} tensors "
                             "could hold", path=path, field=f"{config.arch}.block_count")
    wanted = dict(config.expected_tensors())
    optional = {"output.weight": (config.n_vocab, config.n_embd),
                "rope_freqs.weight": (config.rope_dim // 2,)}
    for name, shape in optional.items():
        if name in infos:
            wanted[name] = shape
    file_size = os.path.getsize(path)
    data = np.memmap(path, dtype=np.uint8, mode="c")     # private: tensors are views, never written
    show = _report(progress, path)
    tensors: dict[str, torch.Tensor] = {}
    total = len(wanted)
    show(0, total, "")
    for done, (name, shape) in enumerate(wanted.items(), 1):
        info = infos.get(name)
        if info is None:
            raise ModelLoadError("missing tensor", path=path, field=name)
        if info.shape != shape:
            raise ModelLoadError(f"tensor has shape {info.shape}, expected {shape}", path=path, field=name)
        ttype = info.type
        if info.n_bytes is None:
            raise ModelLoadError(f"unsupported tensor type {type_name(ttype)} "
                                 f"(supported: {', '.join(v[0] for v in GGML_TYPES.values())})",
                                 path=path, field=name)
        if info.offset + info.n_bytes > file_size:
            raise ModelLoadError("file is truncated: tensor data runs past the end", path=path,
                                 field=name)
        target = torch.float32 if name.startswith("rope_") else dtype
        if weights == "packed" and len(shape) == 2 and GGML_TYPES[ttype][1] > 1:
            tensors[name] = _quant_view(path, data, info, device)
            show(done, total, name)
            continue
        try:
            t = dequantize(data[info.offset:info.offset + info.n_bytes], ttype, shape, dtype=target, device=device)
        except ValueError as exc:
            raise ModelLoadError(f"corrupt tensor data ({exc})", path=path, field=name) from exc
        if not torch.isfinite(t).all():
            raise ModelLoadError("tensor contains NaN or infinite values", path=path, field=name)
        if name.startswith("rope_") and not (t > 0).all():          # frequency divisors
            raise ModelLoadError("rope frequency factors must be positive", path=path, field=name)
        tensors[name] = t
        show(done, total, name)
    return config, split_fused(config, tensors), meta


def split_fused(config: ModelConfig, tensors: dict[str, Any]) -> dict[str, Any]:
    """Fused projections split into the separate names the model reads (row views, no copies).

    ``attn_qkv`` becomes ``attn_q``/``attn_k``/``attn_v``; phi3's ``ffn_up`` (gate rows, then up
    rows, as llama.cpp's SwiGLU splits it) becomes ``ffn_gate`` and ``ffn_up``.
    """
    q, kv, ff = config.n_head * config.head_dim, config.n_head_kv * config.head_dim, config.n_ff
    for i in range(config.n_layer):
        b = f"blk.{i}."
        if config.fused_qkv:
            qkv = tensors.pop(b + "attn_qkv.weight")
            for part, (start, end) in zip("qkv", ((0, q), (q, q + kv), (q + kv, q + 2 * kv))):
                tensors[f"{b}attn_{part}.weight"] = _row_slice(qkv, start, end)
        if config.fused_gate_up:
            gate_up = tensors[b + "ffn_up.weight"]
            tensors[b + "ffn_gate.weight"] = _row_slice(gate_up, 0, ff)
            tensors[b + "ffn_up.weight"] = _row_slice(gate_up, ff, 2 * ff)
    return tensors


def _row_slice(t: Any, start: int, end: int) -> Any:
    return t.row_slice(start, end) if isinstance(t, QuantTensor) else t[start:end]
