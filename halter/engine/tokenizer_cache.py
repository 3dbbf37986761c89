"""A GGUF file's tokenizer kept in halter's cache directory, so that later loads skip building it.

Building a ``Tokenizer`` reads the file's token arrays and makes its tables as Python objects
(texts, output bytes, the text-to-id map, merge ranks): ~0.07 s for SmolLM2's 49k tokens and 49k
merges, ~0.25 s for Gemma 3's 262k tokens. Unpickling the built object takes half of that. The
first build of a file is pickled to ``tokenizers/<key>.pkl`` on a background thread
(``halter.cache.store_pickle``: written atomically, with an HMAC that ``load_pickle`` checks before
unpickling) and later builds of the same file load it.

The key is the file's identity (resolved path, size, modification time, inode) and the source of
the modules that build a tokenizer (``halter.cache.source_digest``): an edited or replaced file,
or other tokenizer code, is a miss. ``HALTER_TOKENIZER_CACHE=0`` turns it off.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from halter import cache

if TYPE_CHECKING:
    from halter.engine.tokenizer import Tokenizer

TOKENIZER_MODULES = ("halter.engine.tokenizer", "halter.engine.tokenizer_cache", "halter.engine.bpe",
                     "halter.engine.spm", "halter.engine.pretokenize", "halter.vocab.vocabulary",
                     "halter.vocab.gguf_vocab", "halter.gguf.metadata")
_KIND = "tokenizers"


def enabled() -> bool:
    """False when ``HALTER_TOKENIZER_CACHE`` is ``0`` (or ``false``/``no``/``off``)."""
    return cache.switched_on("HALTER_TOKENIZER_CACHE")


def key_for(path: str | os.PathLike[str]) -> str | None:
    """The cache key of ``path``'s tokenizer (None: the file cannot be stat'ed)."""
    return cache.file_key(path, code=cache.source_digest(*TOKENIZER_MODULES))


def _file(key: str) -> Path:
    return cache.path(_KIND, key, ".pkl")


def cached(path: str | os.PathLike[str], build: Callable[[], "Tokenizer"]) -> "Tokenizer":
    """The tokenizer of ``path``: from the cache when stored there, else ``build()`` (then stored)."""
    from halter.engine.tokenizer import Tokenizer
    key = key_for(path) if enabled() else None
    if key is None:
        return build()
    p = _file(key)
    tok = cache.load_pickle(p) if p.is_file() else None
    if isinstance(tok, Tokenizer):
        cache.touch(p)
        return tok
    tok = build()
    # pickling and writing (~40 ms for SmolLM2's tokenizer) leave the first load's path
    cache.write_in_background(cache.store_pickle, p, tok, name="halter-tokenizer-cache")
    return tok
