"""halter's inference engine: GGUF models run in PyTorch with a KV cache, and the generation loop.

``Model.load(path)`` reads a GGUF file and decodes tokens; ``generate`` / ``generate_batch``
(``halter.engine.generation``) run the one decode loop, ``Scheduler`` (continuous batching);
``build_tiny_gguf`` writes small random models for tests and the demo.
``Tokenizer`` (the GGUF vocabulary's tokenizer) is imported on first access.
"""
from __future__ import annotations

from typing import Any

from halter.engine.config import ModelConfig
from halter.engine.kv_cache import KVCache
from halter.engine.model import Model
from halter.engine.tiny import build_tiny_gguf

__all__ = ["KVCache", "Model", "ModelConfig", "Request", "Tokenizer", "build_tiny_gguf",
           "generate", "generate_batch"]


def __getattr__(name: str) -> Any:
    # Lazy: the tokenizer and the generation loop pull in modules (grammar, sampling) that
    # loading a model for logits does not need.
    if name == "Tokenizer":
        from halter.engine.tokenizer import Tokenizer
        return Tokenizer
    if name in ("generate", "generate_batch", "Request"):
        from halter.engine import generation as _gen
        return getattr(_gen, name)
    raise AttributeError(f"module 'halter.engine' has no attribute {name!r}")
