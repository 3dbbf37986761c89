"""bench/extraction_bench.py's tasks and scoring (the model runs are the benchmark's, not a test's)."""
from __future__ import annotations

import json

import jsonschema

from tests.conftest import bench_module


def test_fifty_tasks_whose_expected_answers_pass_their_schemas() -> None:
    tasks = bench_module("extraction_tasks").tasks()
    assert len(tasks) == 50
    for t in tasks:
        jsonschema.validate(t["expected"], t["schema"])
        assert all(str(v).lower() in t["text"].lower() or isinstance(v, (bool, int, float))
                   for v in t["expected"].values()), t


def test_scoring_counts_exact_fields_and_only_valid_outputs() -> None:
    bench = bench_module("extraction_bench")
    task = bench.tasks()[0]                      # Maria Lopez, 34, Madrid, nurse
    good = dict(task["expected"], name="maria LOPEZ ")
    assert bench.score(json.dumps(good), task) == (True, 1.0)
    assert bench.score(json.dumps(dict(good, age=35)), task) == (True, 0.75)
    assert bench.score("Here: " + json.dumps(good), task) == (False, 0.0)
    assert bench.score("Here: " + json.dumps(good), task, lenient=True) == (True, 1.0)
    assert bench.score(json.dumps(dict(good, extra=1)), task) == (False, 0.0)   # schema refuses it
