"""halter: make a language model's output obey a grammar (GBNF, JSON Schema, regex, Pydantic)."""
from halter.errors import (GrammarError, HalterError, IncompleteOutputError, ModelLoadError,
                           NoValidTokenError, SchemaError, UnsupportedSchemaError)

__version__ = "0.1.0"

__all__ = [
    "GrammarError", "HalterError", "IncompleteOutputError", "ModelLoadError", "NoValidTokenError",
    "SchemaError", "UnsupportedSchemaError", "__version__",
]
