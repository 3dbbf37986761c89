"""One path from a constraint to a grammar: every entry point resolves its constraint here.

A constraint is at most one of ``grammar`` (GBNF text, a ``Grammar`` or a ``CompiledGrammar``),
``json_schema`` (a dict, a bool, JSON text, or a Pydantic model class), ``regex``, ``output_type``
(a Pydantic model class or a Python type) and ``response_format`` (an OpenAI / llama-server
envelope). ``resolve`` turns it into a ``Resolved``: the ``Grammar`` built by the matching
``Grammar.from_*`` constructor, and the function that parses and validates accepted text into a
value. ``halter.generate``, ``generate_batch``, ``Model.generate``, ``model(...)``, the command
line and the transformers logits processor all call it, so one constraint behaves the same
through every entry point.

Pydantic is optional: it is imported only for an ``output_type`` (or a Pydantic model passed as
``json_schema``); every other constraint works without it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

from halter.errors import GrammarError, MissingDependencyError, SchemaError

if TYPE_CHECKING:
    from halter.grammar import Grammar
    from halter.grammar.compiled import CompiledGrammar
    from halter.vocab import Vocabulary

__all__ = ["KINDS", "Constraint", "JsonSchemaLike", "MissingDependencyError", "Resolved", "pick", "resolve",
           "json_value_parser"]

KINDS = ("grammar", "json_schema", "regex", "output_type", "response_format")

JsonSchemaLike = Union[Mapping[str, Any], bool, str, type]
"""A JSON Schema as a dict, a bool, JSON text, or a Pydantic model class."""


def _text(text: str) -> str:
    return text


@dataclass(frozen=True)
class Constraint:
    """A constraint compiled for one vocabulary: its grammar (``None``: unconstrained; or a token
    matcher given as is) and the parser of accepted text into a value."""

    compiled: Any                      # CompiledGrammar, a TokenMatcher, or None
    parse: Callable[[str], Any] = _text

    def matches(self, text: str) -> bool:
        """Whether ``text`` is a whole match of the grammar (always True when unconstrained)."""
        if self.compiled is None:
            return True
        grammar = getattr(self.compiled, "grammar", None) or self.compiled.compiled.grammar
        try:
            return bool(grammar.matches(text))
        except GrammarError:                       # token-reference grammars match tokens, not text
            return False


@dataclass(frozen=True)
class Resolved:
    """A resolved constraint: its grammar (``None``: unconstrained), or the already compiled
    grammar the caller passed, and the parser of accepted text."""

    grammar: "Grammar | None"
    parse: Callable[[str], Any] = _text
    compiled: "CompiledGrammar | None" = None      # a CompiledGrammar given as is

    def constraint(self, vocab: "Vocabulary") -> Constraint:
        """The ``Constraint`` compiled for ``vocab``."""
        return Constraint(self.compile(vocab), self.parse)

    def compile(self, vocab: "Vocabulary") -> "CompiledGrammar | None":
        """The ``CompiledGrammar`` for ``vocab`` (``None`` when unconstrained)."""
        if self.compiled is not None:
            if self.compiled.vocab_size != vocab.size:
                raise GrammarError(f"the grammar was compiled for a vocabulary of {self.compiled.vocab_size} "
                                   f"tokens; this model's has {vocab.size}")
            return self.compiled
        return None if self.grammar is None else self.grammar.compile(vocab)


def pick(grammar: Any = None, json_schema: Any = None, regex: Any = None, output_type: Any = None,
         response_format: Any = None) -> tuple[str, Any] | None:
    """``(kind, spec)`` of the one constraint given, ``None`` for none; ``TypeError`` for several."""
    given = [(n, v) for n, v in zip(KINDS, (grammar, json_schema, regex, output_type, response_format))
             if v is not None]
    if len(given) > 1:
        raise TypeError(f"pass at most one of {', '.join(KINDS)}; got {given[0][0]} and {given[1][0]}")
    return given[0] if given else None


def is_pydantic_model(obj: Any) -> bool:
    """True for a Pydantic model class, without importing Pydantic (no model exists unless it is loaded)."""
    pyd = sys.modules.get("pydantic")
    return pyd is not None and isinstance(obj, type) and issubclass(obj, pyd.BaseModel)


def normalize(kind: str, spec: Any) -> tuple[str, Any]:
    """The constraint after unwrapping envelopes and checking types: ``(kind, spec)``, where a
    ``response_format`` became a ``json_schema`` (or ``("none", None)`` for ``{"type": "text"}``),
    a Pydantic model passed as ``json_schema`` an ``output_type``, and a schema a private copy."""
    if kind == "response_format":
        spec = _response_format_schema(spec)
        if spec is None:
            return "none", None
        if not isinstance(spec, (Mapping, bool)):          # data from a request, not a Python call
            raise SchemaError(f"response_format's schema must be a JSON object or a boolean, not "
                              f"{type(spec).__name__}")
        kind = "json_schema"
    if kind == "json_schema" and is_pydantic_model(spec):
        kind = "output_type"
    if kind == "json_schema":
        spec = load_schema(spec)
    elif kind == "regex" and not isinstance(spec, str):
        raise TypeError(f"regex must be a str, not {type(spec).__name__}")
    elif kind == "grammar" and not isinstance(spec, str) and not hasattr(spec, "compile") \
            and not hasattr(spec, "matcher"):
        raise TypeError(f"grammar must be GBNF text, a Grammar or a CompiledGrammar, not {type(spec).__name__}")
    return kind, spec


def resolve(grammar: Any = None, json_schema: Any = None, regex: Any = None, output_type: Any = None,
            response_format: Any = None, schema_options: Mapping[str, Any] | None = None) -> Resolved:
    """The ``Resolved`` grammar and parser of at most one constraint.

    ``schema_options`` go to ``Grammar.from_json_schema`` (``whitespace``, ``strict``,
    ``closed_objects``, ``prop_order``, ``target``) for the JSON constraints.
    """
    chosen = pick(grammar, json_schema, regex, output_type, response_format)
    if chosen is None:
        return Resolved(None)
    kind, spec = normalize(*chosen)
    return build(kind, spec, dict(schema_options or {}))


def build(kind: str, spec: Any, options: dict[str, Any], *, regex_options: Mapping[str, Any] | None = None) -> Resolved:
    """``Resolved`` of a normalized ``(kind, spec)`` (see ``normalize``). ``options`` go to the JSON
    constraints, ``regex_options`` to ``Grammar.from_regex``."""
    from halter.grammar import Grammar

    if kind == "none":
        return Resolved(None)
    if kind == "grammar":
        if isinstance(spec, str):
            return Resolved(Grammar.from_gbnf(spec))
        if hasattr(spec, "compile"):
            return Resolved(spec)
        return Resolved(spec.grammar, compiled=spec)           # a CompiledGrammar
    if kind == "regex":
        return Resolved(Grammar.from_regex(spec, **dict(regex_options or {})))
    if kind == "output_type":
        schema, parse = _type_parser(spec)
        return Resolved(Grammar.from_json_schema(schema, **{"closed_objects": True, "target": "pydantic",
                                                             **options}), parse)
    if kind == "json_schema":
        return Resolved(Grammar.from_json_schema(spec, **options), json_value_parser(spec))
    raise ValueError(f"unknown constraint kind {kind!r}")


# -- parsers ---------------------------------------------------------------------------------------

def json_value_parser(schema: Any) -> Callable[[str], Any]:
    """Parse JSON text and validate it with ``jsonschema`` (formats included: ``date-time``,
    ``uri``, ``email``, ``hostname``, ``ipv4``/``ipv6``, ``duration``, ...); ``SchemaError`` if invalid."""
    import jsonschema

    from halter.schemas.format_check import format_checker
    validator_cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_cls(schema, format_checker=format_checker(validator_cls))

    def parse(text: str) -> Any:
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as err:
            raise SchemaError(f"the output is not valid JSON: {err}") from None
        err = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if err is not None:
            ptr = "#" + "".join(f"/{p}" for p in err.absolute_path)
            raise SchemaError(f"the output does not validate against the schema: {err.message}",
                              ptr, err.validator)
        return value
    return parse


def _type_parser(tp: Any) -> tuple[dict, Callable[[str], Any]]:
    """(JSON Schema, validating parser) of a Pydantic model class or a Python type."""
    try:
        import pydantic
    except ImportError:
        raise MissingDependencyError(f"output_type={tp!r} needs pydantic (pip install 'halter[pydantic]'); "
                                     "json_schema=, regex= and grammar= work without it") from None

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


# -- inputs ----------------------------------------------------------------------------------------

def _response_format_schema(rf: Any) -> Any:
    if not isinstance(rf, Mapping) or rf.get("type") not in ("text", "json_object", "json_schema"):
        raise SchemaError(f"response_format type must be one of 'text', 'json_object', 'json_schema'; got {rf!r}")
    if rf["type"] == "text":
        return None
    if rf["type"] == "json_object":
        return rf.get("schema", {"type": "object"})
    envelope = rf.get("json_schema")
    if not isinstance(envelope, Mapping) or "schema" not in envelope:
        raise SchemaError("response_format {'type': 'json_schema'} needs {'json_schema': {'schema': {...}}}")
    return envelope["schema"]


def load_schema(schema: Any) -> Any:
    """A private deep copy of a schema given as dict/bool or JSON text."""
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"json_schema is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
        except RecursionError:
            raise SchemaError("json_schema is nested too deeply to read") from None
    if isinstance(schema, (bool, Mapping)):
        try:
            return json.loads(json.dumps(schema))
        except (TypeError, ValueError) as e:
            raise SchemaError(f"json_schema is not JSON data: {e}") from None
        except RecursionError:
            raise SchemaError("json_schema is nested too deeply to read") from None
    raise TypeError(f"json_schema must be a dict, a bool, JSON text or a Pydantic model class, not {type(schema).__name__}")
