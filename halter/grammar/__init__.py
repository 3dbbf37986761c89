"""GBNF grammars: parsing, the pushdown automaton, the character matcher, and the token side."""
from halter.grammar.grammar import Grammar
from halter.grammar.matcher import GrammarMatcher

__all__ = ["Grammar", "GrammarMatcher", "CompiledGrammar", "TokenMatcher", "Vocabulary"]


def __getattr__(name: str):
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
