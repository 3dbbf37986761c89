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


def read_test_vectors(vocab_dir: Path, name: str) -> list[tuple[str, list[int]]]:
    """llama.cpp's tokenizer test vectors (test-tokenizer-0): the ``.inp`` texts are separated by
    ``\\n__ggml_vocab_test__\\n``; the ``.out`` file has one line of ids per text. Skips if absent."""
    import pytest
    inp = vocab_dir / f"ggml-vocab-{name}.gguf.inp"
    out = vocab_dir / f"ggml-vocab-{name}.gguf.out"
    if not (inp.is_file() and out.is_file()):
        pytest.skip(f"test vectors for {name} are absent")
    raw = inp.read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    texts, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            texts.append(raw[pos:])
            break
        texts.append(raw[pos:nxt])
        pos = nxt + len(sep)
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) >= len(texts), f"{out} has fewer id lines than {inp} has texts"
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]
