"""Small GGUF files with just a tokenizer, written with gguf's writer, for vocabulary and tokenizer tests."""
from __future__ import annotations

from pathlib import Path

import gguf


def write_vocab_gguf(path: Path, tokens: list[str], types: list[int] | None = None, *, model: str = "llama",
                     pre: str | None = None, scores: list[float] | None = None,
                     merges: list[str] | None = None, **extra) -> Path:
    """A GGUF file holding tokenizer metadata only; ``extra`` keys call ``GGUFWriter.add_<key>(value)``."""
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    if types is not None:
        w.add_token_types(types)
    if scores is not None:
        w.add_token_scores(scores)
    if merges is not None:
        w.add_token_merges(merges)
    for key, value in extra.items():
        getattr(w, f"add_{key}")(value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
