"""Parsed grammars kept in halter's cache: rules and automata under a key (a grammar's source text, or a
key a front end such as the JSON Schema converter makes), so a second process skips the build.

``load`` returns the ``Grammar`` stored under a key with the extra data stored beside it (warnings to
raise again, say); ``store`` writes one. A missing, corrupt or foreign file reads as a miss.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from halter import cache
from halter.grammar.automaton import AUTOMATON_VERSION

if TYPE_CHECKING:
    from halter.grammar.grammar import Grammar
    from halter.grammar.text_check import TextCheck

SMALL = 2000
"""Source texts shorter than this are not stored unless forced: they build faster than a file is read."""


def _path(key: str, root: str) -> Path:
    digest = hashlib.sha256(f"{AUTOMATON_VERSION}\0{root}\0{key}".encode("utf-8", "surrogatepass"))
    return cache.path("grammars", digest.hexdigest()[:32], ".pickle")


def load(key: str, root: str = "root", *, cls: "type[Grammar] | None" = None,
         text_check: Callable[[Any], "TextCheck | None"] | None = None) -> "tuple[Grammar, Any] | None":
    """The grammar stored under ``key`` (an instance of ``cls``, ``Grammar`` by default) and the extra
    data stored with it, or None. ``text_check(extra)`` gives the check to run beside the loaded
    grammar (none when omitted)."""
    from halter.grammar.grammar import Grammar
    stored = cache.load_pickle(_path(key, root))
    if not (isinstance(stored, tuple) and len(stored) == 3):
        return None
    rules, automata, extra = stored
    check = text_check(extra) if text_check is not None else None
    return (cls or Grammar)._restored(rules, root, automata, check), extra


def store(key: str, grammar: "Grammar", extra: Any = None, *, force: bool = False) -> None:
    """Keep ``grammar`` (its rules and automata) and ``extra`` under ``key``; a key shorter than
    ``SMALL`` characters is skipped unless ``force``."""
    if len(key) < SMALL and not force:
        return
    cache.store_pickle(_path(key, grammar.root), (grammar.rules, grammar.automata, extra))
