"""JSON Schema in, grammar out: the public entry points of the converter.

A schema arrives as a dict, a bool or JSON text; it is checked against its metaschema (a clear
``SchemaError`` with the pointer of the problem) and handed to ``Converter`` (converter.py), whose
rules come back as syntax trees (``schema_to_rules``), GBNF text (``json_schema_to_gbnf``) or, with
the ``uniqueItems`` check that runs beside them, as what ``Grammar.from_json_schema`` builds on
(``schema_to_grammar_parts``).
"""
from __future__ import annotations

import json
from typing import Any, Sequence


from halter.errors import SchemaError
from halter.grammar.ast import Expr
from halter.grammar.gbnf_format import format_grammar
from halter.limits import check, deep_call, nesting_of
from halter.schemas.converter import Converter, _draft_of
from halter.schemas.metaschema import check_document


def _meta_validate(schema: Any) -> None:
    check_document(schema)


def json_schema_to_gbnf(schema: dict | str | bool, *, whitespace: str = "flexible", strict: bool = False,
                        closed_objects: bool = False, prop_order: Sequence[str] | None = None,
                        target: str = "json-schema") -> str:
    """GBNF text (root rule ``root``) accepting the JSON texts valid under ``schema``.

    Parameters
    ----------
    schema : a JSON Schema as a dict/bool, or its JSON text. Not modified.
    whitespace : ``"flexible"`` (default; bounded whitespace that accepts ``json.dumps`` output
        with default separators or ``indent`` up to 64 columns) or ``"compact"`` (none at all).
    strict : ``False`` (default) drops keywords a grammar cannot enforce with a ``SchemaWarning``
        (overlapping ``oneOf`` becomes ``anyOf``), so the grammar accepts a superset and never
        rejects a valid instance; ``True`` raises ``UnsupportedSchemaError`` for them instead.
    closed_objects : forbid properties not listed in ``properties`` unless the schema says
        otherwise (llama.cpp's behaviour); the spec's default allows them.
    prop_order : known properties in this order (then schema order) instead of any order.
    target : ``"json-schema"`` (default) accepts what the JSON Schema spec and RFC 8259 allow;
        ``"pydantic"`` keeps to what Pydantic's ``model_validate_json`` takes (the default of
        ``Grammar.from_pydantic``/``from_type`` and of ``generate(output_type=...)``): no lone
        surrogate escapes in strings, integers without a zero fraction (``3.0`` fails a strict
        ``int``), numbers that do not overflow a double (``1e400`` fails ``Decimal``), dates and
        times that Python's ``datetime`` holds (years 0001-9999, no leap second), URLs the WHATWG
        parser takes, e-mail addresses ``email-validator`` takes, Pydantic's own formats
        (``ipvanyaddress``, ``ipv4network``, ``base64``, ...) enforced instead of read as
        annotations, and so is ``contentSchema`` under ``contentMediaType: application/json``
        (``Json[T]``). See docs/json_schema.md, "Pydantic models".

    Raises
    ------
    SchemaError : invalid schema (checked against its metaschema) or unresolvable ``$ref``.
    UnsupportedSchemaError : strict mode and a keyword a grammar cannot express.
    """
    return format_grammar(schema_to_rules(schema, whitespace=whitespace, strict=strict,
                                          closed_objects=closed_objects, prop_order=prop_order,
                                          target=target))


def schema_to_rules(schema: dict | str | bool, **options: Any) -> dict[str, Expr]:
    """Like ``json_schema_to_gbnf`` but returns the rules as syntax trees."""
    return deep_call(_schema_to_rules, schema, where="the JSON Schema", **options)


def _schema_to_rules(schema: dict | str | bool, **options: Any) -> dict[str, Expr]:
    schema = _loaded(schema)
    _meta_validate(schema)
    return Converter(schema, **options).convert()


def schema_to_grammar_parts(schema: dict | str | bool, *, split_patterns: bool = False,
                            **options: Any) -> tuple[dict[str, Expr], Any]:
    """The rules, and the ``UniqueItemsCheck`` to run beside them (None when none is needed).

    With the check, ``uniqueItems`` over open item sets is enforced (so strict mode accepts it)
    wherever ``check_is_exact`` shows the check always knows which arrays need it.
    ``split_patterns`` spells every ``pattern`` with rules of its own (pattern_rules.py), for a
    grammar whose automata grew too large otherwise.
    """
    return deep_call(_schema_to_grammar_parts, schema, split_patterns, where="the JSON Schema", **options)


def _schema_to_grammar_parts(schema: dict | str | bool, split_patterns: bool,
                             **options: Any) -> tuple[dict[str, Expr], Any]:
    from halter.schemas.instance_schemas import has_true_keyword
    from halter.schemas.unique_check import UniqueItemsCheck, check_is_exact
    schema = _loaded(schema)
    _meta_validate(schema)
    mode = None
    if has_true_keyword(schema, "uniqueItems"):
        mode = "exact" if check_is_exact(schema, _draft_of(schema)) else "partial"
    conv = Converter(schema, unique_checked=mode, **options)
    conv.split_patterns = split_patterns
    rules = conv.convert()
    return rules, (UniqueItemsCheck(conv.schema, conv.draft) if conv.needs_unique_check else None)


def _loaded(schema: Any) -> Any:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema is not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})", "#") from None
    check("nesting_depth", nesting_of(schema), where="#", what="JSON Schema nesting depth")
    return schema
