"""GBNF grammars: parsing, the pushdown automaton, the character matcher, and the token side."""
