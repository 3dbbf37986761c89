"""Grammar builds hold off Python's cyclic collector and give it back as they found it."""
from __future__ import annotations

import gc
import threading

import pytest

from halter import Grammar, gc_pause


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_build_pauses_collection_and_turns_it_back_on(collector_on, monkeypatch):
    seen = []
    import halter.grammar.grammar as grammar_module
    real = grammar_module.build_automata

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(grammar_module, "build_automata", spy)
    g = Grammar.from_gbnf('root ::= "a" [0-9]{1,3}')
    assert seen == [False]
    assert gc.isenabled()
    assert g.matches("a12")


def test_a_failing_build_turns_collection_back_on(collector_on):
    with pytest.raises(Exception):
        Grammar.from_gbnf("root ::= undefined-rule")
    assert gc.isenabled()
    with pytest.raises(Exception):
        Grammar.from_json_schema({"type": "nonsense"})
    assert gc.isenabled()


def test_an_application_that_turned_collection_off_keeps_it_off():
    was = gc.isenabled()
    gc.disable()
    try:
        Grammar.from_json_schema({"type": "object", "properties": {"x": {"type": "integer"}}})
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


def test_nested_and_concurrent_pauses_end_with_the_last(collector_on):
    inside, release = threading.Event(), threading.Event()

    def other():
        with gc_pause.paused():
            inside.set()
            release.wait(10)
    t = threading.Thread(target=other)
    with gc_pause.paused():
        t.start()
        assert inside.wait(10)
        with gc_pause.paused():
            assert not gc.isenabled()
    assert not gc.isenabled()          # the other thread's build is still running
    release.set()
    t.join(10)
    assert gc.isenabled()
