"""The vocabulary: every token id's exact output bytes, with its text, type and the special ids.

A grammar works on bytes, a model emits token ids; :class:`Vocabulary` is the table between them.
It is read from a GGUF file's tokenizer metadata (``gguf_vocab.py``: llama.cpp's
``token_to_piece`` and end-of-generation rules) or from a Hugging Face tokenizer
(``hf_tokenizer.py``).
"""
from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from gguf import Keys

from halter.errors import ModelLoadError
from halter.gguf.metadata import read_gguf_metadata

__all__ = ["Vocabulary", "read_gguf_metadata", "gpt2_byte_decoder", "gpt2_byte_encoder",
           "TOKEN_NORMAL", "TOKEN_UNKNOWN", "TOKEN_CONTROL", "TOKEN_USER_DEFINED",
           "TOKEN_UNUSED", "TOKEN_BYTE"]

TOKEN_UNDEFINED, TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL = 0, 1, 2, 3
TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 4, 5, 6

_K = Keys.Tokenizer
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")

def gpt2_byte_encoder() -> dict[int, str]:
    """GPT-2's ``bytes_to_unicode``: each byte value -> the printable character standing for it."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of :func:`gpt2_byte_encoder`: character -> byte value."""
    return {c: b for b, c in gpt2_byte_encoder().items()}


class Vocabulary:
    """Token id -> the exact bytes the model outputs for it; immutable.

    Attributes
    ----------
    size : int
        Number of token ids (also ``len(vocab)``).
    token_bytes : tuple[bytes, ...]
        Output bytes per id; ``b""`` for tokens that never produce text (control, unknown, unused).
    token_texts : tuple[str, ...]
        The raw piece string of each id as stored in the vocabulary (``"▁the"``, ``"<|im_end|>"``).
    token_types : numpy.ndarray[int8]
        GGUF token type per id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte),
        read-only. Tokens llama.cpp promotes to control (EOG and FIM tokens found by their text)
        read 3 here.
    eog_ids : frozenset[int]
        Every id that ends generation (EOS, EOT, EOM and llama.cpp's list of end texts).
    special_ids : frozenset[int]
        Ids that produce no text (control, unknown, unused, undefined): never produced by text rules.
    bos_id, eos_id, eot_id, eom_id, unk_id, pad_id : int | None
        The named special ids; ``None`` when the vocabulary has none.
    model : str | None
        ``"llama"`` (SentencePiece) or ``"gpt2"`` (byte-level BPE) for GGUF vocabularies.
    scores : numpy.ndarray[float32] | None
        SentencePiece merge scores, read-only; ``None`` when the file has none.
    """

    __slots__ = ("token_bytes", "token_texts", "token_types", "eog_ids", "special_ids", "bos_id",
                 "eos_id", "eot_id", "eom_id", "unk_id", "pad_id", "model", "scores", "_index",
                 "_fingerprint")

    def __init__(self, token_bytes: Sequence[bytes], token_texts: Sequence[str],
                 token_types: np.ndarray, *, eog_ids: Iterable[int] = (),
                 bos_id: int | None = None, eos_id: int | None = None, eot_id: int | None = None,
                 eom_id: int | None = None, unk_id: int | None = None, pad_id: int | None = None,
                 model: str | None = None, scores: np.ndarray | None = None,
                 _index: dict[str, int] | None = None) -> None:
        n = len(token_bytes)
        if len(token_texts) != n or len(token_types) != n:
            raise ValueError(f"token_bytes, token_texts and token_types differ in length "
                             f"({n}, {len(token_texts)}, {len(token_types)})")
        types = np.array(token_types, dtype=np.int8, copy=True)
        types.flags.writeable = False
        set_ = object.__setattr__
        exact = set(map(type, token_bytes)) <= {bytes}          # (bytes(b) of bytes is b: skip the calls)
        set_(self, "token_bytes", tuple(token_bytes) if exact else tuple(map(bytes, token_bytes)))
        set_(self, "token_texts", tuple(token_texts))
        set_(self, "token_types", types)
        eog = frozenset(int(i) for i in eog_ids)
        for i in eog:
            if not 0 <= i < n:
                raise ValueError(f"end-of-generation id {i} is outside the vocabulary (size {n})")
        set_(self, "eog_ids", eog)
        special = np.flatnonzero(~np.isin(types, (TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_BYTE)))
        set_(self, "special_ids", frozenset(special.tolist()))
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("eot_id", eot_id),
                            ("eom_id", eom_id), ("unk_id", unk_id), ("pad_id", pad_id)):
            if value is not None and not 0 <= value < n:
                raise ValueError(f"{name} {value} is outside the vocabulary (size {n})")
            set_(self, name, value)
        set_(self, "model", model)
        if scores is not None:
            scores = np.array(scores, dtype=np.float32, copy=True)
            scores.flags.writeable = False
        set_(self, "scores", scores)
        # text -> id, first id wins for a repeated text (``_index``: that map, already made from
        # the same texts by the GGUF reader)
        set_(self, "_index", _index if _index is not None else text_index(self.token_texts))
        set_(self, "_fingerprint", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Vocabulary is immutable (cannot set {name!r})")

    def __reduce__(self) -> tuple[Any, ...]:   # pickling goes through __init__, not __setattr__
        ids = {k: getattr(self, k) for k in ("bos_id", "eos_id", "eot_id", "eom_id", "unk_id", "pad_id",
                                             "model", "scores")}
        return (_restore, (self.token_bytes, self.token_texts, self.token_types, self.eog_ids, ids))

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_token_bytes(cls, token_bytes: Sequence[bytes], *, eog_ids: Iterable[int] = (),
                         special_ids: Iterable[int] = (), texts: Sequence[str] | None = None,
                         bos_id: int | None = None, eos_id: int | None = None) -> "Vocabulary":
        """Build a vocabulary from explicit bytes (tests, other tokenizers).

        ``special_ids`` are control tokens: their bytes are ignored and they produce no text.
        ``texts`` defaults to each token's bytes decoded as UTF-8 (invalid bytes replaced).
        """
        token_bytes = [bytes(b) for b in token_bytes]
        n = len(token_bytes)
        if texts is None:
            texts = [b.decode("utf-8", errors="replace") for b in token_bytes]
        types = np.full(n, TOKEN_NORMAL, dtype=np.int8)
        for i in special_ids:
            if not 0 <= i < n:
                raise ValueError(f"special id {i} is outside the vocabulary (size {n})")
            types[i] = TOKEN_CONTROL
            token_bytes[i] = b""
        return cls(token_bytes, list(texts), types, eog_ids=eog_ids, bos_id=bos_id, eos_id=eos_id)

    @classmethod
    def from_gguf(cls, path: str | Path) -> "Vocabulary":
        """Load the vocabulary of a GGUF file (metadata only; tensors are never read)."""
        meta = read_gguf_metadata(path, skip=(_K.MERGES, _K.HF_JSON, _K.CHAT_TEMPLATE))
        return cls.from_gguf_metadata(meta, path=path)

    @classmethod
    def from_hf_tokenizer(cls, tokenizer: Any, *, eos_token_id: int | Iterable[int] | None = None,
                          vocab_size: int | None = None) -> "Vocabulary":
        """The vocabulary of a ``transformers`` / ``tokenizers`` tokenizer (byte-level BPE or
        SentencePiece); see :func:`halter.vocab.hf_tokenizer.vocabulary_from_hf_tokenizer`."""
        from halter.vocab.hf_tokenizer import vocabulary_from_hf_tokenizer
        return vocabulary_from_hf_tokenizer(tokenizer, eos_token_id=eos_token_id, vocab_size=vocab_size)

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any], *, path: str | Path | None = None) -> "Vocabulary":
        """Build the vocabulary from metadata already read by :func:`read_gguf_metadata`."""
        from halter.vocab.gguf_vocab import build_from_metadata
        return build_from_metadata(cls, meta, path)

    # ----------------------------------------------------------------- queries
    @property
    def size(self) -> int:
        return len(self.token_bytes)

    def __len__(self) -> int:
        return len(self.token_bytes)

    @property
    def token_index(self) -> Mapping[str, int]:
        """Read-only map from raw piece text to id (the lowest id when a text repeats)."""
        return MappingProxyType(self._index)

    def find_token(self, text: str) -> int | None:
        """The id whose raw piece text is exactly ``text`` (e.g. ``"<|im_end|>"``), else None."""
        return self._index.get(text)

    def fingerprint(self) -> str:
        """A stable sha256 (hex) over token bytes, types and the EOG set: a cache key."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(b"halter-vocab-v1\0")
            h.update(_U64.pack(self.size))
            for b in self.token_bytes:
                h.update(_U32.pack(len(b)))
                h.update(b)
            h.update(self.token_types.tobytes())
            h.update(np.array(sorted(self.eog_ids), dtype="<i8").tobytes())
            object.__setattr__(self, "_fingerprint", h.hexdigest())
        return self._fingerprint

    def __repr__(self) -> str:
        kind = f" model={self.model!r}" if self.model else ""
        return (f"Vocabulary(size={self.size}{kind}, bos_id={self.bos_id}, eos_id={self.eos_id}, "
                f"eog_ids={sorted(self.eog_ids)})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.fingerprint() == other.fingerprint() and self.token_texts == other.token_texts

    def __hash__(self) -> int:
        return hash(self.fingerprint())


def _restore(token_bytes: Sequence[bytes], texts: Sequence[str], types: np.ndarray,
             eog_ids: Iterable[int], kwargs: dict[str, Any]) -> Vocabulary:
    return Vocabulary(token_bytes, texts, types, eog_ids=eog_ids, **kwargs)


def text_index(texts: Sequence[str]) -> dict[str, int]:
    """Text -> id for token ``texts``, the lowest id where a text repeats."""
    n = len(texts)
    return dict(zip(reversed(texts), range(n - 1, -1, -1)))
