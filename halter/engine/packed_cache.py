"""The CPU kernels' form of a GGUF file's matrices, kept on disk so that later loads skip the packing.

Loading a quantized file on the CPU rewrites its matrices into the layout torch's int4 kernel
reads (and Q6_K into bfloat16): a pass over every weight byte, most of a load's time (SmolLM2-135M:
~0.2 s of ~0.35 s, Gemma 3 270M: ~0.4 s). The result depends only on the file, torch and halter's
packing code, so after the first load it is written to halter's cache directory
(``packed/<key>.pt``, ``torch.save`` format) and later loads map that file instead
(``torch.load(mmap=True)``: ~20 ms, pages read on first use and shared through the page cache, as
llama.cpp maps the GGUF file itself).

The key is the file's identity (resolved path, size, modification time, inode), the model's
dtype, torch's version and the source of the modules that make the packing
(``halter.cache.source_digest``): an edited or replaced file, another torch or other packing code
is a miss, never a stale hit. A stored file whose tensors do not have the names, shapes and dtypes
the modules expect is deleted and the model packed afresh. The write starts once the whole load
has succeeded and runs on a background thread (non-daemon: a process that ends right after its
load still finishes it), to a temporary file renamed into place; it is skipped for packings
smaller than ``MIN_BYTES`` (cheaper to redo than to read) or larger than a quarter of the cache's
byte bound. ``Model.load(..., packed_cache=False)`` or
``HALTER_PACKED_CACHE=0`` turns it off; ``halter cache clear`` deletes the files with the rest.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from halter import cache

PACKING_MODULES = ("halter.engine.packed_cache", "halter.engine.qlinear", "halter.engine.int4_pack",
                   "halter.engine.q8_product", "halter.engine.quant_tensor", "halter.engine.dequant",
                   "halter.engine.weights")
MIN_BYTES = 8 << 20             # packings smaller than this are redone rather than stored
_KIND = "packed"


class Mismatch(ValueError):
    """A stored packing does not fit the model's modules (names, shapes or dtypes)."""


def enabled() -> bool:
    """False when ``HALTER_PACKED_CACHE`` is ``0`` (or ``false``/``no``/``off``)."""
    return cache.switched_on("HALTER_PACKED_CACHE")


def key_for(path: str | os.PathLike[str], dtype: torch.dtype) -> str | None:
    """The cache key of ``path``'s packing for a CPU model of ``dtype`` (None: the file cannot be
    stat'ed)."""
    return cache.file_key(path, dtype=str(dtype), torch=torch.__version__,
                          code=cache.source_digest(*PACKING_MODULES))


def _file(key: str) -> Path:
    return cache.path(_KIND, key, ".pt")


def load(key: str) -> dict[str, torch.Tensor] | None:
    """The stored tensors of ``key`` (memory-mapped, copy-on-write), or None when there are none
    or the file is unreadable (then deleted)."""
    p = _file(key)
    if not p.is_file():
        return None
    try:
        tensors = torch.load(p, mmap=True, weights_only=True, map_location="cpu")
        if not isinstance(tensors, dict) or not all(isinstance(t, torch.Tensor) for t in tensors.values()):
            raise ValueError("not a dict of tensors")
    except Exception:  # noqa: BLE001 - any unreadable file (truncated, foreign, older torch) is rebuilt
        discard(key)
        return None
    cache.touch(p)
    return tensors


def discard(key: str) -> None:
    """Delete the stored file of ``key`` (a mismatch found after loading it)."""
    try:
        _file(key).unlink()
    except OSError:
        pass


def store_later(key: str, tensors: dict[str, torch.Tensor]) -> bool:
    """Write ``tensors`` under ``key`` on the cache's writer thread; False when skipped (too
    small, too large for the cache's bound, or nothing to store)."""
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    if not tensors or size < MIN_BYTES or size > cache.max_bytes() // 4:
        return False

    def write(tmp: Path) -> None:
        try:
            torch.save(tensors, tmp)
        except OSError:
            raise
        except Exception as err:  # noqa: BLE001 - the zip writer's own errors (a full disk): no file
            raise OSError(str(err)) from err

    cache.write_in_background(cache.write_atomic, _file(key), write, name="halter-packed-cache")
    return True
