"""Python types and Pydantic models -> JSON Schema -> grammar."""
from __future__ import annotations

import dataclasses
import enum
import json
from typing import Literal, Optional, TypedDict

import pytest

from halter.errors import SchemaError
from halter.grammar import Grammar
from halter.schemas import json_schema_to_gbnf, pydantic_to_json_schema, type_to_json_schema


def grammar_for(tp) -> Grammar:
    return Grammar.from_gbnf(json_schema_to_gbnf(type_to_json_schema(tp)))


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: Optional[str] = None


class Movie(TypedDict):
    title: str
    year: int


@dataclasses.dataclass
class Tree:
    value: int
    children: list["Tree"]


@pytest.mark.parametrize("tp,good,bad", [
    (int, ["3", "-10"], ["3.5", '"3"']),
    (list[str], ['["a", "b"]', "[]"], ['["a", 1]']),
    (dict[str, int], ['{"a": 1}'], ['{"a": "1"}']),
    (tuple[int, str], ['[1, "a"]'], ['[1]', '[1, "a", 2]']),
    (Literal["yes", "no"], ['"yes"'], ['"maybe"']),
    (Color, ['"red"'], ['"blue"']),
    (Optional[bool], ["true", "null"], ["1"]),
    (Point, ['{"x": 1, "y": 2.5}', '{"y": 1, "x": 2, "label": "p"}'], ['{"x": 1}', '{"x": 1, "y": 2, "z": 3}']),
    (Movie, ['{"title": "A", "year": 1999}'], ['{"title": "A"}']),
    (Tree, ['{"value": 1, "children": [{"value": 2, "children": []}]}'], ['{"value": 1, "children": [{}]}']),
])
def test_python_types(tp, good, bad):
    g = grammar_for(tp)
    for t in good:
        assert g.matches(t), t
    for t in bad:
        assert not g.matches(t), t


def test_unsupported_type_is_a_clear_error():
    with pytest.raises(SchemaError, match="keys"):
        type_to_json_schema(dict[int, str])
    class Opaque:
        pass
    with pytest.raises(SchemaError, match="no JSON Schema"):
        type_to_json_schema(Opaque)


def test_pydantic_model():
    pydantic = pytest.importorskip("pydantic")

    class User(pydantic.BaseModel):
        name: str
        age: int = pydantic.Field(ge=0, le=150)
        tags: list[str] = []

    g = Grammar.from_gbnf(json_schema_to_gbnf(pydantic_to_json_schema(User)))
    assert g.matches(User(name="a", age=3).model_dump_json())
    assert g.matches(json.dumps({"age": 30, "name": "b", "tags": ["x"]}))
    assert not g.matches(json.dumps({"name": "b", "age": 151}))
    assert not g.matches(json.dumps({"age": 3}))
    with pytest.raises(TypeError, match="BaseModel"):
        pydantic_to_json_schema(dict)


def _model_named_inner_with_a_string():
    pydantic = pytest.importorskip("pydantic")

    class Inner(pydantic.BaseModel):       # same name as another model's nested class, other fields
        y: str

    class Other(pydantic.BaseModel):
        inner: Inner
    return Other


def test_pydantic_models_nested_in_python_types_keep_their_definitions():
    # A model's schema refers to its nested models as #/$defs/...: nested in list[...] or tuple[...]
    # those must become the root's definitions ("points at nothing" before), renamed on a clash.
    pydantic = pytest.importorskip("pydantic")

    class Inner(pydantic.BaseModel):
        x: int

    class Outer(pydantic.BaseModel):
        inner: Inner
        kids: list["Outer"] = []

    g = Grammar.from_type(list[Outer])
    assert g.matches('[{"inner": {"x": 1}, "kids": [{"inner": {"x": 2}}]}]')
    assert not g.matches('[{"inner": {"x": "1"}}]')
    pair = Grammar.from_type(tuple[Outer, _model_named_inner_with_a_string()])
    assert pair.matches('[{"inner": {"x": 1}}, {"inner": {"y": "a"}}]')
    assert not pair.matches('[{"inner": {"x": 1}}, {"inner": {"x": 1}}]')
