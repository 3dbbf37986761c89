"""The vocabulary of a Hugging Face tokenizer: each token id's exact output bytes, for grammars.

``vocabulary_from_hf_tokenizer`` (also ``Vocabulary.from_hf_tokenizer``) reads a ``transformers``
tokenizer or a ``tokenizers.Tokenizer`` without importing either. It tells the two families apart by
the tokenizer's decoder:

* byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM): a ``ByteLevel`` decoder; pieces are mapped back
  through GPT-2's ``bytes_to_unicode`` table;
* SentencePiece (Llama 2, Mistral, Gemma): a decoder that turns ``▁`` into a space (``Replace`` or
  ``Metaspace``), usually with ``ByteFallback``; ``<0xXX>`` pieces are that one byte.

Other decoders (WordPiece, tiktoken ports without a decoder) fall back to decoding each token alone,
which is exact for whole-character tokens only. Special tokens (``special=True`` added tokens and the
tokenizer's named special tokens) produce no text; added tokens that are not special produce their
content as text. The end-of-generation set is the tokenizer's EOS plus the ``eos_token_id`` given
(a model's ``generation_config`` often lists more): exactly the ids a Hugging Face or vLLM
generation stops on, unlike ``Vocabulary.from_gguf``, which also ends on the texts llama.cpp lists
(``<|endoftext|>``, FIM separators, ...). Both agree on every token's bytes for the same model.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable

import numpy as np

from halter.errors import ModelLoadError
from halter.vocab.vocabulary import (TOKEN_BYTE, TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_UNUSED,
                                  TOKEN_USER_DEFINED, Vocabulary, gpt2_byte_decoder)

__all__ = ["vocabulary_from_hf_tokenizer", "tokenizer_kind"]

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>\Z")
_SPACE = "\u2581"          # SentencePiece's "▁"


def _backend(tokenizer: Any) -> Any | None:
    """The ``tokenizers.Tokenizer`` behind ``tokenizer`` (or ``tokenizer`` itself), else None."""
    if type(tokenizer).__module__.startswith("tokenizers") and hasattr(tokenizer, "to_str"):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if backend is not None and hasattr(backend, "to_str") else None


def _decoder_kind(decoder: dict | None) -> str | None:
    if not decoder:
        return None
    kind = decoder.get("type")
    if kind == "ByteLevel":
        return "gpt2"
    if kind == "Metaspace" or kind == "ByteFallback":
        return "llama"
    if kind == "Replace" and decoder.get("pattern", {}).get("String") == _SPACE:
        return "llama"
    if kind == "Sequence":
        kinds = {_decoder_kind(d) for d in decoder.get("decoders", [])} - {None}
        if "gpt2" in kinds:
            return "gpt2"
        if "llama" in kinds:
            return "llama"
    return None


def tokenizer_kind(tokenizer: Any) -> str:
    """``"gpt2"`` (byte-level BPE), ``"llama"`` (SentencePiece pieces) or ``"decode"`` (other)."""
    backend = _backend(tokenizer)
    if backend is not None:
        try:
            spec = json.loads(backend.to_str())
        except (TypeError, ValueError):
            return "decode"
        return _decoder_kind(spec.get("decoder")) or "decode"
    if getattr(tokenizer, "byte_decoder", None) is not None:
        return "gpt2"
    if getattr(tokenizer, "sp_model", None) is not None:
        return "llama"
    return "decode"


def _pieces(tokenizer: Any, backend: Any | None) -> dict[int, str]:
    """id -> raw piece text, added tokens included."""
    if backend is not None:
        vocab = backend.get_vocab(with_added_tokens=True)
    elif hasattr(tokenizer, "get_vocab"):
        vocab = tokenizer.get_vocab()
    else:
        raise TypeError(f"from_hf_tokenizer needs a transformers or tokenizers tokenizer, "
                        f"got {type(tokenizer).__name__}")
    pieces: dict[int, str] = {}
    for text, i in vocab.items():
        pieces.setdefault(int(i), text)
    return pieces


def _added(tokenizer: Any, backend: Any | None) -> dict[int, tuple[str, bool]]:
    """id -> (content, special) for every added token."""
    decoder = None
    if backend is not None and hasattr(backend, "get_added_tokens_decoder"):
        decoder = backend.get_added_tokens_decoder()
    if decoder is None:
        decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return {int(i): (str(t.content), bool(getattr(t, "special", False))) for i, t in decoder.items()}


def _special_ids(tokenizer: Any) -> set[int]:
    ids = getattr(tokenizer, "all_special_ids", None) or []
    return {int(i) for i in ids if i is not None}


def _int_ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [int(value)]
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return [int(v) for v in value if v is not None]
    raise TypeError(f"eos_token_id must be an int or a list of ints, got {value!r}")


def _named_id(tokenizer: Any, name: str) -> int | None:
    value = getattr(tokenizer, f"{name}_token_id", None)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    return None


def vocabulary_from_hf_tokenizer(tokenizer: Any, *, eos_token_id: int | Iterable[int] | None = None,
                                 vocab_size: int | None = None) -> Vocabulary:
    """The :class:`Vocabulary` of a ``transformers`` or ``tokenizers`` tokenizer.

    ``eos_token_id`` adds end-of-generation ids to the tokenizer's own EOS (pass a model's
    ``generation_config.eos_token_id``). ``vocab_size`` pads the vocabulary to the model's
    embedding rows: ids the tokenizer does not have become unused tokens that are never allowed.
    """
    backend = _backend(tokenizer)
    kind = tokenizer_kind(tokenizer)
    pieces = _pieces(tokenizer, backend)
    if not pieces:
        raise ModelLoadError("the tokenizer has an empty vocabulary", field="vocab")
    n = max(pieces) + 1
    if backend is not tokenizer and hasattr(tokenizer, "__len__"):
        n = max(n, len(tokenizer))
    if vocab_size is not None:
        if vocab_size < n:
            raise ValueError(f"vocab_size={vocab_size} is smaller than the tokenizer's {n} tokens")
        n = int(vocab_size)
    added = _added(tokenizer, backend)
    special = _special_ids(tokenizer) | {i for i, (_, sp) in added.items() if sp}
    unk = _named_id(tokenizer, "unk")
    if unk is None and backend is not None:
        unk_text = json.loads(backend.to_str()).get("model", {}).get("unk_token")
        unk = _pieces_index(pieces).get(unk_text) if unk_text else None

    texts: list[str] = []
    types = np.full(n, TOKEN_NORMAL, dtype=np.int8)
    token_bytes: list[bytes] = []
    byte_decoder = gpt2_byte_decoder() if kind == "gpt2" else None
    for i in range(n):
        piece = pieces.get(i)
        if piece is None:
            texts.append(f"[PAD{i}]")
            types[i] = TOKEN_UNUSED
            token_bytes.append(b"")
            continue
        texts.append(piece)
        if i in special:
            types[i] = TOKEN_UNKNOWN if i == unk else TOKEN_CONTROL
            token_bytes.append(b"")
        elif i == unk:
            types[i] = TOKEN_UNKNOWN
            token_bytes.append(b"")
        elif i in added:
            types[i] = TOKEN_USER_DEFINED
            content = added[i][0]
            token_bytes.append((content.replace(_SPACE, " ") if kind == "llama" else content).encode("utf-8"))
        elif kind == "gpt2":
            try:
                token_bytes.append(bytes([byte_decoder[c] for c in piece]))
            except KeyError:       # not a byte-level piece: its UTF-8 text, as llama.cpp does
                token_bytes.append(piece.encode("utf-8"))
        elif kind == "llama":
            m = _BYTE_PIECE.match(piece)
            if m:
                types[i] = TOKEN_BYTE
                token_bytes.append(bytes([int(m.group(1), 16)]))
            else:
                token_bytes.append(piece.replace(_SPACE, " ").encode("utf-8"))
        else:
            token_bytes.append(_decode_alone(tokenizer, i))

    eos = _named_id(tokenizer, "eos")
    eog = {i for i in [*([] if eos is None else [eos]), *_int_ids(eos_token_id)]}
    for i in eog:
        if not 0 <= i < n:
            raise ValueError(f"end-of-generation id {i} is outside the vocabulary (size {n})")
        if types[i] in (TOKEN_NORMAL, TOKEN_USER_DEFINED, TOKEN_BYTE):
            types[i] = TOKEN_CONTROL      # an end token never produces text
            token_bytes[i] = b""

    def named(name: str) -> int | None:
        i = _named_id(tokenizer, name)
        return i if i is not None and 0 <= i < n else None

    return Vocabulary(token_bytes, texts, types, eog_ids=eog, bos_id=named("bos"), eos_id=eos,
                      unk_id=unk if unk is not None and 0 <= unk < n else None, pad_id=named("pad"),
                      model=kind if kind != "decode" else None)


def _pieces_index(pieces: dict[int, str]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i in sorted(pieces):
        index.setdefault(pieces[i], i)
    return index


def _decode_alone(tokenizer: Any, i: int) -> bytes:
    """A token's text decoded on its own (the fallback for decoders halter does not read)."""
    try:
        text = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    except TypeError:
        text = tokenizer.decode([i])
    return text.encode("utf-8", "surrogatepass")
