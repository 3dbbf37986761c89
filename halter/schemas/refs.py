"""``$ref`` resolution inside one schema document: ``$id`` base URIs, JSON pointers, ``$anchor``s.

``$dynamicRef`` (and draft 2019's ``$recursiveRef``) are resolved statically: every base URI the
converter passes around is a ``ScopedBase``, a string that also remembers, for each dynamic anchor
name some ``$dynamicRef`` uses, the outermost schema resource entered so far that defines it (the
part of the dynamic scope that can change a resolution). ``resolve`` extends that scope with the
target's resource, ``enter`` with a subschema's ``$id``; ``dynamic_ref`` picks the target.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote, urldefrag, urljoin

from halter.errors import SchemaError
from halter.schemas.metaschema import check_subschema

DEFAULT_BASE = "https://halter.invalid/root.json"
_SCHEMA_KEYS = {"items", "additionalItems", "contains", "propertyNames", "additionalProperties",
                "unevaluatedItems", "unevaluatedProperties", "not", "if", "then", "else", "contentSchema"}
_LIST_KEYS = {"allOf", "anyOf", "oneOf", "prefixItems", "items"}
_MAP_KEYS = {"properties", "patternProperties", "dependentSchemas", "dependencies"}
RECURSIVE = "#recursive"
"""The dynamic anchor name standing for draft 2019's ``$recursiveAnchor: true``."""


class ScopedBase(str):
    """A base URI plus the dynamic scope it was reached in: ((anchor name, resource URI), ...)."""
    scope: tuple[tuple[str, str], ...] = ()

    def __new__(cls, uri: str, scope: tuple[tuple[str, str], ...] = ()) -> "ScopedBase":
        obj = super().__new__(cls, uri)
        obj.scope = scope
        return obj


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
        self.dynamic: dict[str, set[str]] = {}    # resource URI -> its $dynamicAnchor names
        self.dynamic_names: set[str] = set()      # anchor names some $dynamicRef/$recursiveRef uses
        self._relocated: dict[tuple, tuple[Any, Any]] = {}
        self._checked: set[str] = {""}            # pointers of targets checked against the metaschema
        self.node_uri: dict[int, str] = {}       # id() of a node with an $id -> its absolute URI
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
                    self.node_uri[id(node)] = uri
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
            if isinstance(node.get("$dynamicAnchor"), str):
                self.dynamic.setdefault(base, set()).add(node["$dynamicAnchor"])
            if node.get("$recursiveAnchor") is True and (pointer == "" or isinstance(ident, str)):
                self.dynamic.setdefault(base, set()).add(RECURSIVE)
            if isinstance(node.get("$dynamicRef"), str):
                frag = urldefrag(node["$dynamicRef"])[1]
                if frag and not frag.startswith("/"):
                    self.dynamic_names.add(frag)
            if isinstance(node.get("$recursiveRef"), str):
                self.dynamic_names.add(RECURSIVE)
            for k, v in node.items():
                if k in ("enum", "const", "default", "examples"):
                    continue
                if k in _MAP_KEYS or k in ("$defs", "definitions"):
                    if isinstance(v, dict):       # names (a property called "default" is a schema)
                        for name, sub in v.items():
                            self._walk(sub, base, f"{pointer}/{pointer_escape(k)}/{pointer_escape(name)}")
                    continue
                self._walk(v, base, f"{pointer}/{pointer_escape(k)}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                self._walk(v, base, f"{pointer}/{i}")

    # -- dynamic scope --------------------------------------------------------------------------
    def enter(self, base: str, uri: str) -> ScopedBase:
        """``uri`` as a base reached from ``base``: the resource ``uri`` joins the dynamic scope."""
        return ScopedBase(uri, self._extend(self.scope_of(base), uri))

    def scope_of(self, base: str) -> tuple[tuple[str, str], ...]:
        """((anchor name, outermost resource defining it), ...) in the dynamic scope of ``base``."""
        if isinstance(base, ScopedBase):
            return base.scope
        return self._extend((), base)          # a plain string: the scope starts at that resource

    def _extend(self, scope: tuple[tuple[str, str], ...], uri: str) -> tuple[tuple[str, str], ...]:
        names = self.dynamic.get(uri, set()) & self.dynamic_names
        have = {n for n, _ in scope}
        new = sorted(n for n in names if n not in have)        # the outermost resource wins
        return scope + tuple((n, uri) for n in new) if new else scope

    def enter_id(self, base: str, ident: str, node: Any = None) -> str:
        """The base inside a subschema with ``$id: ident`` (``base`` when it names no document).

        For a ``node`` of the document the URI found while indexing is used: a ``$ref`` target is
        visited at a base that already includes its own ``$id``, and joining it again would
        repeat a relative path (``sub/a`` inside ``.../sub/a`` is not ``.../sub/sub/a``)."""
        uri = self.node_uri.get(id(node)) or urldefrag(urljoin(base, ident))[0]
        return self.enter(base, uri) if uri else base

    def scope_key(self, base: str) -> str:
        """What of ``base``'s dynamic scope can change how a subschema reached there resolves."""
        scope = self.scope_of(base)
        return "" if not scope else " " + " ".join(f"{n}={u}" for n, u in scope)

    def dynamic_ref(self, ref: str, base: str, where: str, recursive: bool = False) -> str:
        """An absolute ``$ref`` to where ``$dynamicRef: ref`` (``$recursiveRef``) leads from ``base``.

        The reference first resolves like ``$ref``; when that target carries the matching
        ``$dynamicAnchor`` (``$recursiveAnchor: true``), the target is instead the anchor in the
        outermost resource of the dynamic scope that defines it (2020-12 "bookending")."""
        target, tbase, tptr = self.resolve(ref, base, where)
        frag = RECURSIVE if recursive else urldefrag(ref)[1]
        bookended = (isinstance(target, dict) and
                     (target.get("$recursiveAnchor") is True if recursive
                      else frag and not frag.startswith("/") and target.get("$dynamicAnchor") == frag))
        if bookended:
            scope: dict[str, str | None] = dict(self.scope_of(base))
            scope.setdefault(frag, None)
            outer = scope[frag] or str(tbase)
            if recursive:
                return outer
            hit = self.anchors.get((outer, frag))
            if hit is not None:
                _, tbase, tptr = hit
        return self.absolute(str(tbase), tptr)

    def static_refs(self, schema: dict, base: str, where: str) -> dict:
        """``schema`` with ``$dynamicRef``/``$recursiveRef`` replaced by the ``$ref`` they lead to."""
        out = dict(schema)
        for kw in ("$dynamicRef", "$recursiveRef"):
            if isinstance(out.get(kw), str):
                target = self.dynamic_ref(out.pop(kw), base, where, recursive=kw == "$recursiveRef")
                if isinstance(out.get("$ref"), str):
                    out["allOf"] = [*(out.get("allOf") or []), {"$ref": target}]
                else:
                    out["$ref"] = target
        return out

    def relocate(self, schema: Any, base: str, where: str, into: str | None = None) -> Any:
        """``schema`` (found at ``base``) made independent of the base it is visited at.

        References become absolute and dynamic ones static (resolved in ``base``'s scope), and
        ``$id``s absolute; the top gets ``$id: base`` so visiting it enters that resource again.
        Unchanged when ``into`` is the same base and scope (nothing to do)."""
        if into is not None and str(into) == str(base) and self.scope_key(into) == self.scope_key(base):
            return schema
        if not isinstance(schema, dict):
            return schema
        key = (id(schema), str(base), self.scope_key(base))
        if key not in self._relocated:
            out = self._absolute(schema, base, where, entered=True)
            out["$id"] = str(base)
            self._relocated[key] = (schema, out)      # keeps ``schema`` alive: its id stays unique
        return self._relocated[key][1]

    def _absolute(self, s: Any, base: str, where: str, entered: bool = False) -> Any:
        if not isinstance(s, dict):
            return s
        if isinstance(s.get("$id"), str) and not entered:   # (``base`` is already inside it)
            base = self.enter_id(base, s["$id"], s)
        s = self.static_refs(s, base, where)
        out: dict = {}
        for k, v in s.items():
            if k in ("$defs", "definitions"):
                continue
            if k == "$id" and isinstance(v, str):
                out[k] = str(base)
            elif k == "$ref" and isinstance(v, str):
                out[k] = str(base) + v if v.startswith("#") else urljoin(base, v)
            elif k in _SCHEMA_KEYS and isinstance(v, (dict, bool)):
                out[k] = self._absolute(v, base, where)
            elif k in _LIST_KEYS and isinstance(v, list):
                out[k] = [self._absolute(x, base, where) for x in v]
            elif k in _MAP_KEYS and isinstance(v, dict):
                out[k] = {n: self._absolute(x, base, where) for n, x in v.items()}
            else:
                out[k] = v
        return out

    def absolute(self, uri: str, pointer: str) -> str:
        """A ``$ref`` naming the node at JSON ``pointer`` (of the root document) in resource ``uri``."""
        doc_ptr = self.doc_pointer.get(uri, "")
        if pointer.startswith(doc_ptr):
            pointer = pointer[len(doc_ptr):]
        # the fragment is percent-decoded when resolved: a name holding "%25" must stay "%25"
        return uri + "#" + quote(pointer, safe="/~!$&'()*+,;=:@")

    def resolve(self, ref: str, base: str, where: str) -> tuple[Any, str, str]:
        """(target schema, its base URI (a ``ScopedBase``), its JSON pointer in the root document)."""
        target, tbase, tptr = self._resolve(ref, base, where)
        if tptr not in self._checked and not self._root_check_covers(tptr):
            self._checked.add(tptr)               # a target the metaschema walk may not have reached
            check_subschema(target, self.draft, tptr)
        return target, self.enter(base, tbase), tptr

    def _root_check_covers(self, pointer: str) -> bool:
        """Did the root document's metaschema check (``_checked`` holds its pointer) already check
        the node at ``pointer`` as a schema? Every draft's metaschema checks each value of the
        root's ``definitions`` against itself, and 2019-09's and 2020-12's each value of ``$defs``."""
        parts = pointer.split("/")
        return len(parts) == 3 and (parts[1] == "definitions"
                                    or (parts[1] == "$defs" and self.draft in ("draft2019", "draft2020")))

    def _resolve(self, ref: str, base: str, where: str) -> tuple[Any, str, str]:
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
