"""A fast, memory-mapped reader of a GGUF file's metadata (key/value) section.

``gguf.GGUFReader`` parses every array in Python and takes seconds on a 100k-token vocabulary; this
reader walks the key/value section once, decodes only what is asked for, and names the file and the
field when the file is truncated or malformed.
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any, Iterable

import numpy as np
from gguf import GGUF_MAGIC, GGUFValueType

from halter.errors import ModelLoadError
from halter.limits import LIMITS

__all__ = ["Metadata", "read_gguf_metadata"]


class Metadata(dict):
    """The key/value metadata (a ``dict``); ``end`` is the file offset where the section ends
    (the tensor-info section starts there)."""

    end: int = 0

_SCALAR = {GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
           GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
           GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
           GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d"}
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


def read_gguf_metadata(path: str | Path, *, skip: Iterable[str] = ()) -> Metadata:
    """Read the key/value metadata of a GGUF file (never its tensors).

    Strings come back as ``str``, string arrays as ``list[bytes]`` (raw UTF-8, exactly as stored),
    numeric arrays as read-only numpy arrays. Keys in ``skip`` are stepped over without decoding.
    The result's ``end`` is the offset just past the key/value section.
    A file that is not GGUF, or is cut short, raises :class:`ModelLoadError` naming the file and the
    field being read. (gguf's ``GGUFReader`` is not used: it also indexes every tensor and every
    string part, which takes seconds for a 100k vocabulary.)
    """
    path = Path(path)
    skip = frozenset(skip)
    try:
        with open(path, "rb") as fh:
            size = path.stat().st_size
            if size < 24:
                raise ModelLoadError("not a GGUF file (too short for a header)", path=path, field="header")
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse_kv(buf, size, path, skip)
    except OSError as exc:
        if isinstance(exc, ModelLoadError):
            raise
        raise ModelLoadError(f"cannot read file ({exc.strerror or exc})", path=path) from exc


def _parse_kv(buf: mmap.mmap, size: int, path: Path, skip: frozenset[str]) -> Metadata:
    if _U32.unpack_from(buf, 0)[0] != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF file (magic {bytes(buf[:4])!r})", path=path, field="magic")
    version = _U32.unpack_from(buf, 4)[0]
    if version not in (2, 3):
        raise ModelLoadError(f"unsupported GGUF version {version} (expected 2 or 3)", path=path,
                             field="version")
    n_kv = _U64.unpack_from(buf, 16)[0]
    pos, field = 24, "header"
    out = Metadata()

    def need(n: int) -> None:
        if n < 0 or pos + n > size:
            raise ModelLoadError("file is truncated", path=path, field=field)

    def read_str() -> bytes:
        nonlocal pos
        need(8)
        n = _U64.unpack_from(buf, pos)[0]
        need(8 + n)
        s = buf[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def read_value(vtype: int, keep: bool, depth: int = 0) -> Any:
        nonlocal pos
        if vtype == GGUFValueType.STRING:
            s = read_str()
            return s.decode("utf-8", errors="replace")
        if vtype in _SCALAR:
            fmt = _SCALAR[GGUFValueType(vtype)]
            n = struct.calcsize(fmt)
            need(n)
            value = struct.unpack_from(fmt, buf, pos)[0]
            pos += n
            return value
        if vtype == GGUFValueType.ARRAY:
            need(12)
            etype, count = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            smallest = 8 if etype == GGUFValueType.STRING else 12 if etype == GGUFValueType.ARRAY else 1
            if count * smallest > size - pos:       # before any loop or allocation
                raise ModelLoadError(f"array of {count} elements does not fit in the file", path=path,
                                     field=field)
            if etype == GGUFValueType.STRING and not keep:
                unpack = _U64.unpack_from
                try:                       # lengths only: the tightest loop (a 262k vocabulary: ~50 ms)
                    for _ in range(count):
                        pos += 8 + unpack(buf, pos)[0]
                except (struct.error, OverflowError):   # a length read past the end, or beyond any offset
                    pos = size + 1
                if pos > size:
                    raise ModelLoadError("file is truncated", path=path, field=field)
                return None
            if etype == GGUFValueType.STRING:
                # the tightest loop that keeps each string (a 262k vocabulary: ~0.1 s); bounds are
                # checked once at the end: a length read past the end raises, and a string cut
                # short by the end leaves ``pos`` past it
                items: list[bytes] = []
                append, unpack = items.append, _U64.unpack_from
                try:
                    for _ in range(count):
                        start = pos + 8
                        pos = start + unpack(buf, pos)[0]
                        append(buf[start:pos])
                except (struct.error, OverflowError, MemoryError):
                    pos = size + 1
                if pos > size:
                    raise ModelLoadError("file is truncated", path=path, field=field)
                return items
            if etype in _SCALAR:
                fmt = _SCALAR[GGUFValueType(etype)]
                n = struct.calcsize(fmt) * count
                need(n)
                arr = np.frombuffer(buf, dtype=np.dtype(fmt), count=count, offset=pos).copy() if keep else None
                pos += n
                if arr is not None:
                    arr.flags.writeable = False
                return arr
            if etype == GGUFValueType.ARRAY:
                if depth + 1 >= LIMITS.gguf_metadata_depth:
                    raise ModelLoadError(f"metadata arrays nested more than {LIMITS.gguf_metadata_depth} deep "
                                         "(limit gguf_metadata_depth: halter.limits.set(gguf_metadata_depth=...))",
                                         path=path, field=field)
                return [read_value(GGUFValueType.ARRAY, keep, depth + 1) for _ in range(count)]
            raise ModelLoadError(f"unknown GGUF array element type {etype}", path=path, field=field)
        raise ModelLoadError(f"unknown GGUF value type {vtype}", path=path, field=field)

    if n_kv * 12 > size - pos:                      # a key needs at least its length and type
        raise ModelLoadError(f"header claims {n_kv} metadata entries, more than the file holds",
                             path=path, field="header")
    for index in range(n_kv):
        field = f"metadata key #{index}"
        key = read_str().decode("utf-8", errors="replace")
        field = key
        need(4)
        vtype = _U32.unpack_from(buf, pos)[0]
        pos += 4
        value = read_value(vtype, key not in skip)
        if key not in skip:
            out[key] = value
    out.end = pos
    return out
