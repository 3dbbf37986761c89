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
from halter.errors import GrammarError, SchemaError

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

def _json_parser(schema: Any) -> Callable[[str], Any]:
    import jsonschema

    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)

    def parse(text: str) -> Any:
        value = json.loads(text)
        err = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if err is not None:
            ptr = "#" + "".join(f"/{p}" for p in err.absolute_path)
            raise SchemaError(f"the output does not validate against the schema: {err.message}",
                              ptr, err.validator)
        return value
    return parse


def _type_parser(tp: Any) -> tuple[dict, Callable[[str], Any]]:
    """(JSON Schema, validating parser) of a Pydantic model class or a Python type."""
    import pydantic

    from halter.schemas.pytypes import pydantic_grammar_schema
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        schema, validate = pydantic_grammar_schema(tp), tp.model_validate_json
    else:
        try:
            adapter = pydantic.TypeAdapter(tp)
            schema = pydantic_grammar_schema(adapter)
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as err:
            raise SchemaError(f"output_type {tp!r} has no JSON form: {err}") from None
        validate = adapter.validate_json

    def parse(text: str) -> Any:
        try:
            return validate(text)
        except pydantic.ValidationError as err:
            raise SchemaError(f"the output does not validate as {tp!r}: {err}") from None
    return schema, parse


def _response_format_schema(rf: Any) -> Any:
    if not isinstance(rf, Mapping) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise ValueError(f"response_format type must be one of 'text', 'json_object', 'json_schema'; got {rf!r}")
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return rf.get("schema", {"type": "object"})
    envelope = rf.get("json_schema")
    if not isinstance(envelope, Mapping) or "schema" not in envelope:
        raise ValueError("response_format {'type': 'json_schema'} needs {'json_schema': {'schema': {...}}}")
    return envelope["schema"]


def _load_schema(schema: Any) -> Any:
    """A private deep copy of a schema given as dict/bool or JSON text."""
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"json_schema is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if isinstance(schema, (bool, Mapping)):
        return json.loads(json.dumps(schema))
    raise TypeError(f"json_schema must be a dict, a bool, JSON text or a Pydantic model class, not {type(schema).__name__}")


def resolve_constraint(model: Any, *, grammar: Any = None, json_schema: Any = None, regex: str | None = None,
                       output_type: Any = None, response_format: Any = None,
                       schema_options: Mapping[str, Any] | None = None) -> Constraint:
    """The compiled grammar and parser for at most one constraint, compiled for ``model.vocab``.

    ``schema_options`` go to ``json_schema_to_gbnf`` (``whitespace``, ``strict``,
    ``closed_objects``, ``prop_order``, ``target``) for the JSON constraints.
    """
    opts = dict(schema_options or {})
    given = [(n, v) for n, v in zip(_CONSTRAINTS, (grammar, json_schema, regex, output_type, response_format))
             if v is not None]
    if len(given) > 1:
        raise TypeError(f"pass at most one of {', '.join(_CONSTRAINTS)}; got {given[0][0]} and {given[1][0]}")
    if not given:
        return Constraint(None, lambda text: text)
    kind, spec = given[0]
    if kind == "response_format":
        spec = _response_format_schema(spec)
        if spec is None:
            return Constraint(None, lambda text: text)
        kind = "json_schema"
    if kind == "json_schema":
        import pydantic
        if isinstance(spec, type) and issubclass(spec, pydantic.BaseModel):
            kind = "output_type"
    key: Any = None
    from halter.grammar.compiled import CompiledGrammar
    if kind == "grammar" and isinstance(spec, CompiledGrammar):
        if spec.vocab_size != model.vocab.size:
            raise GrammarError(f"the grammar was compiled for a vocabulary of {spec.vocab_size} tokens; "
                               f"this model's has {model.vocab.size}")
        return Constraint(spec, lambda text: text)
    if kind == "grammar":
        if not isinstance(spec, str) and not hasattr(spec, "compile"):
            raise TypeError(f"grammar must be GBNF text, a Grammar or a CompiledGrammar, not {type(spec).__name__}")
        key = ("gbnf", spec if isinstance(spec, str) else str(spec))
    elif kind == "json_schema":
        spec = _load_schema(spec)
        key = ("schema", json.dumps(spec, sort_keys=True))
    elif kind == "regex":
        if not isinstance(spec, str):
            raise TypeError(f"regex must be a str, not {type(spec).__name__}")
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
    constraint = _build(model, kind, spec, opts)
    if key is not None:
        per_model[key] = constraint
        while len(per_model) > _CACHE_SIZE:
            per_model.popitem(last=False)
    return constraint


def _build(model: Any, kind: str, spec: Any, opts: dict[str, Any]) -> Constraint:
    from halter.grammar import Grammar
    from halter.schemas import regex_to_gbnf

    parse: Callable[[str], Any] = lambda text: text  # noqa: E731
    if kind == "grammar":
        g = Grammar.from_gbnf(spec) if isinstance(spec, str) else spec
    elif kind == "regex":
        g = Grammar.from_gbnf(regex_to_gbnf(spec))
    else:
        if kind == "output_type":          # a Python type's JSON has only its own fields
            spec, parse = _type_parser(spec)      # ... and Pydantic parses it
            opts = {"closed_objects": True, "target": "pydantic", **opts}
        else:
            parse = _json_parser(spec)
        g = Grammar.from_json_schema(spec, **opts)
    return Constraint(g.compile(model.vocab), parse)


# -- prompts and samplers ------------------------------------------------------------------------

def _prompt_args(model: Any, prompt: Any, chat_template: str | None, tools: Any = None,
                 template_kwargs: Mapping[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """(prompt for the engine, tokenizer keywords): chat messages are rendered with the template."""
    if isinstance(prompt, str):
        return prompt, {}
    if is_chat_prompt(prompt):
        vocab = model.vocab
        text_of = lambda i: "" if i is None else vocab.token_bytes[i].decode("utf-8", "replace") \
            if vocab.token_bytes[i] else vocab.token_texts[i]  # noqa: E731
        bos, eos = text_of(vocab.bos_id), text_of(vocab.eos_id)
        template = chat_template if chat_template is not None else chat_template_of(model)
        text = render_chat(template, prompt, bos_token=bos, eos_token=eos, tools=tools,
                           **dict(template_kwargs or {}))
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
