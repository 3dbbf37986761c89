"""GBNF grammars: parsing, the pushdown automaton, the character matcher, and the token side."""
from halter.grammar.grammar import Grammar
from halter.grammar.text_matcher import TextMatcher

__all__ = ["Grammar", "TextMatcher", "CompiledGrammar", "TokenMatcher", "Vocabulary"]


def deprecated_name(name: str):
    """The objects still importable under an old name, with a ``DeprecationWarning``; None for others."""
    if name == "GrammarMatcher":
        import warnings
        warnings.warn("GrammarMatcher is the old name of halter's character matcher: use TextMatcher "
                      "(grammar.matcher()); the token matcher, what XGrammar calls GrammarMatcher, is "
                      "TokenMatcher (compiled.matcher())", DeprecationWarning, stacklevel=3)
        return TextMatcher
    return None


def __getattr__(name: str):
    old = deprecated_name(name)
    if old is not None:
        return old
    if name == "CompiledGrammar":
        from halter.grammar.compiled import CompiledGrammar
        return CompiledGrammar
    if name == "TokenMatcher":
        from halter.grammar.token_matcher import TokenMatcher
        return TokenMatcher
    if name == "Vocabulary":
        from halter.vocab.vocabulary import Vocabulary
        return Vocabulary
    raise AttributeError(name)
