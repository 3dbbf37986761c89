"""GGUF files: reading a file's metadata (key/value) section, names the file and field on bad input.

``read_gguf_metadata(path, skip=...)`` is the reader the vocabulary, the tokenizer and the engine's
loader share.
"""
from halter.gguf.metadata import read_gguf_metadata

__all__ = ["read_gguf_metadata"]
