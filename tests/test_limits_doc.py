"""docs/limits.md lists every limit halter enforces, with its default."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from halter.limits import Limits

DOC = Path(__file__).resolve().parents[1] / "docs" / "limits.md"


def test_every_limit_is_documented_with_its_default() -> None:
    rows = {line.split("|")[1].strip(" `"): line for line in DOC.read_text().splitlines()
            if line.startswith("| `")}
    for field in dataclasses.fields(Limits):
        assert field.name in rows, f"{field.name} is not in docs/limits.md"
        default = rows[field.name].split("|")[2]
        assert f"{field.default:,}" in default or str(field.default) in default, \
            f"docs/limits.md gives {field.name} the default {default.strip()}, not {field.default}"
