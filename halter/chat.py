"""Chat prompts: render a list of messages with the GGUF file's own chat template.

The Jinja2 template stored under ``tokenizer.chat_template`` runs in the environment Hugging Face's
``apply_chat_template`` gives it, so a prompt renders to the same text: a sandbox with
``trim_blocks``/``lstrip_blocks``, the ``loopcontrols`` extension (``{% break %}``,
``{% continue %}``), ``{% generation %}`` blocks (rendered as their body), HF's ``tojson``
(no HTML escaping, ``ensure_ascii=False``, ``indent``/``separators``/``sort_keys``),
``strftime_now(format)``, ``raise_exception(message)``, ``dict`` and a ``namespace`` that refuses
underscore names. Variables: ``messages``, ``tools``, ``documents``, ``add_generation_prompt``,
``bos_token``, ``eos_token`` and any template keyword arguments (``enable_thinking=...``,
``date_string=...``).
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Mapping, Sequence

from halter.errors import ChatTemplateError, ModelLoadError

__all__ = ["ChatTemplateError", "chat_template_of", "is_chat_prompt", "render_chat"]

TEMPLATE_KEY = "tokenizer.chat_template"


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
    from halter.gguf.metadata import read_gguf_metadata

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


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=32)
def _compile(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2 import nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: HF marks assistant text with it; the body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    class Namespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - Jinja's own signature trick
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore names on a namespace ({name!r})")

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise, strftime_now=_strftime_now, namespace=Namespace,
                       dict=lambda *a, **k: dict(*a, **k))
    return env.from_string(template)


def render_chat(template: str, messages: Sequence[Mapping[str, Any]], *, bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True,
                tools: Sequence[Mapping[str, Any]] | None = None,
                documents: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> str:
    """Render ``messages`` with the Jinja2 ``template`` as ``apply_chat_template`` does.

    ``tools`` are JSON-schema tool descriptions (OpenAI's ``{"type": "function", "function": ...}``
    form), ``documents`` dicts with ``title`` and ``text``; ``extra`` are template keyword
    arguments and other special tokens. Returns the prompt text.
    """
    from jinja2 import TemplateError

    try:
        compiled = _compile(template)
    except TemplateError as err:
        raise ChatTemplateError(f"the chat template does not parse: {err}") from None
    if tools is not None and not all(isinstance(t, Mapping) for t in tools):
        raise ChatTemplateError("tools must be JSON-schema dicts")
    try:
        return compiled.render(messages=check_messages(messages), bos_token=bos_token,
                               eos_token=eos_token, add_generation_prompt=add_generation_prompt,
                               tools=None if tools is None else [dict(t) for t in tools],
                               documents=None if documents is None else [dict(d) for d in documents],
                               **extra)
    except TemplateError as err:
        raise ChatTemplateError(f"the chat template failed on these messages: {err}") from None
