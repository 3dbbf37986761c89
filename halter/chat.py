"""Chat prompts: render a list of messages with the GGUF file's own chat template.

As llama.cpp and llama-cpp-python do, the Jinja2 template stored under ``tokenizer.chat_template``
runs in a sandboxed environment with ``messages``, ``bos_token``, ``eos_token``,
``add_generation_prompt=True`` and a ``raise_exception`` helper.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from halter.errors import HalterError, ModelLoadError

__all__ = ["ChatTemplateError", "chat_template_of", "is_chat_prompt", "render_chat"]

TEMPLATE_KEY = "tokenizer.chat_template"


class ChatTemplateError(HalterError, ValueError):
    """The model has no chat template, or the template rejected the messages."""


def is_chat_prompt(prompt: Any) -> bool:
    """True for a list of ``{"role": ..., "content": ...}`` messages."""
    return (isinstance(prompt, (list, tuple)) and len(prompt) > 0
            and all(isinstance(m, Mapping) for m in prompt))


def check_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the messages (never the caller's objects), each with a str ``role``."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(f"chat message {i} must be a mapping with a str 'role', got {m!r}")
        if "content" not in m:
            raise ChatTemplateError(f"chat message {i} ({m['role']!r}) has no 'content'")
        out.append(dict(m))
    return out


def chat_template_of(model: Any) -> str:
    """The model's chat template; ``ChatTemplateError`` naming the file when it has none."""
    cached = getattr(model, "_halter_chat_template", None)
    if cached is not None:
        return cached
    from halter.grammar.vocab import read_gguf_metadata

    path = getattr(model, "path", None)
    if path is None:
        raise ChatTemplateError("this model object has no GGUF path to read a chat template from")
    try:
        meta = read_gguf_metadata(path, skip=("tokenizer.ggml.tokens", "tokenizer.ggml.merges",
                                              "tokenizer.ggml.token_type", "tokenizer.ggml.scores"))
    except ModelLoadError:
        raise
    template = meta.get(TEMPLATE_KEY)
    if isinstance(template, bytes):
        template = template.decode("utf-8")
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError(f"{path} has no chat template ({TEMPLATE_KEY!r}); pass the prompt "
                                "as a string, or pass chat_template= explicitly")
    try:
        model._halter_chat_template = template
    except AttributeError:  # pragma: no cover - slotted model objects
        pass
    return template


def _raise(message: str) -> None:
    raise ChatTemplateError(f"chat template: {message}")


def render_chat(template: str, messages: Sequence[Mapping[str, Any]], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, **extra: Any) -> str:
    """Render ``messages`` with the Jinja2 ``template`` in a sandbox; returns the prompt text."""
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    try:
        compiled = env.from_string(template)
    except TemplateError as err:
        raise ChatTemplateError(f"the chat template does not parse: {err}") from None
    try:
        return compiled.render(messages=check_messages(messages), bos_token=bos_token,
                               eos_token=eos_token, add_generation_prompt=add_generation_prompt,
                               **extra)
    except TemplateError as err:
        raise ChatTemplateError(f"the chat template failed on these messages: {err}") from None
