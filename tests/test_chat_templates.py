"""Chat templates rendered by halter exactly as transformers' ``apply_chat_template`` renders them.

The templates under ``tests/data/chat_templates`` are data: SmolLM2-135M-Instruct's (from its GGUF
file), Llama 3.2 Instruct's (with tools, ``strftime_now``, ``tojson(indent=4)``), Qwen 2.5's and
Qwen 3's (tools, ``namespace``, ``enable_thinking``), Gemma 2's and Gemma 3's, Phi-3's and
Mistral Instruct's, as published in public repositories, plus ``loopcontrols.jinja``, halter's
own, for ``{% break %}``/``{% continue %}``, ``tojson`` options, ``documents`` and
``{% generation %}``. Each is rendered for several conversations, with and without a system
message, tools, tool calls and template keyword arguments, by halter's ``render_chat`` and by
transformers' renderer (the function ``apply_chat_template`` calls); texts must be identical,
and a template that raises in one must raise in the other.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from halter.chat import ChatTemplateError, render_chat

chat_utils = pytest.importorskip("transformers.utils.chat_template_utils")

TEMPLATES = sorted(p.name for p in (Path(__file__).parent / "data" / "chat_templates").glob("*.jinja"))
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city, in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello! Café <b>&</b> \"quotes\""}],
    "system": [{"role": "system", "content": "  You are terse.  "},
               {"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "4"},
               {"role": "user", "content": "And 3+3?"}],
    "thinking": [{"role": "user", "content": "Hi"},
                 {"role": "assistant", "content": "<think>\nplan\n</think>\n\nHello there"},
                 {"role": "user", "content": "Bye"}],
    "tool_calls": [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
                       "name": "get_weather", "arguments": {"city": "Paris"}}}]},
                   {"role": "tool", "content": "{\"temp\": 21}"},
                   {"role": "user", "content": "Thanks"}],
}
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
CASES = [("single", {}), ("system", {}), ("thinking", {}), ("tool_calls", {"tools": TOOLS}),
         ("single", {"tools": TOOLS}), ("system", {"enable_thinking": False}),
         ("single", {"documents": [{"title": "A", "text": "first"}, {"title": "B", "text": "second"}]}),
         ("system", {"add_generation_prompt": False})]


def _template(name: str) -> str:
    return (Path(__file__).parent / "data" / "chat_templates" / name).read_text(encoding="utf-8")


def _hf(template: str, messages: list, kw: dict) -> str:
    kw = dict(kw)
    add = kw.pop("add_generation_prompt", True)
    rendered, _ = chat_utils.render_jinja_template(
        conversations=[messages], chat_template=template, add_generation_prompt=add, **SPECIAL, **kw)
    return rendered[0]


@pytest.mark.parametrize("name", TEMPLATES)
def test_rendering_equals_transformers(name: str) -> None:
    template = _template(name)
    rendered_any = 0
    for conv, kw in CASES:
        messages = CONVERSATIONS[conv]
        try:
            theirs = _hf(template, messages, kw)
        except Exception as exc:  # noqa: BLE001 - the template refused these messages
            with pytest.raises(ChatTemplateError):
                render_chat(template, messages, **SPECIAL, **kw)
            assert "raise_exception" in template or "Invalid" in str(exc), exc
            continue
        ours = render_chat(template, messages, **SPECIAL, **kw)
        assert ours == theirs, (name, conv, kw)
        rendered_any += 1
    assert rendered_any >= 3


def test_loop_controls_and_tojson_behave_as_in_hf() -> None:
    text = render_chat(_template("loopcontrols.jinja"),
                       [{"role": "system", "content": "skip me"}] +
                       [{"role": "user", "content": f"<m{i}> é"} for i in range(5)], tools=TOOLS)
    assert text.count("<user>") == 3 and "skip me" not in text       # continue, then break
    assert '"<m0> é"' in text                                        # no HTML escaping, no \\u00e9
    assert '\n    "function": {' in text and text.index('"function"') < text.index('"type"')  # indent=2, sorted
    assert text.endswith("<assistant>")                              # {% generation %} body


def test_namespace_refuses_underscore_names() -> None:
    with pytest.raises(ChatTemplateError):
        render_chat("{% set ns = namespace(_x=1) %}{{ ns._x }}", [{"role": "user", "content": "a"}])
