"""The vocabulary: every token id's exact output bytes, read from a GGUF file's tokenizer metadata.

A grammar works on bytes, a model emits token ids; :class:`Vocabulary` is the table between them.
Token bytes follow llama.cpp's ``token_to_piece`` (``special=False``): SentencePiece ``▁`` becomes a
space and ``<0xXX>`` byte tokens become the single byte, byte-level BPE pieces are mapped back through
the GPT-2 ``bytes_to_unicode`` table, and control, unknown and unused tokens produce no text at all.
End-of-generation ids are gathered the way llama.cpp's ``llama_vocab::load`` gathers them.
"""
from __future__ import annotations

import hashlib
import re
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

# Texts llama.cpp marks as end-of-generation (src/llama-vocab.cpp, llama_vocab::impl::load).
_EOG_TEXTS = frozenset([
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["])
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
              "<end_of_utterance>")
# FIM tokens found by text; llama.cpp makes them control tokens, and pad/repo/sep also end generation.
_FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
            "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
            "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
            "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss


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
        set_(self, "token_bytes", tuple(map(bytes, token_bytes)))
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
        set_(self, "_index", _index if _index is not None else _first_ids(self.token_texts))
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
        return _build_from_metadata(cls, meta, path)

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


def _token_id(meta: dict[str, Any], key: str, default: int | None, n: int) -> int | None:
    """A special id from metadata, falling back to ``default`` when absent or out of range."""
    if default is not None and not 0 <= default < n:
        default = None
    value = meta.get(key)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < n:
        return int(value)
    return default


def _build_from_metadata(cls: type[Vocabulary], meta: dict[str, Any],
                         path: str | Path | None) -> Vocabulary:
    model = meta.get(_K.MODEL)
    if model is None:
        raise ModelLoadError("missing tokenizer model", path=path, field=_K.MODEL)
    if not isinstance(model, str) or model not in ("llama", "gpt2"):
        raise ModelLoadError(f"unsupported tokenizer model {model!r} (halter reads 'llama' and 'gpt2')",
                             path=path, field=_K.MODEL)
    raw = meta.get(_K.LIST)
    if raw is None:
        raise ModelLoadError("missing token list", path=path, field=_K.LIST)
    if not isinstance(raw, list) or not set(map(type, raw)) <= {bytes}:
        raise ModelLoadError("token list must be an array of strings", path=path, field=_K.LIST)
    n = len(raw)
    if n == 0:
        raise ModelLoadError("token list is empty", path=path, field=_K.LIST)
    if not all(raw):
        raw = [t if t else f"[EMPTY_{i}]".encode() for i, t in enumerate(raw)]  # as llama.cpp does
    if len(set(raw)) != n:
        first: dict[bytes, int] = {}
        for i, t in enumerate(raw):
            if t in first:
                raise ModelLoadError(f"duplicate token {t.decode('utf-8', 'replace')!r} at ids "
                                     f"{first[t]} and {i}", path=path, field=_K.LIST)
            first[t] = i
    types = _int_array(meta, _K.TOKEN_TYPE, n, path)
    types = np.full(n, TOKEN_NORMAL, dtype=np.int8) if types is None else types.astype(np.int8)
    scores = meta.get(_K.SCORES)
    if scores is not None:
        if not isinstance(scores, np.ndarray) or len(scores) < n:
            raise ModelLoadError(f"scores must be a numeric array of at least {n} entries",
                                 path=path, field=_K.SCORES)
        scores = scores[:n].astype(np.float32)
    texts = decode_pieces(raw)
    ids = _first_ids(texts)

    spm = model == "llama"
    bos = _token_id(meta, _K.BOS_ID, 1 if spm else 11, n)
    eos = _token_id(meta, _K.EOS_ID, 2 if spm else 11, n)
    unk = _token_id(meta, _K.UNK_ID, 0 if spm else None, n)
    eot = _token_id(meta, _K.EOT_ID, None, n)
    eom = _token_id(meta, _K.EOM_ID, None, n)
    pad = _token_id(meta, _K.PAD_ID, None, n)
    fim = {kind: _token_id(meta, key, None, n) for kind, key in
           (("pre", _K.FIM_PRE_ID), ("suf", _K.FIM_SUF_ID), ("mid", _K.FIM_MID_ID),
            ("pad", _K.FIM_PAD_ID), ("rep", _K.FIM_REP_ID), ("sep", _K.FIM_SEP_ID))}
    for kind, key in (("pre", _K.PREFIX_ID), ("suf", _K.SUFFIX_ID), ("mid", _K.MIDDLE_ID)):
        fim[kind] = _token_id(meta, key, fim[kind], n)

    def by_text(candidates: Iterable[str]) -> int | None:
        found = [ids[t] for t in candidates if t in ids]
        return min(found) if found else None

    def make_control(i: int | None) -> None:
        if i is not None:
            types[i] = TOKEN_CONTROL

    if eot is None:
        eot = by_text(_EOT_TEXTS)
        make_control(eot)
    if eom is None:
        eom = by_text(("<|eom_id|>",))
        make_control(eom)
    for kind, texts_ in _FIM_TEXTS.items():
        if fim[kind] is None:
            fim[kind] = by_text(texts_)
            make_control(fim[kind])

    eog = {i for i in (fim["pad"], fim["rep"], fim["sep"]) if i is not None}
    for t in _EOG_TEXTS:
        if t in ids:
            eog.add(ids[t])
            make_control(ids[t])
    for t in _ALWAYS_RENDERED:
        if t in ids:
            types[ids[t]] = TOKEN_USER_DEFINED
    eog.update(i for i in (eos, eot, eom) if i is not None)
    eog_texts = {texts[i]: i for i in eog}
    has_call = "<|call|>" in eog_texts or "<|calls|>" in eog_texts
    if "<|end|>" in eog_texts and has_call and ("<|return|>" in eog_texts or "<|flush|>" in eog_texts):
        eog.discard(eog_texts["<|end|>"])          # gpt-oss / solar-open: <|end|> is not an end
        types[eog_texts["<|end|>"]] = TOKEN_USER_DEFINED
    if "<|tool_response>" in eog_texts and "</s>" in eog_texts:
        eog.discard(eog_texts["</s>"])             # gemma4 / paddleocr: </s> is ordinary text
        types[eog_texts["</s>"]] = TOKEN_NORMAL

    token_bytes = _render(raw, texts, types, spm, path)
    return cls(token_bytes, texts, types, eog_ids=eog, bos_id=bos, eos_id=eos, eot_id=eot,
               eom_id=eom, unk_id=unk, pad_id=pad, model=model, scores=scores, _index=ids)


_SEP = b"\0"
"""Joins a vocabulary's pieces so that one C-level call decodes or rewrites all of them (a 262k
vocabulary: ~10 ms instead of ~0.1 s a pass); used only when no piece holds the byte."""


def decode_pieces(raw: Sequence[bytes]) -> list[str]:
    """Each of ``raw`` decoded as UTF-8, an invalid sequence replaced, as ``bytes.decode`` does one
    piece at a time (the pieces are joined by an ASCII byte, so no sequence runs across two)."""
    blob = _SEP.join(raw)
    if blob.count(_SEP) != len(raw) - 1:
        return [t.decode("utf-8", errors="replace") for t in raw]
    return blob.decode("utf-8", errors="replace").split("\0")


def _first_ids(texts: Sequence[str]) -> dict[str, int]:
    """Text -> id, the lowest id where a text repeats."""
    n = len(texts)
    return dict(zip(reversed(texts), range(n - 1, -1, -1)))


def _int_array(meta: dict[str, Any], key: str, n: int, path: str | Path | None) -> np.ndarray | None:
    arr = meta.get(key)
    if arr is None:
        return None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or len(arr) < n:
        raise ModelLoadError(f"must be an integer array of at least {n} entries", path=path, field=key)
    return arr[:n]


_GPT2_DECODER = gpt2_byte_decoder()


_GPT2_TABLE = {ord(c): b for c, b in _GPT2_DECODER.items()}
_NOT_GPT2 = re.compile("[^" + re.escape("".join(sorted(_GPT2_DECODER))) + "]")


def _render(raw: list[bytes], texts: list[str], types: np.ndarray, spm: bool,
            path: str | Path | None) -> list[bytes]:
    """Each token's output bytes (llama.cpp ``token_to_piece`` with ``special=False``).

    Normal pieces are rewritten all at once (one C-level pass over the joined pieces: a 262k
    vocabulary took ~0.2 s a piece at a time), then the few others one by one."""
    out = _render_normal(raw, texts, spm)
    for i in np.flatnonzero(types != TOKEN_NORMAL).tolist():
        out[i] = _render_other(raw[i], int(types[i]), i, path)
    return out


def _render_normal(raw: list[bytes], texts: list[str], spm: bool) -> list[bytes]:
    """Every piece rendered as a normal token: SentencePiece's ``▁`` as a space; a byte-level BPE
    piece's characters mapped back to their bytes, a piece with a character that is no byte's
    (not a byte-level piece) kept as its UTF-8 text."""
    if spm:
        blob = _SEP.join(raw)
        if blob.count(_SEP) == len(raw) - 1:
            return blob.replace(b"\xe2\x96\x81", b" ").split(_SEP)
        return [piece.replace(b"\xe2\x96\x81", b" ") for piece in raw]
    # each character becomes one byte, so the pieces' offsets in the joined text are their offsets
    # in the mapped bytes (characters no byte maps to are replaced, their pieces kept as text)
    joined = "".join(texts)
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))).tolist()
    mapped = joined.translate(_GPT2_TABLE).encode("latin-1", errors="replace")
    out = [mapped[a:b] for a, b in zip([0] + ends[:-1], ends)]
    foreign = [m.start() for m in _NOT_GPT2.finditer(joined)]
    if foreign:
        for i in set(np.searchsorted(np.asarray(ends), foreign, side="right").tolist()):
            out[i] = raw[i]
    return out


def _render_other(piece: bytes, kind: int, i: int, path: str | Path | None) -> bytes:
    """The output bytes of a token that is not a normal one."""
    if kind == TOKEN_USER_DEFINED:
        return piece
    if kind == TOKEN_BYTE:
        if len(piece) != 6 or not piece.startswith(b"<0x") or not piece.endswith(b">"):
            raise ModelLoadError(f"byte token {i} is {piece!r}, expected '<0xXX>'", path=path, field=_K.LIST)
        try:
            return bytes([int(piece[3:5], 16)])
        except ValueError:
            raise ModelLoadError(f"byte token {i} is {piece!r}, expected '<0xXX>'", path=path,
                                 field=_K.LIST) from None
    return b""
