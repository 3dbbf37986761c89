"""Per-request constraints for serving engines: the spellings engines pass them in, the errors for
malformed ones, and the compiled-grammar cache shared across requests and threads."""
from __future__ import annotations

import json
import threading

import pytest

from halter.errors import GrammarError, HalterError
from halter.vocab.vocabulary import Vocabulary
from halter.integrations.constraints import ConstraintError, GrammarCache, parse_constraint

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(scope="module")
def vocab() -> Vocabulary:
    return Vocabulary.from_token_bytes([bytes([b]) for b in range(256)] + [b""], eog_ids=[256], eos_id=256)


def test_every_spelling_gives_the_same_constraint() -> None:
    nested = parse_constraint({"halter": {"json_schema": SCHEMA}})
    assert nested.kind == "json_schema"
    assert parse_constraint({"halter": json.dumps({"json_schema": SCHEMA})}) == nested      # vllm_xargs
    assert parse_constraint({"halter_json_schema": json.dumps(SCHEMA)}) == nested
    reordered = {"required": ["n"], "properties": {"n": {"type": "integer"}}, "type": "object"}
    assert parse_constraint({"halter_json_schema": reordered}) == nested                    # canonical key
    assert parse_constraint({"halter_regex": "a+"}).source == "a+"
    assert parse_constraint({"halter": {"grammar": 'root ::= "x"'}}).kind == "grammar"
    with_options = parse_constraint({"halter_json_schema": SCHEMA, "halter_options": '{"whitespace": "compact"}'})
    assert json.loads(with_options.options) == {"whitespace": "compact"} and with_options != nested
    assert parse_constraint(None) is None and parse_constraint({"other": 1}) is None


@pytest.mark.parametrize("args, message", [
    ({"halter": {"json_schema": SCHEMA, "regex": "a"}}, "exactly one"),
    ({"halter": {}}, "exactly one"),
    ({"halter": {"jsonschema": SCHEMA}}, "unknown keys"),
    ({"halter": "{not json"}, "not valid JSON"),
    ({"halter": [1]}, "must be an object"),
    ({"halter_json_schema": "[1, 2]"}, "JSON Schema"),
    ({"halter_regex": 5}, "must be a string"),
    ({"halter_regex": "a", "halter_grammar": "root ::= \"a\""}, "one halter constraint"),
    ({"halter_options": "{}"}, "without"),
    ({"halter": {"regex": "a", "options": [1]}}, "options must be an object"),
])
def test_malformed_arguments_name_the_key(args, message) -> None:
    with pytest.raises(ConstraintError, match=message) as info:
        parse_constraint(args)
    assert isinstance(info.value, (HalterError, ValueError))


def test_bad_grammar_text_keeps_line_and_column() -> None:
    c = parse_constraint({"halter": {"grammar": 'root ::= "a"\nb ::= ('}})
    with pytest.raises(GrammarError) as info:
        c.build()
    assert info.value.line == 2
    with pytest.raises(ConstraintError, match="options"):
        parse_constraint({"halter": {"grammar": 'root ::= "a"', "options": {"strict": True}}}).build()


def test_one_compilation_shared_by_concurrent_requests(vocab) -> None:
    cache = GrammarCache(workers=2)
    c = parse_constraint({"halter_json_schema": SCHEMA})
    results: list = []
    barrier = threading.Barrier(8)

    def request() -> None:
        barrier.wait()
        results.append(cache.get(c, vocab))

    threads = [threading.Thread(target=request) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert cache.compiled == 1 and len(cache) == 1
    m1, m2 = results[0].matcher(), results[0].matcher()          # independent matchers
    assert m1.accept_bytes(b'{"n":1') and not m2.is_accepting() and m2.accept_bytes(b'{"n"')
    loaded = []

    def loader():
        loaded.append(1)
        return vocab
    digits = parse_constraint({"halter_regex": "[0-9]+"})
    other = cache.get(digits, loader, vocab_key="bytes")         # a vocabulary built on first use
    assert cache.get(digits, loader, vocab_key="bytes") is other and len(loaded) == 1
    assert other is not results[0] and cache.compiled == 2
    with pytest.raises(TypeError, match="vocab_key"):
        cache.submit(digits, loader)
    cache.close()


def test_failed_compilations_are_reported_and_not_kept(vocab) -> None:
    cache = GrammarCache(max_entries=2)
    bad = parse_constraint({"halter_json_schema": {"type": "object", "required": ["a"],
                                                   "properties": {"a": False}}})
    for _ in range(2):
        with pytest.raises(HalterError):
            cache.get(bad, vocab)
    assert cache.compiled == 2 and len(cache) == 0
    for pattern in ("a", "b", "c"):
        cache.get(parse_constraint({"halter_regex": pattern}), vocab)
    assert len(cache) == 2                      # least recently used dropped
    cache.close()
