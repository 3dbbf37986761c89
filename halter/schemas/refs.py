"""``$ref`` resolution inside one schema document: ``$id`` base URIs, JSON pointers, ``$anchor``s."""
from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from halter.errors import SchemaError

DEFAULT_BASE = "https://halter.invalid/root.json"


def pointer_escape(token: str) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")


class RefIndex:
    """Every ``$id`` and ``$anchor`` of a schema document, to resolve ``$ref`` values."""

    def __init__(self, root: Any, draft: str) -> None:
        self.root = root
        self.draft = draft
        self.docs: dict[str, Any] = {}            # absolute URI (no fragment) -> schema
        self.doc_pointer: dict[str, str] = {}     # absolute URI -> JSON pointer of it in root
        self.anchors: dict[tuple[str, str], tuple[Any, str, str]] = {}
        self._walk(root, DEFAULT_BASE, "")
        self.docs.setdefault(DEFAULT_BASE, root)      # the root also under the default base
        self.doc_pointer.setdefault(DEFAULT_BASE, "")

    def _walk(self, node: Any, base: str, pointer: str) -> None:
        if isinstance(node, dict):
            ident = node.get("$id", node.get("id") if self.draft in ("draft4",) else None)
            if isinstance(ident, str) and not (self.draft in ("draft6", "draft7", "draft4") and "$ref" in node):
                uri, frag = urldefrag(urljoin(base, ident))
                if uri:
                    base = uri
                    self.docs.setdefault(uri, node)
                    self.doc_pointer.setdefault(uri, pointer)
                if frag and not frag.startswith("/"):     # draft 7 style "$id": "#foo"
                    self.anchors.setdefault((base, frag), (node, base, pointer))
            if pointer == "":
                self.docs.setdefault(base, node)
                self.doc_pointer.setdefault(base, "")
            for key in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(key), str):
                    self.anchors.setdefault((base, node[key]), (node, base, pointer))
            for k, v in node.items():
                if k in ("enum", "const", "default", "examples"):
                    continue
                self._walk(v, base, f"{pointer}/{pointer_escape(k)}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                self._walk(v, base, f"{pointer}/{i}")

    def resolve(self, ref: str, base: str, where: str) -> tuple[Any, str, str]:
        """(target schema, its base URI, its JSON pointer in the root document)."""
        if ref.startswith("#"):            # urljoin cannot resolve against e.g. urn: bases
            uri, frag = base, ref[1:]
        else:
            uri, frag = urldefrag(urljoin(base, ref))
        if uri not in self.docs:
            raise SchemaError(f"cannot resolve $ref {ref!r}: remote references are not fetched",
                              where, "$ref")
        doc, doc_ptr = self.docs[uri], self.doc_pointer[uri]
        if not frag:
            return doc, uri, doc_ptr
        if frag.startswith("/"):
            node, ptr = doc, doc_ptr
            node_base = uri
            for raw in frag[1:].split("/"):
                token = unquote(raw).replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    raise SchemaError(f"$ref {ref!r} points at nothing", where, "$ref")
                ptr = f"{ptr}/{pointer_escape(token)}"
                if isinstance(node, dict) and isinstance(node.get("$id"), str) and "$ref" not in node:
                    node_base = urldefrag(urljoin(node_base, node["$id"]))[0] or node_base
            return node, node_base, ptr
        hit = self.anchors.get((uri, frag))
        if hit is None:
            raise SchemaError(f"$ref {ref!r}: no $anchor {frag!r}", where, "$ref")
        return hit
