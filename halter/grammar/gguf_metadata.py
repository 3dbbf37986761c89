"""The old import path of the GGUF metadata reader, kept for code written against it: use
``halter.gguf.read_gguf_metadata`` instead."""
import warnings

from halter.gguf.metadata import read_gguf_metadata  # noqa: F401

__all__ = ["read_gguf_metadata"]

warnings.warn("halter.grammar.gguf_metadata moved to halter.gguf: import read_gguf_metadata from halter.gguf",
              DeprecationWarning, stacklevel=2)
