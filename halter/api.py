"""The structured-output API: ``halter.generate``, ``halter.generate_batch`` and ``halter.Model``.

One call turns a constraint (GBNF ``grammar``, ``json_schema``, ``regex``, a Python/Pydantic
``output_type`` or an OpenAI-style ``response_format``) into a compiled grammar for the model's
vocabulary through ``halter.constraints`` (memoised in ``halter.cache``, so repeated calls do not
recompile), renders chat prompts with the model's template, builds the engine's ``Request`` and
runs the engine's one decode loop (``halter.engine.scheduler``: one request, or a batch decoded
together). Every path returns a ``halter.completion.Completion`` whose ``value`` is parsed and
validated. ``halter.Model`` is the engine's model with these as methods (``model.generate``,
``model.generate_batch``, ``model(...)``); the engine itself owns only decoding.
"""
from __future__ import annotations

import dataclasses
import json
import weakref
from typing import Any, Callable, Literal, Mapping, Sequence, TypeVar, Union, overload

import numpy as np

from halter import cache
from halter.chat import chat_template_of, is_chat_prompt, render_chat
from halter.completion import Completion, CompletionStream
from halter.constraints import Constraint, JsonSchemaLike
from halter.engine.generation import GrammarLike, Request, TokenSampler
from halter.engine.generation import run as _engine_run
from halter.engine.generation import generate_batch as _engine_batch
from halter.engine.model import Model as EngineModel
from halter.sampling import SamplingParams

__all__ = ["Constraint", "GrammarLike", "Model", "Prompt", "TokenSampler", "generate", "generate_batch",
           "resolve_constraint"]

ChatMessage = Mapping[str, Any]
Prompt = Union[str, Sequence[int], Sequence[ChatMessage]]
"""Text, token ids, or chat messages (``{"role": ..., "content": ...}``)."""

_CONSTRAINTS = ("grammar", "json_schema", "regex", "output_type", "response_format")
_MEMO = cache.memo("api.compiled_constraints", 64)
T = TypeVar("T")


def model_memo(model: Any, key: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, kept in ``halter.cache`` for ``model`` under ``key`` (a value made for a model
    that no longer exists is never handed to another one that reuses its id)."""
    full = (id(model), *key)
    hit = _MEMO.get(full)
    if hit is not None and hit[0]() is model:
        return hit[1]
    value = make()
    _MEMO.put(full, (weakref.ref(model), value))
    return value


# -- constraints --------------------------------------------------------------------------------

def resolve_constraint(model: Any, *, grammar: GrammarLike | None = None, json_schema: JsonSchemaLike | None = None,
                       regex: str | None = None, output_type: Any = None,
                       response_format: Mapping[str, Any] | None = None,
                       schema_options: Mapping[str, Any] | None = None) -> Constraint:
    """The compiled grammar and parser for at most one constraint, compiled for ``model.vocab``.

    The grammar comes from ``halter.constraints`` (the one path every entry point takes);
    compiled constraints are memoised per model in ``halter.cache`` (``halter.cache.clear()``
    empties it). ``schema_options`` go to ``Grammar.from_json_schema`` (``whitespace``,
    ``strict``, ``closed_objects``, ``prop_order``, ``target``) for the JSON constraints.
    """
    from halter import constraints

    if grammar is not None and hasattr(grammar, "fill_bitmask"):      # a TokenMatcher: used as is
        others = [k for k, v in zip(_CONSTRAINTS[1:], (json_schema, regex, output_type, response_format))
                  if v is not None]
        if others:
            raise TypeError(f"pass at most one of {', '.join(_CONSTRAINTS)}; got grammar and {others[0]}")
        return Constraint(grammar, _text)
    opts = dict(schema_options or {})
    chosen = constraints.pick(grammar, json_schema, regex, output_type, response_format)
    if chosen is None:
        return Constraint(None, _text)
    kind, spec = constraints.normalize(*chosen)
    if kind == "none":
        return Constraint(None, _text)
    if kind == "grammar" and not isinstance(spec, str):
        return constraints.build(kind, spec, opts).constraint(model.vocab)    # Grammar objects memoise
    key: tuple[Any, ...] | None
    if kind == "grammar":
        key = ("gbnf", spec)
    elif kind == "json_schema":
        key = ("schema", json.dumps(spec, sort_keys=True), json.dumps(opts, sort_keys=True, default=str))
    elif kind == "regex":
        key = ("regex", spec)
    else:
        try:
            key = ("type", spec, hash(spec), json.dumps(opts, sort_keys=True, default=str))
        except TypeError:
            key = None
    make = lambda: constraints.build(kind, spec, opts).constraint(model.vocab)  # noqa: E731
    return make() if key is None else model_memo(model, key, make)


def _text(text: str) -> str:
    return text


# -- prompts and samplers ------------------------------------------------------------------------

def _prompt_args(model: Any, prompt: Prompt, chat_template: str | None, tools: Any = None,
                 template_kwargs: Mapping[str, Any] | None = None,
                 **template_vars: Any) -> tuple[str | list[int], dict[str, Any]]:
    """(prompt for the engine, tokenizer keywords): chat messages are rendered with the template
    (``tools``, ``template_kwargs`` and ``template_vars`` are passed to it)."""
    if isinstance(prompt, str):
        return prompt, {}
    if is_chat_prompt(prompt):
        vocab = model.vocab
        text_of = lambda i: "" if i is None else vocab.token_bytes[i].decode("utf-8", "replace") \
            if vocab.token_bytes[i] else vocab.token_texts[i]  # noqa: E731
        bos, eos = text_of(vocab.bos_id), text_of(vocab.eos_id)
        template = chat_template if chat_template is not None else chat_template_of(model)
        text = render_chat(template, prompt, bos_token=bos, eos_token=eos, tools=tools,
                           **{**dict(template_kwargs or {}), **template_vars})
        return text, {"parse_special": True, "add_bos": None if not bos or not text.startswith(bos) else False}
    if isinstance(prompt, (list, tuple, np.ndarray)) and all(isinstance(t, (int, np.integer)) for t in prompt):
        return [int(t) for t in prompt], {}
    raise TypeError("prompt must be a str, a list of token ids or a list of chat messages "
                    f"({{'role': ..., 'content': ...}}), not {type(prompt).__name__}")


_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}


def _params(sampling: SamplingParams | None, kwargs: Mapping[str, Any]) -> SamplingParams:
    unknown = sorted(set(kwargs) - _FIELDS)
    if unknown:
        raise TypeError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a halter.sampling.SamplingParams, not {type(sampling).__name__}")
    params = sampling if sampling is not None else SamplingParams()
    return params.replace(**kwargs) if kwargs else params


def _request(model: Any, prompt: Prompt, constraint: Constraint, *, chat_template: str | None,
             tools: Sequence[Mapping[str, Any]] | None, chat_template_kwargs: Mapping[str, Any] | None,
             sampling: SamplingParams | None, sampler: TokenSampler | None, sampling_kwargs: Mapping[str, Any],
             add_bos: bool | None, parse_special: bool, **fields: Any) -> Request:
    """The engine ``Request`` for one prompt (chat messages rendered, sampling parameters checked)."""
    engine_prompt, tok = _prompt_args(model, prompt, chat_template, tools, chat_template_kwargs)
    tok = {"add_bos": add_bos, "parse_special": parse_special, **tok}
    if sampler is not None:              # the engine refuses a sampler together with parameters
        fields_ = dict(sampling_kwargs)
        sampling_args: dict[str, Any] = {"sampler": sampler, "sampling": sampling, "seed": fields_.pop("seed", None),
                                         "sampling_fields": fields_}
    else:
        sampling_args = {"sampling": _params(sampling, sampling_kwargs)}
    return Request(engine_prompt, grammar=constraint.compiled, parse=constraint.parse,
                   **sampling_args, **tok, **fields)


# -- generate -------------------------------------------------------------------------------------

# Overloads: the return type follows ``stream`` (a Completion, or a CompletionStream of it).
@overload
def generate(model: EngineModel, prompt: Prompt, *, grammar: GrammarLike | None = None,
             json_schema: JsonSchemaLike | None = None, regex: str | None = None, output_type: Any = None,
             response_format: Mapping[str, Any] | None = None, max_tokens: int = 256,
             stop: str | Sequence[str] = (), sampling: SamplingParams | None = None,
             sampler: TokenSampler | None = None, grammar_first: bool = False, stream: Literal[False] = False,
             chat_template: str | None = None, schema_options: Mapping[str, Any] | None = None,
             tools: Sequence[Mapping[str, Any]] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None, n_keep: int = 0,
             add_bos: bool | None = None, parse_special: bool = False,
             cfg_negative_prompt: str | Sequence[int] | None = None, cfg_scale: float = 1.0,
             seq_id: int = 0, device_sampling: bool | None = None,
             **sampling_kwargs: Any) -> Completion: ...


@overload
def generate(model: EngineModel, prompt: Prompt, *, grammar: GrammarLike | None = None,
             json_schema: JsonSchemaLike | None = None, regex: str | None = None, output_type: Any = None,
             response_format: Mapping[str, Any] | None = None, max_tokens: int = 256,
             stop: str | Sequence[str] = (), sampling: SamplingParams | None = None,
             sampler: TokenSampler | None = None, grammar_first: bool = False, stream: Literal[True],
             chat_template: str | None = None, schema_options: Mapping[str, Any] | None = None,
             tools: Sequence[Mapping[str, Any]] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None, n_keep: int = 0,
             add_bos: bool | None = None, parse_special: bool = False,
             cfg_negative_prompt: str | Sequence[int] | None = None, cfg_scale: float = 1.0,
             seq_id: int = 0, device_sampling: bool | None = None,
             **sampling_kwargs: Any) -> CompletionStream: ...


def generate(model: EngineModel, prompt: Prompt, *, grammar: GrammarLike | None = None,
             json_schema: JsonSchemaLike | None = None, regex: str | None = None, output_type: Any = None,
             response_format: Mapping[str, Any] | None = None, max_tokens: int = 256,
             stop: str | Sequence[str] = (), sampling: SamplingParams | None = None,
             sampler: TokenSampler | None = None, grammar_first: bool = False, stream: bool = False,
             chat_template: str | None = None, schema_options: Mapping[str, Any] | None = None,
             tools: Sequence[Mapping[str, Any]] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None, n_keep: int = 0,
             add_bos: bool | None = None, parse_special: bool = False,
             cfg_negative_prompt: str | Sequence[int] | None = None, cfg_scale: float = 1.0,
             seq_id: int = 0, device_sampling: bool | None = None,
             **sampling_kwargs: Any) -> Completion | CompletionStream:
    """Generate a continuation of ``prompt`` that obeys at most one constraint.

    ``prompt``: text, token ids, or chat messages (rendered with the model's chat template, as
    ``transformers``' ``apply_chat_template`` renders it, with ``tools`` and the template keyword
    arguments ``chat_template_kwargs`` such as ``{"enable_thinking": False}``).
    Sampling: ``sampling=SamplingParams(...)`` and/or its fields as keywords (``temperature``,
    ``top_k``, ``top_p``, ``min_p``, ``seed``, ...), or ``sampler=`` any object with
    ``sample(logits) -> int`` and ``accept(token)``. The engine keywords (``n_keep``, ``add_bos``,
    ``parse_special``, ``cfg_negative_prompt``, ``cfg_scale``, ``seq_id``, ``device_sampling``)
    are described at ``halter.engine.generation.generate``. Returns a ``Completion``; with
    ``stream=True`` a ``CompletionStream`` of text pieces whose ``completion`` is set at the end.
    """
    constraint = resolve_constraint(model, grammar=grammar, json_schema=json_schema, regex=regex,
                                    output_type=output_type, response_format=response_format,
                                    schema_options=schema_options)
    req = _request(model, prompt, constraint, chat_template=chat_template, tools=tools,
                   chat_template_kwargs=chat_template_kwargs, sampling=sampling, sampler=sampler,
                   sampling_kwargs=sampling_kwargs, add_bos=add_bos, parse_special=parse_special,
                   max_tokens=max_tokens, stop=stop, grammar_first=grammar_first, n_keep=n_keep,
                   cfg_negative_prompt=cfg_negative_prompt, cfg_scale=cfg_scale,
                   device_sampling=device_sampling)
    return _engine_run(model, req, stream=stream, seq_id=seq_id)


def _per_prompt(name: str, value: Any, n: int) -> list[Any]:
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} prompts")
        return value
    return [value] * n


def generate_batch(model: EngineModel, prompts: Sequence[Prompt], *, grammar: GrammarLike | list[GrammarLike | None] | None = None,
                   json_schema: JsonSchemaLike | list[JsonSchemaLike | None] | None = None,
                   regex: str | list[str | None] | None = None, output_type: Any = None,
                   response_format: Mapping[str, Any] | list[Mapping[str, Any] | None] | None = None,
                   max_tokens: int = 256, stop: str | Sequence[str] = (), sampling: SamplingParams | None = None,
                   grammar_first: bool = False, seed: int | Sequence[int] | None = None,
                   chat_template: str | None = None, schema_options: Mapping[str, Any] | None = None,
                   tools: Sequence[Mapping[str, Any]] | None = None,
                   chat_template_kwargs: Mapping[str, Any] | None = None,
                   **sampling_kwargs: Any) -> list[Completion]:
    """Generate for several prompts at once, decoding them together on the engine's scheduler.

    Each constraint argument is one value for every prompt or a list with one per prompt; ``seed``
    likewise. Row ``i`` equals ``generate(model, prompts[i], ..., seed=seed[i])``.
    """
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError("prompts must be a list of prompts")
    n = len(prompts)
    cons = dict(zip(_CONSTRAINTS, (grammar, json_schema, regex, output_type, response_format)))
    per = {k: _per_prompt(k, v, n) for k, v in cons.items()}
    seeds = list(seed) if isinstance(seed, Sequence) else [seed] * n
    if len(seeds) != n:
        raise ValueError(f"seed has {len(seeds)} entries for {n} prompts")
    params = _params(sampling, sampling_kwargs)
    requests = []
    for i, p in enumerate(prompts):
        c = resolve_constraint(model, schema_options=schema_options, **{k: per[k][i] for k in _CONSTRAINTS})
        requests.append(_request(model, p, c, chat_template=chat_template, tools=tools,
                                 chat_template_kwargs=chat_template_kwargs,
                                 sampling=params if seeds[i] is None else params.replace(seed=seeds[i]),
                                 sampler=None, sampling_kwargs={}, add_bos=None, parse_special=False,
                                 max_tokens=max_tokens, stop=stop, grammar_first=grammar_first))
    return _engine_batch(model, requests)


class Model(EngineModel):
    """A loaded GGUF model (``halter.engine.Model``: transformer, KV cache, tokenizer) with the
    generation API as methods. ``Model.load(path, ...)`` returns one."""

    generate = generate                    # model.generate(prompt, ...) is halter.generate(model, prompt, ...)

    def generate_batch(self, requests: Sequence[Request]) -> list[Completion]:
        """Decode engine ``Request``s together (``halter.engine.generation.generate_batch``); for
        prompts with per-prompt constraints use ``halter.generate_batch``."""
        return _engine_batch(self, requests)

    @overload
    def __call__(self, prompt: Prompt, output_type: type[T], **kwargs: Any) -> T: ...

    @overload
    def __call__(self, prompt: Prompt, output_type: Any = None, **kwargs: Any) -> Any: ...

    def __call__(self, prompt: Prompt, output_type: Any = None, **kwargs: Any) -> Any:
        """The validated value of ``halter.generate(self, prompt, output_type=output_type, **kwargs)``.

        Outlines' shortcut: ``model("A pet:", Pet, max_tokens=60)`` returns a ``Pet``. Other
        constraints (``json_schema=``, ``regex=``, ``grammar=``) may be passed instead of
        ``output_type``; without any the text is returned. An unfinished output raises
        ``IncompleteOutputError`` (its ``.completion`` has the text so far).
        """
        if kwargs.get("stream"):
            raise TypeError("model(...) returns a value; for streaming use halter.generate(..., stream=True)")
        out = generate(self, prompt, output_type=output_type, **kwargs)
        assert isinstance(out, Completion)
        return out.value
