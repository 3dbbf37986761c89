"""The structured-output API: ``halter.generate`` and ``halter.generate_batch``.

One call turns a constraint (GBNF ``grammar``, ``json_schema``, ``regex``, a Python/Pydantic
``output_type`` or an OpenAI-style ``response_format``) into a compiled grammar for the model's
vocabulary (kept per model, so repeated calls do not recompile), runs the engine's generation loop
with it (``halter.engine.generation``: one request, or a batch decoded together), and returns a
``Completion`` whose ``value`` is parsed and validated; whether the output is complete comes from
the grammar matcher's final state, which the loop hands back.
"""
from __future__ import annotations

import dataclasses
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from halter.chat import chat_template_of, is_chat_prompt, render_chat
from halter.completion import Completion, CompletionStream, Usage
from halter.errors import GrammarError

__all__ = ["generate", "generate_batch", "resolve_constraint", "Constraint"]

_CONSTRAINTS = ("grammar", "json_schema", "regex", "output_type", "response_format")
_CACHE_SIZE = 32
_compiled_cache: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Constraint:
    """A compiled grammar plus how to turn accepted text into a value."""

    compiled: Any                                  # CompiledGrammar, or None (unconstrained)
    parse: Callable[[str], Any]

    def matches(self, text: str) -> bool:
        if self.compiled is None:
            return True
        try:
            return bool(self.compiled.grammar.matches(text))
        except GrammarError:                       # token-reference grammars match tokens, not text
            return False


# -- constraints --------------------------------------------------------------------------------

def resolve_constraint(model: Any, *, grammar: Any = None, json_schema: Any = None, regex: str | None = None,
                       output_type: Any = None, response_format: Any = None,
                       schema_options: Mapping[str, Any] | None = None) -> Constraint:
    """The compiled grammar and parser for at most one constraint, compiled for ``model.vocab``.

    The grammar comes from ``halter.constraints.resolve`` (the one path every entry point
    takes); compiled grammars are kept per model. ``schema_options`` go to
    ``Grammar.from_json_schema`` (``whitespace``, ``strict``, ``closed_objects``, ``prop_order``,
    ``target``) for the JSON constraints.
    """
    from halter import constraints

    opts = dict(schema_options or {})
    chosen = constraints.pick(grammar, json_schema, regex, output_type, response_format)
    if chosen is None:
        return Constraint(None, lambda text: text)
    kind, spec = constraints.normalize(*chosen)
    key: Any = None
    if kind == "none":
        return Constraint(None, lambda text: text)
    if kind == "grammar" and not isinstance(spec, str) and not hasattr(spec, "compile"):
        return Constraint(constraints.build(kind, spec, opts).compile(model.vocab), lambda text: text)
    if kind == "grammar":
        key = ("gbnf", spec if isinstance(spec, str) else str(spec))
    elif kind == "json_schema":
        key = ("schema", json.dumps(spec, sort_keys=True))
    elif kind == "regex":
        key = ("regex", spec)
    else:
        try:
            key = ("type", spec, hash(spec))
        except TypeError:
            key = None
    if key is not None and kind != "grammar" and kind != "regex":
        key = (*key, json.dumps(opts, sort_keys=True, default=str))
    per_model = _compiled_cache.setdefault(model, OrderedDict())
    if key is not None and key in per_model:
        per_model.move_to_end(key)
        return per_model[key]
    resolved = constraints.build(kind, spec, opts)
    constraint = Constraint(resolved.compile(model.vocab), resolved.parse)
    if key is not None:
        per_model[key] = constraint
        while len(per_model) > _CACHE_SIZE:
            per_model.popitem(last=False)
    return constraint


# -- prompts and samplers ------------------------------------------------------------------------

def _prompt_args(model: Any, prompt: Any, chat_template: str | None, tools: Any = None,
                 template_kwargs: Mapping[str, Any] | None = None,
                 **template_vars: Any) -> tuple[Any, dict[str, Any]]:
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


_FIELDS = {f.name for f in dataclasses.fields(__import__("halter.sampling", fromlist=["SamplingParams"]).SamplingParams)}


def _params(sampling: Any, kwargs: Mapping[str, Any]) -> Any:
    from halter.sampling import SamplingParams

    unknown = sorted(set(kwargs) - _FIELDS)
    if unknown:
        raise TypeError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    if sampling is not None and not isinstance(sampling, SamplingParams):
        raise TypeError(f"sampling must be a halter.sampling.SamplingParams, not {type(sampling).__name__}")
    params = sampling if sampling is not None else SamplingParams()
    return params.replace(**kwargs) if kwargs else params


def _chain(model: Any, params: Any) -> Any:
    vocab = model.vocab
    return params.build(model.n_vocab, vocab=vocab.token_bytes if params.dry_multiplier > 0 else None,
                        eog_ids=vocab.eog_ids, n_ctx_train=model.config.n_ctx_train)


def _finish(constraint: Constraint, result: Any) -> Completion:
    """The ``Completion`` of an engine ``GenerationResult`` (its matcher is in its final state)."""
    matcher, reason, text = result.matcher, result.finish_reason, result.text
    if matcher is None or reason in ("stop", "grammar"):
        complete = True                    # EOG is only allowed where the grammar may end
    elif reason == "length":
        complete = bool(matcher.is_accepting())
    else:                                  # stop string: the text was cut, check it afresh
        complete = constraint.matches(text)
    return Completion(text=text, complete=complete, finish_reason=reason, tokens=list(result.tokens),
                      usage=Usage(result.prompt_tokens, len(result.tokens)), seed=result.seed,
                      timings=result.timings, _parse=constraint.parse)


# -- generate -------------------------------------------------------------------------------------

def generate(model: Any, prompt: Any, *, grammar: Any = None, json_schema: Any = None,
             regex: str | None = None, output_type: Any = None, response_format: Any = None,
             max_tokens: int = 256, stop: str | Sequence[str] = (), sampling: Any = None,
             grammar_first: bool = False, stream: bool = False, chat_template: str | None = None,
             schema_options: Mapping[str, Any] | None = None, tools: Sequence[Mapping[str, Any]] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None,
             **sampling_kwargs: Any) -> Completion | CompletionStream:
    """Generate a continuation of ``prompt`` that obeys at most one constraint.

    ``prompt``: text, token ids, or chat messages (rendered with the model's chat template, as
    ``transformers``' ``apply_chat_template`` renders it, with ``tools`` and the template keyword
    arguments ``chat_template_kwargs`` such as ``{"enable_thinking": False}``).
    Sampling: ``sampling=SamplingParams(...)`` and/or its fields as keywords (``temperature``,
    ``top_k``, ``top_p``, ``min_p``, ``seed``, ...). Returns a ``Completion``; with
    ``stream=True`` a ``CompletionStream`` of text pieces whose ``completion`` is set at the end.
    """
    constraint = resolve_constraint(model, grammar=grammar, json_schema=json_schema, regex=regex,
                                    output_type=output_type, response_format=response_format,
                                    schema_options=schema_options)
    engine_prompt, tok_kwargs = _prompt_args(model, prompt, chat_template, tools, chat_template_kwargs)
    chain = _chain(model, _params(sampling, sampling_kwargs))
    from halter.engine.generation import generate as engine_generate

    out = engine_generate(model, engine_prompt, max_tokens=max_tokens, sampler=chain,
                          grammar=constraint.compiled, stop=stop, stream=stream,
                          grammar_first=grammar_first, **tok_kwargs)
    if stream:
        return CompletionStream(iter(out), lambda: _finish(constraint, out.result))
    return _finish(constraint, out)


def _per_prompt(name: str, value: Any, n: int) -> list[Any]:
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} entries for {n} prompts")
        return value
    return [value] * n


def generate_batch(model: Any, prompts: Sequence[Any], *, grammar: Any = None, json_schema: Any = None,
                   regex: Any = None, output_type: Any = None, response_format: Any = None,
                   max_tokens: int = 256, stop: str | Sequence[str] = (), sampling: Any = None,
                   grammar_first: bool = False, seed: int | Sequence[int] | None = None,
                   chat_template: str | None = None, schema_options: Mapping[str, Any] | None = None,
                   tools: Sequence[Mapping[str, Any]] | None = None,
                   chat_template_kwargs: Mapping[str, Any] | None = None,
                   **sampling_kwargs: Any) -> list[Completion]:
    """Generate for several prompts at once, decoding them together in the model's KV cache.

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
    from halter.engine.generation import Request, generate_batch as engine_batch

    constraints, requests = [], []
    for i, p in enumerate(prompts):
        c = resolve_constraint(model, schema_options=schema_options, **{k: per[k][i] for k in _CONSTRAINTS})
        engine_prompt, kw = _prompt_args(model, p, chat_template, tools, chat_template_kwargs)
        chain = _chain(model, params if seeds[i] is None else params.replace(seed=seeds[i]))
        constraints.append(c)
        requests.append(Request(engine_prompt, max_tokens=max_tokens, sampler=chain, grammar=c.compiled,
                                stop=stop, grammar_first=grammar_first, **kw))
    return [_finish(c, r) for c, r in zip(constraints, engine_batch(model, requests))]
