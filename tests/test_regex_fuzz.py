"""A small run of bench/regex_fuzz.py (schema patterns and whole-output regexes against Node's
``RegExp``), and that the fuzz does catch a wrong verdict. Skipped where ``node`` is not installed."""
from __future__ import annotations

import shutil

import pytest

from tests.conftest import bench_module

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs node (the reference RegExp)")


@pytest.fixture(scope="module")
def fuzz():
    return bench_module("regex_fuzz")


def test_random_patterns_agree_with_node(fuzz, tmp_path, monkeypatch):
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    counts, found = fuzz.run(40, seed=5)
    assert counts["patterns"] - counts["unsupported"] - counts["node refused"] >= 25
    assert counts["checks"] > 800
    assert found == [], found[:3]


def test_the_fuzz_catches_a_wrong_verdict(fuzz, tmp_path, monkeypatch):
    from halter import Grammar
    monkeypatch.setenv("HALTER_CACHE_DIR", str(tmp_path))
    right = Grammar.matches

    def wrong_on_empty(self, text):            # the empty string's verdict flipped
        return (not right(self, text)) if text in ("", '""') else right(self, text)
    monkeypatch.setattr(Grammar, "matches", wrong_on_empty)
    counts, found = fuzz.run(40, seed=5)
    assert any('on ""' in line or "on ''" in line for line in found)
