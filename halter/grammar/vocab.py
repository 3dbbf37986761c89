"""The old import path of ``Vocabulary``, kept for code written against it: use ``halter.Vocabulary``
(or ``halter.vocab``) instead."""
import warnings

from halter.vocab.vocabulary import *  # noqa: F401,F403
from halter.vocab.vocabulary import Vocabulary, __all__  # noqa: F401

warnings.warn("halter.grammar.vocab moved to halter.vocab: import Vocabulary from halter (or halter.vocab)",
              DeprecationWarning, stacklevel=2)
