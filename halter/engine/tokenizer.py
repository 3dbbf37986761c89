"""The GGUF tokenizer: text <-> token ids from a GGUF file's vocabulary alone, as llama.cpp tokenizes.

Two tokenizer models are supported: ``llama`` (SentencePiece BPE with byte fallback) and ``gpt2``
(byte-level BPE with the pre-tokenizer named by ``tokenizer.ggml.pre``). Special tokens in the text
are split out first (user-defined tokens always, control tokens when ``parse_special=True``), as
llama.cpp's ``tokenizer_st_partition`` does; the remaining text goes through the model's algorithm.
"""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from gguf import Keys

from halter.engine.bpe import BPE, parse_merges
from halter.engine.pretokenize import PRE_TYPES, Pretokenizer
from halter.engine.spm import spm_encode
from halter.errors import ModelLoadError
from halter.gguf.metadata import read_gguf_metadata
from halter.vocab.vocabulary import TOKEN_CONTROL, TOKEN_UNKNOWN, TOKEN_USER_DEFINED, Vocabulary

__all__ = ["Tokenizer"]

_K = Keys.Tokenizer
_C_SPACE = " \t\n\v\f\r"   # C isspace(), used for a special token's lstrip/rstrip


class Tokenizer:
    """Encode text to token ids and decode ids back, exactly as llama.cpp does for the same GGUF.

    Build one with :meth:`from_gguf`. ``encode(text)`` adds BOS when the model asks for it
    (``add_bos=None``); ``decode(ids)`` follows ``llama_detokenize`` (leading SentencePiece space
    removed, BPE spacing clean-up where the model enables it).

    Attributes
    ----------
    vocab : Vocabulary
        The token table (bytes per id, special and end-of-generation ids).
    model : str
        ``"llama"`` (SentencePiece) or ``"gpt2"`` (byte-level BPE).
    pre : str | None
        The BPE pre-tokenizer type (``None`` for SentencePiece).
    add_bos_default, add_eos_default : bool
        Whether the model wants BOS / EOS added around a prompt.
    """

    def __init__(self, vocab: Vocabulary, *, merges: Sequence[bytes | str] | None = None, pre: str | None = None,
                 add_bos: bool | None = None, add_eos: bool = False,
                 add_space_prefix: bool | None = None, clean_spaces: bool | None = None,
                 rstrip_ids: Iterable[int] = ()) -> None:
        """Usually built by :meth:`from_gguf`. ``merges`` ("left right" lines, rank = position) and
        ``pre`` are required for byte-level BPE; ``None`` flags take llama.cpp's defaults for the
        model and pre-tokenizer; ``rstrip_ids`` are special tokens that swallow following spaces."""
        if vocab.model not in ("llama", "gpt2"):
            raise ValueError(f"vocabulary model must be 'llama' or 'gpt2', not {vocab.model!r}")
        self.vocab = vocab
        self.model = vocab.model
        spm = self.model == "llama"
        options: dict[str, bool] = {}
        if not spm:
            pre = pre or "default"
            if pre not in PRE_TYPES:
                raise ValueError(f"unknown pre-tokenizer type {pre!r}")
            options = PRE_TYPES[pre][1]
            if merges is None:
                raise ValueError("a byte-level BPE tokenizer needs its merges")
        self.pre = None if spm else pre
        self.bos_id = None if options.get("no_bos") else vocab.bos_id   # glm4 has no BOS
        self.eos_id = vocab.eos_id
        self.eog_ids = vocab.eog_ids
        self.n_vocab = vocab.size
        self.add_bos_default = bool(spm or options.get("add_bos", False)) if add_bos is None else add_bos
        self.add_eos_default = add_eos
        self.add_space_prefix = spm if add_space_prefix is None else add_space_prefix
        self.clean_spaces = (not spm and options.get("clean_spaces", True)) if clean_spaces is None \
            else clean_spaces
        self._rstrip = frozenset(rstrip_ids)

        self._ids = vocab.token_index            # (the vocabulary's own map, read-only: not a copy)
        types = vocab.token_types
        special = np.flatnonzero(np.isin(types, (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN)))
        texts = vocab.token_texts
        ordered = sorted(special.tolist(), key=lambda i: -len(texts[i].encode("utf-8")))
        self._special = [(i, texts[i], types[i] == TOKEN_USER_DEFINED) for i in ordered]
        if spm:
            # float32 scores as an array: indexing gives the same floats as a list of them, in a
            # quarter of the memory (a 262k vocabulary: 1 MB, not 8)
            self._scores = [0.0] * vocab.size if vocab.scores is None else array("f", vocab.scores.tobytes())
            self._byte_ids = [self._ids.get(f"<0x{b:02X}>", self._ids.get(chr(b)) if b < 0x80 else None)
                              for b in range(256)]
        else:
            self._pretok = Pretokenizer(pre)  # type: ignore[arg-type]
            self._bpe = BPE(self._ids, parse_merges(merges),  # type: ignore[arg-type]
                            ignore_merges=options.get("ignore_merges", False))

    @classmethod
    def from_gguf(cls, path: str | Path, *, cache: bool = True) -> "Tokenizer":
        """Read the tokenizer of a GGUF file (metadata only). ``cache``: load it from halter's
        cache directory when an earlier build of the same file is stored there, else store this
        build there (``halter.engine.tokenizer_cache``)."""
        def build() -> "Tokenizer":
            meta = read_gguf_metadata(path, skip=(_K.HF_JSON, _K.CHAT_TEMPLATE))
            return cls.from_gguf_metadata(meta, path=path)
        if not cache:
            return build()
        from halter.engine import tokenizer_cache
        return tokenizer_cache.cached(path, build)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the token index, the vocabulary's own map (``__setstate__`` links it back)."""
        return {**self.__dict__, "_ids": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._ids = self.vocab.token_index
        if "_bpe" in state:
            self._bpe._ids = self._ids

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any], *, path: str | Path | None = None) -> "Tokenizer":
        """Build from metadata already read with :func:`halter.gguf.read_gguf_metadata`."""
        vocab = Vocabulary.from_gguf_metadata(meta, path=path)
        merges = meta.get(_K.MERGES)
        if merges is not None and not (isinstance(merges, list) and set(map(type, merges)) <= {bytes}):
            raise ModelLoadError("merges must be an array of strings", path=path, field=_K.MERGES)
        pre = meta.get(_K.PRE)
        if pre is not None and not isinstance(pre, str):
            raise ModelLoadError(f"pre-tokenizer type must be a string, not {type(pre).__name__}", path=path,
                                 field=_K.PRE)
        if vocab.model == "gpt2":
            if merges is None:
                raise ModelLoadError("byte-level BPE vocabulary without merges", path=path, field=_K.MERGES)
            if pre and pre not in PRE_TYPES:
                raise ModelLoadError(f"unsupported pre-tokenizer type {pre!r}", path=path, field=_K.PRE)
        name = str(meta.get("general.name", "")).lower()
        rstrip: set[int] = set()
        if "phi-3" in name or "phi3" in name:   # llama.cpp: phi-3 special tokens eat following spaces
            texts = vocab.token_texts
            kinds = (TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNKNOWN)
            rstrip = set(np.flatnonzero(np.isin(vocab.token_types, kinds)).tolist())
            rstrip |= {i for i, t in enumerate(texts) if t == "</s>"}
            rstrip -= {i for i, t in enumerate(texts) if t in ("<unk>", "<s>", "<|endoftext|>")}

        def flag(key: str) -> bool | None:
            value = meta.get(key)
            return bool(value) if isinstance(value, bool) else None

        tok = cls(vocab, merges=merges, pre=pre if vocab.model == "gpt2" else None,
                  add_bos=flag(_K.ADD_BOS), add_eos=bool(flag(_K.ADD_EOS)),
                  add_space_prefix=flag(_K.ADD_PREFIX), rstrip_ids=rstrip)
        if tok.add_bos_default and tok.bos_id is None:
            raise ModelLoadError("add_bos_token is true but there is no BOS token", path=path,
                                 field=_K.ADD_BOS)
        if tok.add_eos_default and tok.eos_id is None:
            raise ModelLoadError("add_eos_token is true but there is no EOS token", path=path,
                                 field=_K.ADD_EOS)
        return tok

    # ----------------------------------------------------------------- encoding
    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = False, *,
               add_eos: bool = False) -> list[int]:
        """Token ids of ``text``.

        ``add_bos=None`` adds BOS when the model's GGUF asks for it; ``parse_special=True`` turns
        control-token texts such as ``"<|im_end|>"`` into their ids (user-defined tokens are always
        matched, as in llama.cpp). ``add_eos=True`` appends EOS.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"text is not valid Unicode: lone surrogate at index {exc.start}") from None
        add_bos = self.add_bos_default if add_bos is None else add_bos
        out: list[int] = []
        if add_bos:
            if self.bos_id is None:
                raise ValueError("this vocabulary has no BOS token to add")
            out.append(self.bos_id)
        fragments = self._partition(text, parse_special) if text else []
        if self.model == "llama":
            prev_special = True
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                    prev_special = True
                    continue
                if self.add_space_prefix and prev_special:
                    frag = " " + frag
                out += spm_encode(frag.replace(" ", "\u2581"), self._ids, self._scores, self._byte_ids,
                                  self.vocab.unk_id)
                prev_special = False
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                    continue
                for word in self._pretok.split(frag):
                    out += self._bpe.encode_word(word)
        if add_eos:
            if self.eos_id is None:
                raise ValueError("this vocabulary has no EOS token to add")
            out.append(self.eos_id)
        return out

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Split out special-token texts, longest token first (llama.cpp tokenizer_st_partition)."""
        fragments: list[str | int] = [text]
        for tid, tok, user_defined in self._special:
            if not (parse_special or user_defined) or tok not in text:
                continue
            rstrip = tid in self._rstrip
            split: list[str | int] = []
            for frag in fragments:
                if isinstance(frag, int) or tok not in frag:
                    split.append(frag)
                    continue
                pos = 0
                while True:
                    hit = frag.find(tok, pos)
                    if hit < 0:
                        if pos < len(frag):
                            split.append(frag[pos:])
                        break
                    if hit > pos:
                        split.append(frag[pos:hit])
                    split.append(tid)
                    pos = hit + len(tok)
                    if rstrip:
                        while pos < len(frag) and frag[pos] in _C_SPACE:
                            pos += 1
            fragments = split
        return fragments

    # ----------------------------------------------------------------- decoding
    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """One token's bytes; control and unknown tokens give their text only when ``special``."""
        tid = self._check_id(token_id, 0)
        if self.vocab.token_types[tid] in (TOKEN_CONTROL, TOKEN_UNKNOWN):
            return self.vocab.token_texts[tid].encode("utf-8") if special else b""
        return self.vocab.token_bytes[tid]

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        """The bytes of ``ids`` (llama.cpp ``llama_detokenize`` with ``remove_special=skip_special``
        and ``unparse_special=not skip_special``); partial UTF-8 at the end is kept as is."""
        ids = [self._check_id(t, k) for k, t in enumerate(ids)]
        remove_space = self.add_space_prefix
        if skip_special and self.add_bos_default and ids and ids[0] == self.bos_id:
            remove_space = False
            ids = ids[1:]
        if skip_special and self.add_eos_default and ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        parts = []
        for tid in ids:
            piece = self.token_to_piece(tid, special=not skip_special)
            if remove_space and piece.startswith(b" "):
                piece = piece[1:]
            remove_space = False
            parts.append(piece)
        out = b"".join(parts)
        return _clean_spaces(out) if self.clean_spaces else out

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """The text of ``ids``; bytes that are not valid UTF-8 become U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def _check_id(self, token_id: Any, position: int) -> int:
        try:
            tid = int(token_id)
        except (TypeError, ValueError):
            raise TypeError(f"token id at position {position} is {token_id!r}, not an integer") from None
        if not 0 <= tid < self.n_vocab:
            raise ValueError(f"token id {tid} at position {position} is outside the vocabulary "
                             f"(size {self.n_vocab})")
        return tid

    def __len__(self) -> int:
        return self.n_vocab

    def __repr__(self) -> str:
        pre = f", pre={self.pre!r}" if self.pre else ""
        return f"Tokenizer(model={self.model!r}{pre}, n_vocab={self.n_vocab}, bos_id={self.bos_id}, " \
               f"eos_id={self.eos_id})"


def _clean_spaces(text: bytes) -> bytes:
    """llama.cpp's clean_up_tokenization_spaces: " ?" -> "?", " ' " -> "'", " 's" -> "'s", ..."""
    t = bytearray(text)
    n = len(t)
    total = 1 if n else 0          # pass 1: drop the space before ? ! . ,
    for i in range(1, n):
        x = t[i]
        if t[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        t[total] = x
        total += 1
    n, total, i = total, 1 if total else 0, 1   # pass 2: " ' " -> "'"
    while i < n:
        x = t[i]
        if x == 0x27 and i + 1 < n and t[i - 1] == 0x20 and t[i + 1] == 0x20:
            total -= 1
            i += 1
            t[i] = 0
        t[total] = x
        total += 1
        i += 1
    n, total = total, 1 if total else 0          # pass 3: " 's", " 'm", " 're", " 've" lose the space
    for i in range(1, n):
        x = t[i]
        if t[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = t[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < n and (x1, t[i + 2]) in ((0x72, 0x65), (0x76, 0x65)):
                total -= 1
        t[total] = x
        total += 1
    return bytes(t[:total])
