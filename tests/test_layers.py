"""Packages import downward only: every module's imports, read with ``ast``, against the layer order
of docs/architecture.md. A module may import its own layer and the layers below it."""
from __future__ import annotations

import ast
from pathlib import Path

import halter

ROOT = Path(halter.__file__).parent

# Lowest first. A name is a package (halter/<name>/) or a top-level module (halter/<name>.py).
LAYERS: list[set[str]] = [
    {"errors"},
    {"limits", "cache", "jit", "gc_pause"},
    {"gguf"},
    {"vocab"},
    {"grammar"},
    {"schemas"},
    {"constraints", "sampling", "chat", "completion"},
    {"fetch", "hub"},
    {"engine"},
    {"api"},
    {"cli", "server", "integrations", "__init__", "__main__"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}

# Upward imports allowed (none): the test fails on any upward import, and on an entry listed here
# that is no longer upward.
KNOWN: set[tuple[str, str]] = set()


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_units(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                     if node.module == "halter" else [])
        for name in names:
            parts = name.split(".")
            if parts[0] == "halter" and len(parts) > 1:
                out.add(parts[1])
    return out


def test_every_unit_has_a_layer():
    units = {_unit(p) for p in ROOT.rglob("*.py")}
    assert units <= set(LEVEL), f"give these a layer in tests/test_layers.py and docs/architecture.md: {units - set(LEVEL)}"


def test_imports_go_downward_only():
    upward = set()
    for path in sorted(ROOT.rglob("*.py")):
        src = _unit(path)
        for target in _imported_units(ast.parse(path.read_text(encoding="utf-8"))):
            if target in LEVEL and LEVEL[target] > LEVEL[src]:
                upward.add((str(path.relative_to(ROOT)), target))
    assert upward - KNOWN == set(), f"upward imports: {sorted(upward - KNOWN)}"
    assert KNOWN - upward == set(), f"no longer upward, drop from KNOWN: {sorted(KNOWN - upward)}"
