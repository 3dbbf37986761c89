"""Tiny Hugging Face models for the integration tests: a random-weight GGUF with a real tokenizer,
converted by ``transformers`` (``halter.integrations.hf_export.gguf_to_hf``)."""
from __future__ import annotations

from pathlib import Path


def build_tiny_hf(vocab_gguf: Path, out: Path) -> tuple[Path, Path]:
    """(GGUF file, Hugging Face folder) of a one-layer llama with ``vocab_gguf``'s tokenizer.

    Head size 64: vLLM's CPU attention kernels take that size (not the 16 of the default tiny model).
    """
    from halter.engine.tiny import build_tiny_gguf
    from halter.integrations.hf_export import gguf_to_hf
    out.mkdir(parents=True, exist_ok=True)
    gguf = Path(build_tiny_gguf(out / "model.gguf", vocab=vocab_gguf, n_layer=1, n_embd=64, n_head=1,
                                n_head_kv=1, n_ff=128, seed=0))
    return gguf, gguf_to_hf(gguf, out / "hf")
