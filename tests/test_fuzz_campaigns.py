"""A short seeded run of each campaign of ``bench/fuzz.py`` (the long runs are by hand, figures in
docs/benchmarks.md): every case accepted or refused with a ``HalterError``; no crash, hang, memory
blow-up or wrong answer."""
from __future__ import annotations

import pytest

from tests.conftest import bench_module

fuzz = bench_module("fuzz")

CASES = {"gbnf": 150, "schema": 60, "walk": 40, "gguf": 60, "cli": 60}


@pytest.mark.slow
@pytest.mark.parametrize("campaign", fuzz.CAMPAIGNS)
def test_a_short_seeded_campaign_finds_nothing(campaign: str, tmp_path) -> None:
    result = fuzz.run_campaign(campaign, CASES[campaign], seed=0, out=tmp_path, memory_mb=6144,
                               cpu_s=20, timeout_s=60)
    assert result["ok"] == result["cases"], result["failures"][:3]


def test_campaigns_are_reproducible() -> None:
    import random
    for name, generate in fuzz.GENERATORS.items():
        a = [generate(random.Random(f"{name}-7")) for _ in range(5)]
        b = [generate(random.Random(f"{name}-7")) for _ in range(5)]
        assert a == b, name
