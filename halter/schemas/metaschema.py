"""Checking a schema against its draft's metaschema, the root and every subschema ``$ref`` reaches.

The root document is checked once (``check_document``). A ``$ref`` can also point at a place no
keyword of the metaschema describes (``{"$ref": "#/x", "x": {...}}``), or at keywords the declared
draft does not define (``$defs`` under draft-07): such targets are checked on their own when
resolved (``check_subschema``), so a malformed subschema is a ``SchemaError`` with its pointer
instead of a crash deep in the converter.
"""
from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema import validators

from halter.errors import SchemaError

__all__ = ["check_document", "check_subschema", "validator_class"]

_BY_DRAFT = {"draft4": jsonschema.Draft4Validator, "draft6": jsonschema.Draft6Validator,
             "draft7": jsonschema.Draft7Validator, "draft2019": jsonschema.Draft201909Validator,
             "draft2020": jsonschema.Draft202012Validator}


def _escape(token: Any) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


def validator_class(schema: Any) -> type:
    """The jsonschema validator class of a root schema (2020-12 when ``$schema`` is absent)."""
    if isinstance(schema, dict) and "$schema" in schema and not isinstance(schema["$schema"], str):
        raise SchemaError(f"$schema must be a string (a metaschema URI), not {type(schema['$schema']).__name__}",
                          "#/$schema", "$schema")
    return validators.validator_for(schema, default=jsonschema.Draft202012Validator)


def _check(schema: Any, cls: type, pointer: str) -> None:
    # no format checker: patterns are ECMA-262 (``\p{L}`` is valid there, not in Python's re)
    if cls is jsonschema.Draft202012Validator:
        fast = _flat_2020_validator()
        if fast is not None and fast.is_valid(schema):
            return                 # (an invalid schema is checked again below, for the message)
    e = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    if e is not None:
        ptr = "#" + pointer + "".join("/" + _escape(p) for p in e.absolute_path)
        raise SchemaError(f"invalid JSON Schema: {e.message}", ptr, e.validator)


def check_document(schema: Any) -> None:
    """``SchemaError`` (with the pointer of the problem) unless ``schema`` is a valid schema of its draft."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}", "#")
    _check(schema, validator_class(schema), "")


def check_subschema(schema: Any, draft: str, pointer: str) -> None:
    """Check a subschema reached through ``$ref`` at ``pointer`` against the metaschema of ``draft``."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}",
                          "#" + pointer)
    _check(schema, _BY_DRAFT.get(draft, jsonschema.Draft202012Validator), pointer)


_FLAT: list[Any] = []


def _flat_2020_validator() -> Any:
    """A validator of the 2020-12 metaschema written as one document (None if it cannot be made).

    The 2020-12 metaschema is eight documents: the root ``allOf``s seven vocabulary metaschemas, and
    each subschema place says ``{"$dynamicRef": "#meta"}``, which jsonschema resolves through the
    dynamic scope at every subschema of the schema checked (three times the cost of draft-07's
    check). Checking a schema against the standard metaschema, every ``#meta`` is the root; so
    here the vocabularies are inlined into the root's ``allOf``, their ``$defs`` moved to the
    root's under prefixed names, and each ``$dynamicRef`` made a ``$ref`` to the root: the same
    schemas are valid (``tests/test_schema_convert.py`` compares the two on real schemas), checked
    in a third of the time. The full metaschema still words the error of an invalid schema.
    """
    if not _FLAT:
        try:
            _FLAT.append(jsonschema.Draft202012Validator(_flat_2020_metaschema()))
        except Exception:          # noqa: BLE001 - a jsonschema whose metaschemas look otherwise
            _FLAT.append(None)
    return _FLAT[0]


def _flat_2020_metaschema() -> dict:
    import copy

    from jsonschema_specifications import REGISTRY
    root = copy.deepcopy(jsonschema.Draft202012Validator.META_SCHEMA)
    base = "https://json-schema.org/draft/2020-12/"
    defs: dict[str, Any] = {}
    parts = []
    for ref in root.pop("allOf"):
        name = ref["$ref"].removeprefix("meta/")
        vocab = copy.deepcopy(REGISTRY.contents(base + ref["$ref"]))
        for key, body in vocab.pop("$defs", {}).items():
            defs[f"{name}-{key}"] = body
        parts.append((name, {k: v for k, v in vocab.items()
                             if k not in ("$schema", "$id", "$vocabulary", "$dynamicAnchor", "title")}))

    def rewrite(node: Any, name: str) -> Any:
        if isinstance(node, list):
            return [rewrite(x, name) for x in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k == "$dynamicRef":
                if v != "#meta":
                    raise ValueError(f"unexpected $dynamicRef {v!r}")
                out["$ref"] = "#"
            elif k == "$ref" and isinstance(v, str):
                doc, _, frag = v.partition("#")
                doc = doc.removeprefix("meta/") or name
                if not frag.startswith("/$defs/") or "/" in frag[len("/$defs/"):]:
                    raise ValueError(f"unexpected $ref {v!r}")
                out["$ref"] = f"#/$defs/{doc}-{frag[len('/$defs/'):]}"
            elif k in ("properties", "$defs", "patternProperties", "dependentSchemas"):
                out[k] = {pk: rewrite(pv, name) for pk, pv in v.items()}
            else:
                out[k] = rewrite(v, name)
        return out
    flat = {k: v for k, v in root.items() if k not in ("$vocabulary", "$dynamicAnchor", "title", "$comment")}
    flat["$id"] = "urn:halter:flat-2020-12-metaschema"
    flat["properties"] = {k: rewrite(v, "") for k, v in flat.get("properties", {}).items()}
    flat["allOf"] = [rewrite(body, name) for name, body in parts]
    flat["$defs"] = {k: rewrite(v, k.split("-")[0]) for k, v in defs.items()}
    return flat
