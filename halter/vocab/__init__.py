"""The vocabulary: every token id's exact output bytes, the table between a model's token ids and a
grammar's bytes. ``Vocabulary.from_gguf``, ``from_token_bytes``, ``from_hf_tokenizer``."""
from halter.vocab.vocabulary import Vocabulary

__all__ = ["Vocabulary"]
