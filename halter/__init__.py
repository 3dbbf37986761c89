"""halter: make a language model's output obey a grammar (GBNF, JSON Schema, regex, Pydantic)."""
from halter.errors import (GrammarError, HalterError, IncompleteOutputError, ModelLoadError,
                           NoValidTokenError, SchemaError, UnsupportedSchemaError)

from halter.grammar import Grammar, GrammarMatcher
from halter.grammar.compiled import CompiledGrammar
from halter.grammar.token_matcher import TokenMatcher
from halter.grammar.vocab import Vocabulary

__version__ = "0.1.0"

__all__ = [
    "GrammarError", "HalterError", "IncompleteOutputError", "ModelLoadError", "NoValidTokenError",
    "SchemaError", "UnsupportedSchemaError", "__version__",
    "Grammar", "GrammarMatcher", "CompiledGrammar", "TokenMatcher", "Vocabulary",
]
