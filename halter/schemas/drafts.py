"""Keywords each JSON Schema draft does not have, which a schema of that draft may still hold.

A validator ignores a keyword its draft does not define (``dependentRequired`` under draft 7,
``const`` under draft 4, ``prefixItems`` under 2019-09), so the converter must too: it sees a
schema object through ``own_keywords``. ``dependencies`` stays readable under 2019-09/2020-12, as
their optional compatibility tests expect; ``minContains``/``maxContains`` are also read only
where ``contains`` has them (arrays.py).
"""
from __future__ import annotations

from typing import Any

_NEWER_THAN_7 = frozenset({"dependentRequired", "dependentSchemas", "prefixItems", "unevaluatedItems",
                           "unevaluatedProperties", "$dynamicRef", "$recursiveRef", "minContains",
                           "maxContains"})

FOREIGN: dict[str, frozenset[str]] = {
    "draft4": _NEWER_THAN_7 | {"const", "contains", "propertyNames", "if", "then", "else"},
    "draft6": _NEWER_THAN_7 | {"if", "then", "else"},
    "draft7": _NEWER_THAN_7,
    "draft2019": frozenset({"prefixItems", "$dynamicRef"}),
    "draft2020": frozenset({"$recursiveRef"}),
}
"""Per draft (the converter's names), the keywords of other drafts that it ignores."""


REWRITTEN = "x-halter-rewritten"
"""Marks a schema object the converter wrote itself (``not {"items": X}`` as ``{"contains": not X}``):
its keywords are read whatever the declared draft, since a rewrite may need one the draft lacks."""


def own_keywords(schema: Any, draft: str) -> Any:
    """``schema`` without the keywords ``draft`` does not define (itself when it has none, or when
    the converter wrote it: ``REWRITTEN``)."""
    foreign = FOREIGN.get(draft, frozenset())
    if not isinstance(schema, dict) or not foreign.intersection(schema) or schema.get(REWRITTEN) is True:
        return schema
    return {k: v for k, v in schema.items() if k not in foreign}
