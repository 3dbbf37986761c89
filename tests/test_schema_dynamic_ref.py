"""``$dynamicRef``/``$dynamicAnchor`` (and draft 2019's ``$recursiveRef``) resolved at conversion time.

Each schema compiles in strict mode; hand-written instances carry their verdict, which
python-jsonschema must confirm and the grammar must give.
"""
from __future__ import annotations


import jsonschema
import pytest

from tests.schema_checks import assert_grammar_agrees

D2020 = "https://json-schema.org/draft/2020-12/schema"

# A generic tree whose nodes are "whatever $dynamicAnchor node means where the tree is used".
TREE = {"$id": "https://example.com/tree", "$dynamicAnchor": "node", "type": "object",
        "properties": {"data": True, "children": {"type": "array", "items": {"$dynamicRef": "#node"}}}}
STRICT_TREE = {"$schema": D2020, "$id": "https://example.com/strict-tree", "$dynamicAnchor": "node",
               "$ref": "tree", "unevaluatedProperties": False, "$defs": {"tree": TREE}}

# A generic list whose item type each user of it chooses.
LISTS = {"$schema": D2020, "$id": "https://example.com/lists", "type": "object",
         "properties": {"numbers": {"$ref": "numberList"}, "strings": {"$ref": "stringList"},
                        "anything": {"$ref": "genericList"}},
         "$defs": {"genericList": {"$id": "genericList", "type": "array", "items": {"$dynamicRef": "#itemType"},
                                   "$defs": {"default": {"$dynamicAnchor": "itemType"}}},
                   "numberList": {"$id": "numberList", "$ref": "genericList",
                                  "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "number"}}},
                   "stringList": {"$id": "stringList", "$ref": "genericList",
                                  "$defs": {"itemType": {"$dynamicAnchor": "itemType", "type": "string"}}}}}

CASES = [
    # the overriding anchor applies at every depth of the tree
    (STRICT_TREE, [({"data": 1, "children": [{"data": 2, "children": []}]}, True),
                   ({"children": [{"daat": 1}]}, False), ({"daat": 1}, False), ({}, True),
                   ({"children": [{"children": [{"data": [1], "extra": 0}]}]}, False)]),
    # the same tree used directly still allows extra keys: a second resolution, a second rule
    ({"$schema": D2020, "$id": "https://example.com/both", "type": "object",
      "properties": {"strict": {"$ref": "strict-tree"}, "loose": {"$ref": "tree"}},
      "$defs": {"strict": STRICT_TREE, "tree": TREE}},
     [({"loose": {"children": [{"extra": 1}]}}, True), ({"strict": {"children": [{"extra": 1}]}}, False),
      ({"strict": {"children": [{"data": 1}]}, "loose": {"x": {}}}, True)]),
    (LISTS, [({"numbers": [1, 2.5], "strings": ["a"]}, True), ({"numbers": ["a"]}, False),
             ({"strings": [1]}, False), ({"anything": [1, "a", None]}, True)]),
    # without the bookend (no matching $dynamicAnchor where it first lands) it is a plain $ref
    ({"$schema": D2020, "$id": "https://example.com/no-bookend", "$dynamicAnchor": "n", "type": "object",
      "properties": {"k": {"$ref": "inner"}},
      "$defs": {"inner": {"$id": "inner", "properties": {"v": {"$dynamicRef": "#n"}},
                          "$defs": {"n": {"$anchor": "n", "type": "integer"}}}}},
     [({"k": {"v": 1}}, True), ({"k": {"v": {}}}, False)]),
    # $dynamicRef to a JSON pointer behaves like $ref
    ({"$schema": D2020, "properties": {"a": {"$dynamicRef": "#/$defs/s"}}, "$defs": {"s": {"type": "string"}}},
     [({"a": "x"}, True), ({"a": 1}, False)]),
]


def _check(schema: dict, instances: list, validator_class=jsonschema.Draft202012Validator) -> None:
    assert_grammar_agrees(schema, instances, validator_class, strict=True)


@pytest.mark.parametrize("schema,instances", CASES, ids=range(len(CASES)))
def test_dynamic_ref_resolves_in_the_dynamic_scope(schema, instances):
    _check(schema, instances)


def test_recursive_ref_extends_a_tree_in_draft_2019():
    schema = {"$schema": "https://json-schema.org/draft/2019-09/schema", "$id": "https://example.com/strict",
              "$recursiveAnchor": True, "$ref": "tree", "unevaluatedProperties": False,
              "$defs": {"tree": {"$id": "tree", "$recursiveAnchor": True, "type": "object",
                                 "properties": {"data": True,
                                                "children": {"type": "array", "items": {"$recursiveRef": "#"}}}}}}
    _check(schema, [({"children": [{"data": 1}]}, True), ({"children": [{"daat": 1}]}, False)],
           jsonschema.Draft201909Validator)


def test_refs_inside_a_target_merged_with_siblings_resolve_against_the_target():
    # "$ref": "b" inside sub/a means https://example.com/sub/b, even once merged into the root
    schema = {"$schema": D2020, "$id": "https://example.com/root", "$ref": "sub/a",
              "properties": {"x": {"type": "integer"}},
              "$defs": {"a": {"$id": "sub/a", "properties": {"y": {"$ref": "b"}}},
                        "b": {"$id": "sub/b", "type": "string"}}}
    _check(schema, [({"x": 1, "y": "s"}, True), ({"y": 1}, False), ({"x": "s"}, False)])


def test_a_ref_target_with_a_relative_id_is_not_rebased_twice():
    schema = {"$schema": D2020, "$id": "https://example.com/root", "properties": {"p": {"$ref": "sub/a"}},
              "$defs": {"a": {"$id": "sub/a", "properties": {"y": {"$ref": "b"}}},
                        "b": {"$id": "sub/b", "type": "string"}}}
    _check(schema, [({"p": {"y": "s"}}, True), ({"p": {"y": 1}}, False)])
