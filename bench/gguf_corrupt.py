"""Read a GGUF file into plain Python parts, change them, write them back: corrupted model files
for the hardening tests and the GGUF campaign of ``bench/fuzz.py``.

``parse(data)`` gives a ``Doc`` (metadata as ``[key, type, value]``, tensor infos as
``[name, dims, type, offset]``, the data section); ``Doc.to_bytes()`` writes GGUF v3 again.
``NAMED`` holds the corruptions a careless converter or an attacker produces (alignment 0, a
tensor without dimensions, a 2**62 dimension, NaN hyper-parameters, ...); ``random_corruption``
mixes field edits and byte flips.
"""
from __future__ import annotations

import copy
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass
class Doc:
    kv: list[list[Any]] = field(default_factory=list)          # [key, vtype, value]; arrays: (etype, [...])
    tensors: list[list[Any]] = field(default_factory=list)     # [name, dims (ggml order), ggml type, offset]
    data: bytes = b""
    version: int = 3
    n_tensors: int | None = None                               # header counts (None: the real ones)
    n_kv: int | None = None

    def get(self, key: str) -> list[Any] | None:
        return next((e for e in self.kv if e[0] == key), None)

    def set(self, key: str, vtype: int, value: Any) -> None:
        e = self.get(key)
        if e is None:
            self.kv.append([key, vtype, value])
        else:
            e[1], e[2] = vtype, value

    def alignment(self) -> int:
        e = self.get("general.alignment")
        return int(e[2]) if e is not None and isinstance(e[2], int) and e[2] > 0 else 32

    def to_bytes(self) -> bytes:
        out = bytearray(b"GGUF")
        out += struct.pack("<IQQ", self.version, len(self.tensors) if self.n_tensors is None else self.n_tensors,
                           len(self.kv) if self.n_kv is None else self.n_kv)
        for key, vtype, value in self.kv:
            _string(out, key.encode())
            out += struct.pack("<I", vtype)
            _value(out, vtype, value)
        for name, dims, ttype, offset in self.tensors:
            _string(out, name.encode())
            out += struct.pack("<I", len(dims))
            out += struct.pack(f"<{len(dims)}Q", *[d & (2 ** 64 - 1) for d in dims])
            out += struct.pack("<IQ", ttype, offset)
        align = self.alignment()
        out += b"\0" * (-len(out) % align)
        return bytes(out) + self.data


def _string(out: bytearray, b: bytes) -> None:
    out += struct.pack("<Q", len(b)) + b


def _value(out: bytearray, vtype: int, value: Any) -> None:
    stack = [(vtype, value)]                 # (arrays may nest deeper than Python's stack)
    while stack:
        vtype, value = stack.pop()
        if vtype == STRING:
            _string(out, value if isinstance(value, bytes) else str(value).encode())
        elif vtype == ARRAY:
            etype, items = value
            out += struct.pack("<IQ", etype, len(items))
            stack.extend((etype, item) for item in reversed(items))
        else:
            out += struct.pack(SCALARS[vtype], value)


def parse(data: bytes) -> Doc:
    """The parts of a well-formed GGUF file (as written by gguf's writer or ``Doc.to_bytes``)."""
    assert data[:4] == b"GGUF"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24

    def string() -> bytes:
        nonlocal pos
        n = struct.unpack_from("<Q", data, pos)[0]
        s = data[pos + 8:pos + 8 + n]
        pos += 8 + n
        return s

    def value(vtype: int) -> Any:
        nonlocal pos
        if vtype == STRING:
            return string()
        if vtype == ARRAY:
            etype, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return (etype, [value(etype) for _ in range(count)])
        fmt = SCALARS[vtype]
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    doc = Doc(version=version)
    for _ in range(n_kv):
        key = string().decode()
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        doc.kv.append([key, vtype, value(vtype)])
    for _ in range(n_tensors):
        name = string().decode()
        n_dims = struct.unpack_from("<I", data, pos)[0]
        dims = list(struct.unpack_from(f"<{n_dims}Q", data, pos + 4))
        ttype, offset = struct.unpack_from("<IQ", data, pos + 4 + 8 * n_dims)
        pos += 16 + 8 * n_dims
        doc.tensors.append([name, dims, ttype, offset])
    pos += -pos % doc.alignment()
    doc.data = data[pos:]
    return doc


def _arch(doc: Doc) -> str:
    e = doc.get("general.architecture")
    return e[2].decode() if e is not None and isinstance(e[2], bytes) else "llama"


def _tensor(doc: Doc, name: str) -> list[Any]:
    return next(t for t in doc.tensors if t[0] == name)


def _nested_array(depth: int) -> tuple:
    v: tuple = (4, [1])
    for _ in range(depth):
        v = (ARRAY, [v])
    return v


def _named() -> dict[str, tuple[Callable[[Doc], None], str]]:
    """name -> (edit, the field the error must name)."""
    a = "{arch}"
    return {
        "alignment-0": (lambda d: d.set("general.alignment", 4, 0), "general.alignment"),
        "alignment-3": (lambda d: d.set("general.alignment", 4, 3), "general.alignment"),
        "embedding-no-dims": (lambda d: _tensor(d, "token_embd.weight").__setitem__(1, []), "token_embd.weight"),
        "dimension-2**62": (lambda d: _tensor(d, "token_embd.weight").__setitem__(1, [2 ** 62, 2 ** 62]),
                            "token_embd.weight"),
        "five-dims": (lambda d: _tensor(d, "output_norm.weight").__setitem__(1, [1, 1, 1, 1, 64]),
                      "output_norm.weight"),
        "block_count-nan": (lambda d: d.set(f"{_arch(d)}.block_count", 6, float("nan")), f"{a}.block_count"),
        "embedding_length-inf": (lambda d: d.set(f"{_arch(d)}.embedding_length", 6, float("inf")),
                                 f"{a}.embedding_length"),
        "head_count-1.5": (lambda d: d.set(f"{_arch(d)}.attention.head_count", 6, 1.5), f"{a}.attention.head_count"),
        "architecture-array": (lambda d: d.set("general.architecture", ARRAY, (STRING, [b"llama"])),
                               "general.architecture"),
        "context_length-0": (lambda d: d.set(f"{_arch(d)}.context_length", 4, 0), f"{a}.context_length"),
        "merges-int-array": (lambda d: d.set("tokenizer.ggml.merges", ARRAY, (4, [1, 2, 3])), "tokenizer.ggml.merges"),
        "merges-string": (lambda d: d.set("tokenizer.ggml.merges", STRING, b"a b"), "tokenizer.ggml.merges"),
        "tokens-int": (lambda d: d.set("tokenizer.ggml.tokens", 4, 7), "tokenizer.ggml.tokens"),
        "block_count-0": (lambda d: d.set(f"{_arch(d)}.block_count", 4, 0), f"{a}.block_count"),
        "block_count-1e9": (lambda d: d.set(f"{_arch(d)}.block_count", 4, 10 ** 9), f"{a}.block_count"),
        "epsilon-nan": (lambda d: d.set(f"{_arch(d)}.attention.layer_norm_rms_epsilon", 6, float("nan")),
                        f"{a}.attention.layer_norm_rms_epsilon"),
        "rope-base-nan": (lambda d: d.set(f"{_arch(d)}.rope.freq_base", 6, float("nan")), f"{a}.rope.freq_base"),
        "rope-base-negative": (lambda d: d.set(f"{_arch(d)}.rope.freq_base", 6, -1.0), f"{a}.rope.freq_base"),
        "metadata-nested-1000": (lambda d: d.set("general.nested", ARRAY, _nested_array(1000)), "general.nested"),
        "n_kv-huge": (lambda d: setattr(d, "n_kv", 2 ** 60), "header"),
        "n_tensors-huge": (lambda d: setattr(d, "n_tensors", 2 ** 60), "header"),
        "string-array-huge": (lambda d: d.set("general.tags", ARRAY, (STRING, [])) or setattr(d, "_huge", True),
                              "general.tags"),
        "token-length-2**64-1": (lambda d: setattr(d, "_token_length", 2 ** 64 - 1), "tokenizer.ggml.tokens"),
    }


NAMED = _named()


def corrupt(data: bytes, name: str) -> bytes:
    """``data`` with the named corruption applied."""
    doc = parse(data)
    NAMED[name][0](doc)
    out = doc.to_bytes()
    if getattr(doc, "_huge", False):          # an array count far beyond the file
        key = b"general.tags"
        i = out.index(key) + len(key) + 4 + 4
        out = out[:i] + struct.pack("<Q", 2 ** 61) + out[i + 8:]
    if getattr(doc, "_token_length", None):   # the first token's length far beyond the file
        key = b"tokenizer.ggml.tokens"
        i = out.index(key) + len(key) + 4 + 4 + 8
        out = out[:i] + struct.pack("<Q", doc._token_length) + out[i + 8:]
    return out


def random_corruption(data: bytes, rng: random.Random) -> bytes:
    """One random corruption: a field's value or type changed, a dimension or offset changed,
    or a few bytes flipped."""
    doc = parse(data)
    kind = rng.randrange(4)
    if kind == 0 and doc.kv:
        e = rng.choice(doc.kv)
        choices = [(4, rng.choice([0, 1, 2 ** 32 - 1])), (6, rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])),
                   (STRING, b"\xff\xfe"), (ARRAY, (4, [1, 2])), (ARRAY, (STRING, [b"x"])), (7, True),
                   (11, rng.choice([-1, 2 ** 62]))]
        e[1], e[2] = rng.choice(choices)
        return doc.to_bytes()
    if kind == 1 and doc.tensors:
        t = rng.choice(doc.tensors)
        what = rng.randrange(3)
        if what == 0:
            t[1] = [rng.choice([0, 1, 3, 2 ** 31, 2 ** 62, 2 ** 64 - 1]) for _ in range(rng.randrange(0, 6))]
        elif what == 1:
            t[2] = rng.choice([0, 1, 2, 8, 12, 99, 2 ** 32 - 1])
        else:
            t[3] = rng.choice([1, 2 ** 40, 2 ** 64 - 1, t[3] + 1])
        return doc.to_bytes()
    if kind == 2:
        keys = ["block_count", "embedding_length", "attention.head_count", "attention.head_count_kv",
                "feed_forward_length", "context_length", "rope.freq_base", "attention.layer_norm_rms_epsilon",
                "attention.key_length", "rope.dimension_count"]
        key = f"{_arch(doc)}.{rng.choice(keys)}"
        doc.set(key, rng.choice([4, 6, 11]), copy.copy(rng.choice([0, 1, 3, 7, 10 ** 9, -5])))
        e = doc.get(key)
        if e[1] == 4 and e[2] < 0:
            e[2] = 0
        if e[1] == 6:
            e[2] = float(e[2])
        return doc.to_bytes()
    b = bytearray(data)
    for _ in range(rng.randrange(1, 8)):
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256)
    return bytes(b)
