"""Python types and Pydantic models -> JSON Schema (then GBNF through ``json_schema_to_gbnf``)."""
from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any

from halter.errors import SchemaError

_PRIMITIVES = {int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"},
               str: {"type": "string"}, type(None): {"type": "null"}}


def pydantic_to_json_schema(model_cls: Any) -> dict:
    """The JSON Schema of a Pydantic (v2) model class, as ``model_json_schema()`` gives it."""
    try:
        import pydantic
    except ImportError:
        raise ImportError("pydantic_to_json_schema needs pydantic: pip install 'pydantic>=2'") from None
    if not (isinstance(model_cls, type) and issubclass(model_cls, pydantic.BaseModel)):
        raise TypeError(f"expected a pydantic.BaseModel subclass, got {model_cls!r}")
    return model_cls.model_json_schema()


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
    if origin is typing.Annotated:
        return _convert(args[0], defs, active)
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
            return tp.model_json_schema()
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
    for name, sub in schema.pop("$defs", {}).items():
        defs.setdefault(name, sub)
    return schema


def _pydantic_schema(tp: Any) -> dict | None:
    """Pydantic's JSON Schema for ``tp`` (its ``$defs`` included), or None without pydantic or one."""
    try:
        import pydantic
    except ImportError:
        return None
    try:
        return pydantic.TypeAdapter(tp).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError):
        return None


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__annotations__") and hasattr(tp, "__total__")
