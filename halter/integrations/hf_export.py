"""Write a GGUF model out as a Hugging Face folder, for stacks that load only that format (vLLM).

``gguf_to_hf(path, out_dir)`` lets ``transformers`` read the GGUF (weights dequantized to
``dtype``, tokenizer rebuilt from the GGUF's ``tokenizer.*`` fields), drops the GGUF quantization
entry from the config (the saved weights are plain tensors, and vLLM would otherwise try to load
them as GGUF), and saves the model, its tokenizer and generation config with ``save_pretrained``.
Supported architectures are those ``transformers`` reads from GGUF (llama, qwen2, gemma3, ...).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from halter.errors import ModelLoadError

__all__ = ["gguf_to_hf"]


def gguf_to_hf(path: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
               dtype: str = "float32") -> Path:
    """Convert the GGUF file ``path`` into a Hugging Face model folder ``out_dir``; returns it.

    Needs ``transformers`` (and ``torch``). ``dtype`` is the saved weights' torch dtype name.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = Path(path)
    if not src.is_file():
        raise ModelLoadError("no such GGUF file", path=src)
    out = Path(out_dir)
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"dtype must name a torch dtype ('float32', 'bfloat16', ...), not {dtype!r}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
        model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch_dtype)
    except (ValueError, KeyError, OSError, NotImplementedError) as exc:
        raise ModelLoadError(f"transformers cannot read this GGUF: {exc}", path=src) from exc
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config     # the weights are saved dequantized
    model.hf_quantizer = None
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config = out / "config.json"
    data = json.loads(config.read_text())
    if data.pop("quantization_config", None) is not None:
        config.write_text(json.dumps(data, indent=2))
    return out
