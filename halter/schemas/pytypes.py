"""Python types and Pydantic models -> JSON Schema (then GBNF through ``json_schema_to_gbnf``)."""
from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from typing import Any

from halter.errors import SchemaError

_PRIMITIVES = {int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"},
               str: {"type": "string"}, type(None): {"type": "null"}}


def pydantic_to_json_schema(model_cls: Any) -> dict:
    """The JSON Schema of a Pydantic (v2) model class, as ``model_json_schema()`` gives it."""
    return require_model(model_cls).model_json_schema()


def require_model(model_cls: Any) -> Any:
    """``model_cls`` if it is a Pydantic model class; ImportError without pydantic, else TypeError."""
    try:
        import pydantic
    except ImportError:
        raise ImportError("Pydantic models need pydantic: pip install 'pydantic>=2'") from None
    if not (isinstance(model_cls, type) and issubclass(model_cls, pydantic.BaseModel)):
        raise TypeError(f"expected a pydantic.BaseModel subclass, got {model_cls!r}")
    return model_cls


def pydantic_grammar_schema(tp: Any) -> dict:
    """The JSON Schema halter builds the grammar of a Pydantic model class (or any type Pydantic
    handles) from: Pydantic's own, with what it loses kept as halter's formats, which
    ``target="pydantic"`` reads: URLs limited to http/https (``HttpUrl``) as ``x-halter-http-url``
    or ``x-halter-https-url``, datetimes and times with or without an offset (plain ``datetime``,
    ``time``) as ``x-halter-date-time``/``x-halter-time`` and without one (``NaiveDatetime``) as
    ``x-halter-naive-date-time``, ``condecimal`` limits exactly and ``ByteSize``'s units. ``tp``
    may also be a ``pydantic.TypeAdapter`` already made. Raises what ``pydantic.TypeAdapter``
    raises for other types."""
    import pydantic

    gen = _grammar_schema_generator()
    if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
        return tp.model_json_schema(schema_generator=gen)
    adapter = tp if isinstance(tp, pydantic.TypeAdapter) else pydantic.TypeAdapter(tp)
    return adapter.json_schema(schema_generator=gen)


@functools.cache
def _grammar_schema_generator() -> type:
    import pydantic
    from pydantic.json_schema import GenerateJsonSchema

    class GrammarJsonSchema(GenerateJsonSchema):
        def url_schema(self, schema: Any) -> dict:
            out = super().url_schema(schema)
            schemes = {s.lower() for s in schema.get("allowed_schemes") or ()}
            if schemes == {"http", "https"} or schemes == {"https"}:
                out["format"] = "x-halter-http-url" if "http" in schemes else "x-halter-https-url"
            return out

        def decimal_schema(self, schema: Any) -> dict:
            return _exact_decimal(schema, super().decimal_schema(schema))

        def function_after_schema(self, schema: Any) -> dict:
            validator = getattr(schema.get("function", {}).get("function"), "__self__", None)
            if validator is pydantic.ByteSize:
                return _byte_size_schema()
            return super().function_after_schema(schema)

        def datetime_schema(self, schema: Any) -> dict:
            out = super().datetime_schema(schema)
            out["format"] = _TZ_FORMATS["date-time"].get(schema.get("tz_constraint"), out["format"])
            return out

        def time_schema(self, schema: Any) -> dict:
            out = super().time_schema(schema)
            out["format"] = _TZ_FORMATS["time"].get(schema.get("tz_constraint"), out["format"])
            return out
    return GrammarJsonSchema


_TZ_FORMATS = {
    "date-time": {None: "x-halter-date-time", "naive": "x-halter-naive-date-time"},
    "time": {None: "x-halter-time", "naive": "x-halter-naive-time"},
}
"""Per format, Pydantic's ``tz_constraint`` -> halter's format: with none (a plain ``datetime`` or
``time``), an offset may be written or not, as Pydantic parses and ``datetime.now()`` dumps; aware
ones keep the JSON Schema format, which needs an offset (so does a fixed offset, which only a custom
core schema asks for: which offset is not enforced)."""


def _byte_size_schema() -> dict:
    """``ByteSize``: a whole number of bytes, or a number (15 digits at most either side of the
    point, so the float it becomes stays exact enough) and one of its units in any case. Its own
    schema's pattern is anchored at the start only, and any word is taken as the unit."""
    import pydantic

    units = sorted(pydantic.ByteSize.byte_sizes, key=len, reverse=True)
    unit = "|".join("".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in u) for u in units)
    pattern = rf"^ ?(?:[0-9]{{1,15}}|[0-9]{{0,15}}\.[0-9]{{1,15}}) ?(?:{unit})?$"
    return {"anyOf": [{"type": "string", "pattern": pattern}, {"type": "integer", "minimum": 0}]}


def _exact_decimal(core: Any, out: dict) -> dict:
    """Pydantic's ``Decimal`` schema (``anyOf`` number, string with a lookahead pattern) made exact.

    ``max_digits``/``decimal_places`` go into the number branch as bounds and ``multipleOf``
    (Pydantic counts digits after dropping trailing zeros, so they say the same); the string
    branch gets a pattern without lookahead: digits before an optional point (``.5`` is left
    out), no more than the limits allow, and without limits an exponent (``"1E+5"``, as Pydantic
    dumps ``Decimal(10**5)`` written so; its own pattern has none, but it parses them). With bounds, which no pattern can check, the string
    branch goes. ``max_digits`` alone keeps to whole numbers.
    """
    branches = out.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and branches[0].get("type") == "number"):
        return out
    number, string = dict(branches[0]), dict(branches[1])
    places, digits = core.get("decimal_places"), core.get("max_digits")
    if digits is not None and places is None:
        places = 0
    limits: dict[str, Any] = {}
    if places is not None:
        limits["multipleOf"] = 1 if places == 0 else float(f"1e-{places}")
    if digits is not None:
        limits["exclusiveMaximum"], limits["exclusiveMinimum"] = 10 ** (digits - places), -10 ** (digits - places)
    if limits:       # beside Pydantic's own bounds and multipleOf, which it may have written already
        number = {**number, **limits} if not limits.keys() & number.keys() else {"allOf": [number, limits]}
    if any(k in core for k in ("gt", "ge", "lt", "le", "multiple_of")):
        return number
    whole = r"\d+" if digits is None else rf"\d{{1,{max(digits - places, 1)}}}"
    fraction = "" if places == 0 else r"(?:\.\d*)?" if places is None else rf"(?:\.\d{{0,{places}}}0*)?"
    # no limits: exponents too, as Pydantic dumps Decimal("1E+5") (up to 15 digits; it refuses 19)
    exponent = r"(?:[Ee][+-]?\d{1,15})?" if places is None else ""
    string["pattern"] = rf"^[+-]?0*{whole}{fraction}{exponent}$"
    return {**out, "anyOf": [number, string]}


def type_to_json_schema(tp: Any) -> dict:
    """A JSON Schema for the JSON form of a Python type.

    Supports ``int``, ``float``, ``bool``, ``str``, ``None``, ``list[T]``, ``set[T]``,
    ``dict[str, T]``, ``tuple[A, B]``/``tuple[T, ...]``, ``Literal[...]``, ``Enum`` subclasses,
    ``Optional``/``Union``, dataclasses, ``TypedDict`` and Pydantic models, and (with pydantic
    installed) any other type Pydantic has a schema for (``datetime``, ``UUID``, ``Decimal``...).
    Named types (dataclasses, TypedDicts, enums) go to ``$defs`` so recursive types work.
    """
    defs: dict[str, Any] = {}
    root = _convert(tp, defs, set())
    if defs:
        root = {**root, "$defs": defs}
    return root


def _convert(tp: Any, defs: dict, active: set) -> dict:
    if tp in _PRIMITIVES:
        return dict(_PRIMITIVES[tp])
    if tp is Any or tp is object:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:       # constraints (conint, condecimal, Field(...)) are Pydantic's to read
        schema = _pydantic_schema(tp)
        return _convert(args[0], defs, active) if schema is None else _with_defs(schema, defs)
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_convert(a, defs, active) for a in args]}
    if origin in (list, set, frozenset, typing.Sequence if hasattr(typing, "Sequence") else list):
        return {"type": "array", "items": _convert(args[0], defs, active) if args else {}}
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _convert(args[0], defs, active)}
        if args == ((),):
            return {"type": "array", "maxItems": 0}
        items = [_convert(a, defs, active) for a in args]
        return {"type": "array", "prefixItems": items, "items": False, "minItems": len(items)}
    if origin is dict:
        if args and args[0] is not str:
            raise SchemaError(f"JSON object keys are strings; {tp!r} has {args[0]!r} keys", "#")
        return {"type": "object", "additionalProperties": _convert(args[1], defs, active) if args else {}}
    if tp in (list, set, tuple):
        return {"type": "array"}
    if tp is dict:
        return {"type": "object"}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    try:
        import pydantic
        if isinstance(tp, type) and issubclass(tp, pydantic.BaseModel):
            return _with_defs(pydantic_grammar_schema(tp), defs)
    except ImportError:
        pass
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        name = tp.__name__
        ref = {"$ref": f"#/$defs/{name}"}
        if name in defs or name in active:
            return ref
        active.add(name)
        hints = typing.get_type_hints(tp, include_extras=False)
        props = {k: _convert(v, defs, active) for k, v in hints.items()}
        if dataclasses.is_dataclass(tp):
            required = [f.name for f in dataclasses.fields(tp)
                        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        else:
            required = sorted(getattr(tp, "__required_keys__", hints.keys()), key=list(hints).index)
        defs[name] = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        active.discard(name)
        return ref
    schema = _pydantic_schema(tp)      # datetime, UUID, Decimal, IP addresses...: Pydantic knows them
    if schema is None:
        raise SchemaError(f"no JSON Schema for the Python type {tp!r}", "#")
    return _with_defs(schema, defs)


def _with_defs(schema: dict, defs: dict) -> dict:
    """``schema`` with its ``$defs`` moved into ``defs``, the root's (its ``#/$defs/...`` refs
    mean the root's once it is nested). A name taken by a different definition (two models
    both called ``Item``) is renamed, and the refs with it."""
    own = schema.pop("$defs", {})
    renamed = {}
    for name, sub in own.items():
        new, k = name, 1
        while new in defs and defs[new] != sub:
            k += 1
            new = f"{name}_{k}"
        renamed[name] = new
    if any(a != b for a, b in renamed.items()):
        schema, own = _renamed_refs(schema, renamed), {n: _renamed_refs(d, renamed) for n, d in own.items()}
    for name, sub in own.items():
        defs.setdefault(renamed[name], sub)
    return schema


def _renamed_refs(x: Any, renamed: dict[str, str]) -> Any:
    if isinstance(x, dict):
        out = {k: _renamed_refs(v, renamed) for k, v in x.items()}
        ref = x.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in renamed:
            out["$ref"] = "#/$defs/" + renamed[ref[8:]]
        return out
    if isinstance(x, list):
        return [_renamed_refs(v, renamed) for v in x]
    return x


def _pydantic_schema(tp: Any) -> dict | None:
    """Pydantic's JSON Schema for ``tp`` (its ``$defs`` included), or None without pydantic or one."""
    try:
        import pydantic
    except ImportError:
        return None
    try:
        return pydantic_grammar_schema(tp)
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError):
        return None


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__") and hasattr(tp, "__total__")
