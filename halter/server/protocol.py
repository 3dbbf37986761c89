"""Request bodies of the server's endpoints, read into one ``GenSpec``, and errors as OpenAI sends them.

Field names are OpenAI's (``/v1/chat/completions``, ``/v1/completions``) and llama-server's
(``/completion``, and its extra fields on the OpenAI endpoints). Sampling fields map onto
``halter.sampling.SamplingParams`` (llama-server's names and defaults); anything malformed raises
``ApiError`` with the status code, type and parameter OpenAI's API would report.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from halter.errors import ApiError
from halter.sampling import SamplingParams

__all__ = ["ApiError", "GenSpec", "parse_chat", "parse_completion", "parse_native"]

_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)} - {"logit_bias", "seed"}
_MAX_N = 16


@dataclass
class GenSpec:
    """What one request asks for, independent of the endpoint it came through."""

    prompt: Any                                    # str, token ids, or chat messages
    chat: bool = False
    constraint: dict[str, Any] = field(default_factory=dict)   # resolve_constraint keywords
    schema_options: dict[str, Any] = field(default_factory=dict)
    constraint_param: str | None = None            # the request field the constraint came from
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI function definitions
    tool_choice: Any = None                        # "auto" | "required" | function name | None
    sampling: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    max_tokens: int | None = None                  # None: up to the end of the context
    stop: list[str] = field(default_factory=list)
    n: int = 1
    logprobs: int | None = None                    # None: none; k: the token's and k alternatives
    stream: bool = False
    include_usage: bool = False
    grammar_first: bool = False
    echo: bool = False                             # /v1/completions: the prompt text before the output
    model: str | None = None





def _body(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ApiError(400, "the request body must be a JSON object")
    return body


def _get(body: Mapping[str, Any], name: str, kinds: tuple[type, ...], default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in kinds:
        raise ApiError(400, f"'{name}' must be {_kinds(kinds)}, not a boolean", param=name)
    if not isinstance(value, kinds):
        raise ApiError(400, f"'{name}' must be {_kinds(kinds)}, got {type(value).__name__}", param=name)
    return value


def _kinds(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", list: "an array",
             dict: "an object", Mapping: "an object"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def _common(body: Mapping[str, Any], spec: GenSpec) -> None:
    """Sampling, length, stop, n, stream and seed fields shared by every endpoint."""
    sampling: dict[str, Any] = {}
    for name in _SAMPLING_FIELDS:
        if name in body and body[name] is not None:
            sampling[name] = body[name]
    if "logit_bias" in body and body["logit_bias"] is not None:
        sampling["logit_bias"] = body["logit_bias"]
    for name in ("temperature", "top_p", "min_p", "typical_p", "presence_penalty", "frequency_penalty",
                 "repeat_penalty"):
        if name in sampling:
            v = sampling[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ApiError(400, f"'{name}' must be a number, got {v!r}", param=name)
            sampling[name] = float(v)
    for name in ("presence_penalty", "frequency_penalty"):
        if name in sampling and not -2.0 <= sampling[name] <= 2.0:
            raise ApiError(400, f"'{name}' must be between -2 and 2, got {sampling[name]}", param=name)
    try:
        SamplingParams(**sampling)
    except (TypeError, ValueError) as err:
        raise ApiError(400, f"invalid sampling parameter: {err}", param=_param_in(str(err), sampling)) from None
    spec.sampling = sampling
    seed = _get(body, "seed", (int,))
    spec.seed = None if seed is None or seed == -1 else seed
    if spec.seed is not None and not 0 <= spec.seed < 2**32:
        raise ApiError(400, f"'seed' must be in 0..2^32-1 (or -1 for random), got {seed}", param="seed")
    limit = None
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        value = _get(body, name, (int,))
        if value is not None:
            if value < 0 and not (name == "n_predict" and value == -1):
                raise ApiError(400, f"'{name}' must be >= 0, got {value}", param=name)
            limit = None if value == -1 else value
            break
    spec.max_tokens = limit
    stop = body.get("stop")
    if stop is None:
        spec.stop = []
    elif isinstance(stop, str):
        spec.stop = [stop] if stop else []
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        spec.stop = [s for s in stop if s]
    else:
        raise ApiError(400, "'stop' must be a string or an array of strings", param="stop")
    if len(spec.stop) > 16:
        raise ApiError(400, "'stop' takes at most 16 strings", param="stop")
    spec.n = _get(body, "n", (int,), 1)
    if not 1 <= spec.n <= _MAX_N:
        raise ApiError(400, f"'n' must be in 1..{_MAX_N}, got {spec.n}", param="n")
    spec.stream = bool(_get(body, "stream", (bool,), False))
    opts = _get(body, "stream_options", (Mapping,), {})
    spec.include_usage = bool(opts.get("include_usage", False))
    spec.grammar_first = bool(_get(body, "grammar_first", (bool,), False))
    spec.model = _get(body, "model", (str,))


def _param_in(message: str, fields: Mapping[str, Any]) -> str | None:
    for name in fields:
        if name in message:
            return name
    return None


def _native_constraint(body: Mapping[str, Any], spec: GenSpec, *, both_error: bool) -> None:
    """llama-server's ``grammar`` (GBNF text) and ``json_schema`` (a schema object) fields."""
    grammar = _get(body, "grammar", (str,))
    schema = body.get("json_schema")
    if grammar is not None and schema is not None:
        if both_error:
            raise ApiError(400, "Cannot use both json_schema and grammar", param="grammar")
        schema = None                                      # /completion: grammar wins, as in llama-server
    if grammar is not None and grammar.strip():
        spec.constraint["grammar"] = grammar
        spec.constraint_param = "grammar"
    elif schema is not None:
        if not isinstance(schema, (Mapping, bool)):
            raise ApiError(400, "'json_schema' must be a JSON Schema object", param="json_schema")
        spec.constraint["json_schema"] = schema
        spec.constraint_param = "json_schema"


def _response_format(body: Mapping[str, Any], spec: GenSpec) -> None:
    rf = body.get("response_format")
    if rf is None:
        return
    if not isinstance(rf, Mapping) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise ApiError(400, "response_format type must be one of 'text', 'json_object', 'json_schema'",
                       param="response_format")
    if rf["type"] == "text":
        return
    if spec.constraint:
        raise ApiError(400, "Cannot use response_format together with grammar or json_schema",
                       param="response_format")
    if rf["type"] == "json_object":
        schema = rf.get("schema", {"type": "object"})
    else:
        env = rf.get("json_schema")
        if not isinstance(env, Mapping) or not isinstance(env.get("schema", {}), (Mapping, bool)):
            raise ApiError(400, "response_format json_schema needs {'json_schema': {'name': ..., "
                           "'schema': {...}}}", param="response_format")
        name = env.get("name")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "response_format.json_schema.name must be a string", param="response_format")
        schema = env.get("schema", {})
        if env.get("strict"):
            spec.schema_options["strict"] = True
    spec.constraint["json_schema"] = schema
    spec.constraint_param = "response_format"


def _tools(body: Mapping[str, Any], spec: GenSpec) -> None:
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise ApiError(400, "'tool_choice' needs 'tools'", param="tool_choice")
        return
    if not isinstance(tools, list):
        raise ApiError(400, "'tools' must be an array", param="tools")
    fns = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type", "function") != "function" or not isinstance(fn, Mapping):
            raise ApiError(400, f"tools[{i}] must be {{'type': 'function', 'function': {{...}}}}", param=f"tools[{i}]")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, f"tools[{i}].function.name must be a non-empty string", param=f"tools[{i}].function.name")
        params = fn.get("parameters", {"type": "object"})
        if not isinstance(params, (Mapping, bool)):
            raise ApiError(400, f"tools[{i}].function.parameters must be a JSON Schema object",
                           param=f"tools[{i}].function.parameters")
        fns.append({"name": name, "description": fn.get("description", ""), "parameters": params})
    if len({f["name"] for f in fns}) != len(fns):
        raise ApiError(400, "tool function names must be distinct", param="tools")
    if choice is None:
        choice = "auto"
    if isinstance(choice, Mapping):
        name = (choice.get("function") or {}).get("name") if isinstance(choice.get("function"), Mapping) else None
        if name not in {f["name"] for f in fns}:
            raise ApiError(400, f"tool_choice names function {name!r}, which is not in 'tools'", param="tool_choice")
        choice = {"name": name}
    elif choice not in ("none", "auto", "required"):
        raise ApiError(400, "tool_choice must be 'none', 'auto', 'required' or {'type': 'function', "
                       "'function': {'name': ...}}", param="tool_choice")
    spec.tools = fns
    if choice != "none" and fns:
        if spec.constraint:
            raise ApiError(400, "Cannot use tools together with response_format, grammar or json_schema",
                           param="tools")
        spec.tool_choice = choice
        spec.constraint_param = "tools"


def _logprobs_chat(body: Mapping[str, Any], spec: GenSpec) -> None:
    if _get(body, "logprobs", (bool,), False):
        top = _get(body, "top_logprobs", (int,), 0)
        if not 0 <= top <= 20:
            raise ApiError(400, f"'top_logprobs' must be in 0..20, got {top}", param="top_logprobs")
        spec.logprobs = top
    elif body.get("top_logprobs") is not None:
        raise ApiError(400, "'top_logprobs' needs 'logprobs': true", param="top_logprobs")


def parse_chat(body: Any) -> GenSpec:
    """``POST /v1/chat/completions``."""
    body = _body(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        content = m.get("content")
        if not (content is None or isinstance(content, str) or isinstance(content, list)):
            raise ApiError(400, f"messages[{i}].content must be a string or an array of parts",
                           param=f"messages[{i}].content")
    spec = GenSpec(prompt=[_flat_message(m) for m in messages], chat=True)
    _common(body, spec)
    _native_constraint(body, spec, both_error=True)
    _response_format(body, spec)
    _tools(body, spec)
    _logprobs_chat(body, spec)
    return spec


def _flat_message(m: Mapping[str, Any]) -> dict[str, Any]:
    """A message with text content (OpenAI's content parts joined), as chat templates expect."""
    out = dict(m)
    content = m.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(400, "only text content parts ({'type': 'text', 'text': ...}) are supported",
                               param="messages")
            texts.append(part["text"])
        out["content"] = "".join(texts)
    elif content is None:
        out["content"] = ""
    return out


def _prompt(body: Mapping[str, Any]) -> Any:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0]
    raise ApiError(400, "'prompt' must be a string, an array with one string, or an array of token ids",
                   param="prompt")


def parse_completion(body: Any) -> GenSpec:
    """``POST /v1/completions``."""
    body = _body(body)
    spec = GenSpec(prompt=_prompt(body))
    _common(body, spec)
    _native_constraint(body, spec, both_error=True)
    _response_format(body, spec)
    lp = _get(body, "logprobs", (int,))
    if lp is not None:
        if not 0 <= lp <= 5:
            raise ApiError(400, f"'logprobs' must be in 0..5, got {lp}", param="logprobs")
        spec.logprobs = lp
    if spec.max_tokens is None and "max_tokens" not in body:
        spec.max_tokens = 16                                # OpenAI's default for completions
    spec.echo = bool(_get(body, "echo", (bool,), False))
    if spec.echo and not isinstance(spec.prompt, str):
        raise ApiError(400, "'echo' needs a text prompt", param="echo")
    return spec


def parse_native(body: Any) -> GenSpec:
    """llama-server's ``POST /completion``."""
    body = _body(body)
    spec = GenSpec(prompt=_prompt(body))
    _common(body, spec)
    _native_constraint(body, spec, both_error=False)
    n_probs = _get(body, "n_probs", (int,), 0)
    if not 0 <= n_probs <= 20:
        raise ApiError(400, f"'n_probs' must be in 0..20, got {n_probs}", param="n_probs")
    spec.logprobs = n_probs or None
    spec.n = 1
    return spec
