"""halter: make a language model's output obey a grammar (GBNF, JSON Schema, regex, Pydantic).

Grammar side (no torch needed): ``Grammar``, ``TextMatcher`` (characters), ``Vocabulary``,
``CompiledGrammar``, ``TokenMatcher`` (tokens), ``allocate_bitmask``, ``apply_bitmask``. Generation side (imports torch on first use): ``Model``,
``generate``, ``generate_batch``, ``SamplingParams``, ``Completion``, ``Scheduler`` (continuous
batching, what ``halter serve`` runs on).
"""
from typing import Any

from halter import cache, limits, schemas  # schemas gives Grammar its from_json_schema, from_regex, ...
from halter.errors import (FetchError, GrammarError, GrammarWarning, HalterError, IncompleteOutputError, LimitError, ModelLoadError,
                           NoValidTokenError, SchemaError, UnsupportedSchemaError)
from halter.grammar import Grammar, TextMatcher
from halter.grammar.bitmask import allocate_bitmask, apply_bitmask, apply_token_bitmask_inplace
from halter.grammar.compiled import CompiledGrammar
from halter.grammar.token_matcher import TokenMatcher
from halter.vocab.vocabulary import Vocabulary

__version__ = "0.1.0"

_LAZY = {
    "Model": ("halter.engine.model", "Model"),
    "Tokenizer": ("halter.engine.tokenizer", "Tokenizer"),
    "generate": ("halter.api", "generate"),
    "generate_batch": ("halter.api", "generate_batch"),
    "Completion": ("halter.completion", "Completion"),
    "CompletionStream": ("halter.completion", "CompletionStream"),
    "SamplingParams": ("halter.sampling.params", "SamplingParams"),
    "CommonSampler": ("halter.sampling.common", "CommonSampler"),
    "pull": ("halter.fetch", "pull"),
    "Scheduler": ("halter.engine.scheduler", "Scheduler"),
}

__all__ = [
    "FetchError", "GrammarError", "GrammarWarning", "HalterError", "IncompleteOutputError", "LimitError", "ModelLoadError", "NoValidTokenError",
    "cache", "limits",
    "SchemaError", "UnsupportedSchemaError", "__version__",
    "Grammar", "TextMatcher", "CompiledGrammar", "TokenMatcher", "Vocabulary",
    "allocate_bitmask", "apply_bitmask", "apply_token_bitmask_inplace", *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    from halter.grammar import deprecated_name
    old = deprecated_name(name)
    if old is not None:
        return old
    raise AttributeError(f"module 'halter' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
