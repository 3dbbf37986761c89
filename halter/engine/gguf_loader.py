"""Read a GGUF model file: metadata into a ``ModelConfig``, tensors dequantized into torch tensors.

The file is memory-mapped by ``gguf.GGUFReader``; each tensor is checked against the shape the
configuration implies and decoded with ``halter.engine.dequant`` straight to the target dtype and
device. Every failure (not GGUF, truncated, unsupported architecture or tensor type, missing or
misshapen tensor) is a ``ModelLoadError`` naming the file and the field or tensor.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Union

import numpy as np
import torch

from halter.engine.config import ModelConfig
from halter.engine.dequant import GGML_TYPES, dequantize, type_name
from halter.errors import ModelLoadError

Progress = Union[bool, Callable[[int, int, str], None]]


def open_reader(path: str | os.PathLike[str]) -> Any:
    """``gguf.GGUFReader`` over ``path``, turning I/O and format errors into ``ModelLoadError``."""
    import gguf

    if not os.path.isfile(path):
        raise ModelLoadError("no such file", path=path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelLoadError(f"not a GGUF file (starts with {magic!r}, expected b'GGUF')", path=path)
    try:
        return gguf.GGUFReader(path, "r")
    except Exception as exc:  # the reader raises ValueError/IndexError/struct errors on bad files
        raise ModelLoadError(f"corrupt or truncated GGUF file ({type(exc).__name__}: {exc})",
                             path=path) from exc


def field_getter(reader: Any) -> Callable[[str], Any]:
    """``get(key)``: a metadata value as a Python scalar, string or list; ``None`` when absent."""
    def get(key: str) -> Any:
        field = reader.get_field(key)
        if field is None:
            return None
        try:
            value = field.contents()
        except Exception as exc:
            raise ModelLoadError(f"unreadable metadata ({exc})", path=reader.data.filename, field=key)
        return value.item() if isinstance(value, np.generic) else value
    return get


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


def load_gguf(path: str | os.PathLike[str], *, dtype: torch.dtype, device: torch.device,
              progress: Progress = True) -> tuple[ModelConfig, dict[str, torch.Tensor], Any]:
    """Config, ``{gguf tensor name: tensor}`` (dequantized to ``dtype`` on ``device``) and the reader.

    ``rope_freqs.weight`` (llama 3 frequency factors) is kept in float32 when present; the
    returned dict has ``output.weight`` only when the file has one (else the output is tied).
    """
    reader = open_reader(path)
    get = field_getter(reader)
    infos = {t.name: t for t in reader.tensors}
    emb = infos.get("token_embd.weight")
    if emb is None:
        raise ModelLoadError("missing tensor", path=path, field="token_embd.weight")
    config = ModelConfig.from_gguf_fields(get, n_vocab=int(emb.shape[-1]), path=path)
    wanted = dict(config.expected_tensors())
    optional = {"output.weight": (config.n_vocab, config.n_embd),
                "rope_freqs.weight": (config.head_dim // 2,)}
    for name, shape in optional.items():
        if name in infos:
            wanted[name] = shape
    file_size = os.path.getsize(path)
    show = _report(progress, path)
    tensors: dict[str, torch.Tensor] = {}
    total = len(wanted)
    show(0, total, "")
    for done, (name, shape) in enumerate(wanted.items(), 1):
        info = infos.get(name)
        if info is None:
            raise ModelLoadError("missing tensor", path=path, field=name)
        found = tuple(int(d) for d in reversed(info.shape.tolist()))
        if found != shape:
            raise ModelLoadError(f"tensor has shape {found}, expected {shape}", path=path, field=name)
        ttype = int(info.tensor_type)
        if ttype not in GGML_TYPES:
            raise ModelLoadError(f"unsupported tensor type {type_name(ttype)} "
                                 f"(supported: {', '.join(v[0] for v in GGML_TYPES.values())})",
                                 path=path, field=name)
        if info.data_offset + int(info.n_bytes) > file_size:
            raise ModelLoadError("file is truncated: tensor data runs past the end", path=path,
                                 field=name)
        target = torch.float32 if name == "rope_freqs.weight" else dtype
        try:
            t = dequantize(info.data, ttype, shape, dtype=target, device=device)
        except ValueError as exc:
            raise ModelLoadError(f"corrupt tensor data ({exc})", path=path, field=name) from exc
        if not torch.isfinite(t).all():
            raise ModelLoadError("tensor contains NaN or infinite values", path=path, field=name)
        tensors[name] = t
        show(done, total, name)
    return config, tensors, reader
