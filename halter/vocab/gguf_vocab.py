"""A :class:`~halter.vocab.vocabulary.Vocabulary` from a GGUF file's tokenizer metadata.

Token bytes follow llama.cpp's ``token_to_piece`` (``special=False``): SentencePiece ``▁`` becomes a
space and ``<0xXX>`` byte tokens the single byte, byte-level BPE pieces are mapped back through the
GPT-2 ``bytes_to_unicode`` table, and control, unknown and unused tokens produce no text at all.
End-of-generation, FIM and end-of-turn ids are found the way llama.cpp's ``llama_vocab::load``
finds them. Every pass over the pieces is one C-level call over all of them joined.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np
from gguf import Keys

from halter.errors import ModelLoadError
from halter.vocab.vocabulary import (TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_USER_DEFINED, text_index,
                                     gpt2_byte_decoder)

if TYPE_CHECKING:
    from halter.vocab.vocabulary import Vocabulary

_K = Keys.Tokenizer

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


def _token_id(meta: dict[str, Any], key: str, default: int | None, n: int) -> int | None:
    """A special id from metadata, falling back to ``default`` when absent or out of range."""
    if default is not None and not 0 <= default < n:
        default = None
    value = meta.get(key)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value < n:
        return int(value)
    return default


def build_from_metadata(cls: "type[Vocabulary]", meta: dict[str, Any], path: str | Path | None) -> "Vocabulary":
    """``cls`` (``Vocabulary`` or a subclass) from a GGUF file's tokenizer metadata."""
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
    types = _int_array(meta, _K.TOKEN_TYPE, n, path)
    types = np.full(n, TOKEN_NORMAL, dtype=np.int8) if types is None else types.astype(np.int8)
    scores = meta.get(_K.SCORES)
    if scores is not None:
        if not isinstance(scores, np.ndarray) or len(scores) < n:
            raise ModelLoadError(f"scores must be a numeric array of at least {n} entries",
                                 path=path, field=_K.SCORES)
        scores = scores[:n].astype(np.float32)
    texts = decode_pieces(raw)
    ids = text_index(texts)
    if len(ids) != n and len(set(raw)) != n:     # (distinct texts are distinct pieces: one check)
        first: dict[bytes, int] = {}
        for i, t in enumerate(raw):
            if t in first:
                raise ModelLoadError(f"duplicate token {t.decode('utf-8', 'replace')!r} at ids "
                                     f"{first[t]} and {i}", path=path, field=_K.LIST)
            first[t] = i

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


def _int_array(meta: dict[str, Any], key: str, n: int, path: str | Path | None) -> np.ndarray | None:
    arr = meta.get(key)
    if arr is None:
        return None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or len(arr) < n:
        raise ModelLoadError(f"must be an integer array of at least {n} entries", path=path, field=key)
    return arr[:n]


_GPT2_DECODER = gpt2_byte_decoder()


# the byte of each GPT-2 byte character by code point; 256 for a code point that is none (the
# last entry stands for every code point past the table)
_GPT2_BYTE_OF = np.full(max(map(ord, _GPT2_DECODER)) + 2, 256, dtype=np.uint16)
_GPT2_BYTE_OF[[ord(c) for c in _GPT2_DECODER]] = list(_GPT2_DECODER.values())


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
    # in the mapped bytes; the characters are looked up as code points in one numpy pass (a
    # character no byte maps to marks its piece, which is kept as its text)
    joined = "".join(texts)
    ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
    points = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    values = _GPT2_BYTE_OF[np.minimum(points, len(_GPT2_BYTE_OF) - 1)]
    mapped = values.astype(np.uint8).tobytes()
    bounds = ends.tolist()
    out = [mapped[a:b] for a, b in zip([0] + bounds[:-1], bounds)]
    foreign = np.flatnonzero(values > 255)
    if len(foreign):
        for i in set(np.searchsorted(ends, foreign, side="right").tolist()):
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
