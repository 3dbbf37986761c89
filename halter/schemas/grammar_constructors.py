"""The bodies of ``Grammar.from_json_schema``, ``from_regex``, ``from_pydantic`` and ``from_type``.

The grammar core knows no JSON Schema: this module registers these builders with it
(``halter.grammar.grammar.register_front_end``) when ``halter.schemas`` is imported, which
``import halter`` does. Each takes the class it is called on (``Grammar`` or a subclass).
"""
from __future__ import annotations

import copy
import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

from halter import gc_pause
from halter.errors import SchemaError
from halter.grammar import store
from halter.errors import NeverMatches, RuleTooComplex
from halter.grammar.grammar import Grammar, register_front_end
from halter.limits import deep_call


def from_json_schema(cls: type[Grammar], schema: Any, **options: Any) -> Grammar:
    with gc_pause.paused():           # (the build keeps what it allocates: see gc_pause.py)
        return deep_call(_from_json_schema, cls, schema, where="the JSON Schema", **options)


def _from_json_schema(cls: type[Grammar], schema: Any, **options: Any) -> Grammar:
    from halter.schemas.converter import _draft_of
    from halter.schemas.json_schema import schema_to_grammar_parts
    from halter.schemas.unique_check import UniqueItemsCheck
    try:
        loaded = schema if not isinstance(schema, str) else json.loads(schema)
        key = "json-schema\0" + json.dumps([loaded, options], sort_keys=True) + "\0" + converter_version()
    except (TypeError, ValueError):
        key = None

    def unique_check(extra: Any) -> UniqueItemsCheck | None:
        return UniqueItemsCheck(copy.deepcopy(loaded), _draft_of(loaded)) if extra[1] else None

    cached = store.load(key, cls=cls, text_check=unique_check) if key is not None else None
    if cached is not None:
        grammar, (caught, _) = cached
        for message, category in caught:
            warnings.warn(message, category, stacklevel=2)
        return grammar
    for split in (False, True):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rules, check = schema_to_grammar_parts(schema, split_patterns=split, **options)
        try:
            grammar = cls(rules, "root", text_check=check)
            break
        except NeverMatches:        # e.g. a required property whose schema is the object itself
            raise SchemaError("the schema accepts no value at all (no finite JSON text fits it)", "#") from None
        except RuleTooComplex:      # a pattern's automaton: spell the patterns with rules
            if split:
                raise
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    if key is not None:
        store.store(key, grammar, ([(str(w.message), w.category) for w in caught], check is not None), force=True)
    return grammar


def from_regex(cls: type[Grammar], pattern: str, **options: Any) -> Grammar:
    from halter.schemas.regex import regex_to_gbnf
    try:
        try:
            return cls.from_gbnf(regex_to_gbnf(pattern, **options))
        except RuleTooComplex:
            if options.get("split_groups"):
                raise
        return cls.from_gbnf(regex_to_gbnf(pattern, **{**options, "split_groups": True}))
    except NeverMatches:
        raise NeverMatches(f"the regex {pattern!r} matches no string") from None


def from_pydantic(cls: type[Grammar], model: type, **options: Any) -> Grammar:
    from halter.schemas.pytypes import pydantic_grammar_schema, require_model
    schema = pydantic_grammar_schema(require_model(model))
    return cls.from_json_schema(schema, **{"target": "pydantic", "closed_objects": True, **options})


def from_type(cls: type[Grammar], tp: Any, **options: Any) -> Grammar:
    from halter.schemas.pytypes import type_to_json_schema
    return cls.from_json_schema(type_to_json_schema(tp), **{"target": "pydantic", "closed_objects": True, **options})


_CONVERTER_VERSION: str | None = None


def converter_version() -> str:
    """A hash of the schema converter's source, so its cached output is dropped when it changes."""
    global _CONVERTER_VERSION
    if _CONVERTER_VERSION is None:
        h = hashlib.sha256()
        for path in sorted(Path(__file__).parent.glob("*.py")):
            h.update(path.read_bytes())
        _CONVERTER_VERSION = h.hexdigest()[:16]
    return _CONVERTER_VERSION


register_front_end("json_schema", from_json_schema)
register_front_end("regex", from_regex)
register_front_end("pydantic", from_pydantic)
register_front_end("type", from_type)
