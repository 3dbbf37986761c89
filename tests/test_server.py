"""``halter serve`` end to end: the real app on uvicorn over loopback, driven by the official
``openai`` client (and httpx for llama-server's endpoint, streaming disconnects and raw errors)."""
from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import pytest

from tests.server_fixtures import API_KEY, client, server_model_path, servers  # noqa: F401

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

MSG = [{"role": "user", "content": "Give me a record."}]
ITEM = {"type": "object", "properties": {"kind": {"enum": ["book", "film", "song"]},
                                         "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                                         "new": {"type": "boolean"}},
        "required": ["kind", "year", "new"], "additionalProperties": False}


def _rf(schema: dict, name: str = "item") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def test_models_and_health(servers, client) -> None:  # noqa: F811
    assert [m.id for m in client.models.list().data] == ["tiny-server.gguf"]
    health = httpx.get(servers["open"].url + "/health").json()
    assert health["status"] == "ok" and health["slots_idle"] + health["slots_processing"] == 16


def test_chat_completion_and_seed_replay(client) -> None:  # noqa: F811
    a = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, seed=4)
    b = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, seed=4)
    assert a.choices[0].message.role == "assistant"
    assert a.choices[0].finish_reason in ("stop", "length")
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.completion_tokens <= 12 and a.usage.prompt_tokens > 5
    assert a.usage.total_tokens == a.usage.prompt_tokens + a.usage.completion_tokens


def test_streaming_matches_the_whole_response(client) -> None:  # noqa: F811
    whole = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=16, seed=9, temperature=0)
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, max_tokens=16, seed=9,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_endpoint_with_n_and_logprobs(client) -> None:  # noqa: F811
    out = client.completions.create(model="tiny", prompt="Once upon", max_tokens=8, n=3, seed=1, logprobs=2)
    assert [c.index for c in out.choices] == [0, 1, 2]
    for c in out.choices:
        lp = c.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) >= 1
        assert all(v <= 0 for v in lp.token_logprobs) and all(len(t) <= 2 for t in lp.top_logprobs)
    assert out.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in out.choices)
    echoed = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, seed=1, echo=True)
    plain = client.completions.create(model="tiny", prompt="Once upon", max_tokens=4, seed=1)
    assert echoed.choices[0].text == "Once upon" + plain.choices[0].text


def test_chat_logprobs(client) -> None:  # noqa: F811
    out = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=6, seed=2, logprobs=True,
                                         top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob


def test_json_schema_response_format(client) -> None:  # noqa: F811
    for seed in range(3):
        out = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=300, seed=seed,
                                             response_format=_rf(ITEM))
        choice = out.choices[0]
        assert choice.finish_reason == "stop" and choice.model_extra["complete"] is True
        jsonschema.validate(json.loads(choice.message.content), ITEM)


def test_json_object_and_stream(client) -> None:  # noqa: F811
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, max_tokens=300, seed=3,
                                                 response_format=_rf(ITEM), stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), ITEM)
    assert chunks[-1].choices[0].model_extra["complete"] is True


def test_cut_structured_output_is_marked_incomplete(client) -> None:  # noqa: F811
    out = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=3, seed=0,
                                         response_format=_rf(ITEM))
    choice = out.choices[0]
    assert choice.finish_reason == "length" and choice.model_extra["complete"] is False
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice.message.content)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Lima"]},
                                                    "unit": {"enum": ["C", "F"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
ADD = {"type": "function", "function": {
    "name": "add", "parameters": {"$defs": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
                                  "type": "object", "properties": {"a": {"$ref": "#/$defs/n"},
                                                                   "b": {"$ref": "#/$defs/n"}},
                                  "required": ["a", "b"], "additionalProperties": False}}}


def _check_call(call, tools) -> None:
    fn = {t["function"]["name"]: t["function"] for t in tools}[call.function.name]
    assert call.type == "function" and call.id
    jsonschema.validate(json.loads(call.function.arguments), fn["parameters"])


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_tool_calls(client, choice) -> None:  # noqa: F811
    for seed in range(2):
        out = client.chat.completions.create(model="tiny", messages=MSG, tools=[WEATHER, ADD], tool_choice=choice,
                                             max_tokens=300, seed=seed)
        c = out.choices[0]
        assert c.finish_reason == "tool_calls" and c.message.content is None
        assert len(c.message.tool_calls) == 1
        _check_call(c.message.tool_calls[0], [WEATHER, ADD])
        if isinstance(choice, dict):
            assert c.message.tool_calls[0].function.name == "add"


def test_tool_choice_auto_gives_text_or_a_valid_call(client) -> None:  # noqa: F811
    """With "{" (token 123) favoured the model calls the tool; with it banned it writes text."""
    for seed, bias, want in ((0, 10, "call"), (1, 10, "call"), (0, -100, "text"), (1, -100, "text")):
        out = client.chat.completions.create(model="tiny", messages=MSG, tools=[WEATHER], max_tokens=300,
                                             seed=seed, logit_bias={"123": bias})
        c = out.choices[0]
        if want == "call":
            assert c.finish_reason == "tool_calls" and c.message.content is None
            _check_call(c.message.tool_calls[0], [WEATHER])
        else:
            assert not c.message.tool_calls and c.finish_reason in ("stop", "length")
            assert c.message.content and not c.message.content.startswith("{")


def test_tool_call_streams_as_one_delta(client) -> None:  # noqa: F811
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, tools=[WEATHER], tool_choice="required",
                                                 max_tokens=300, seed=1, stream=True))
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    jsonschema.validate(json.loads(calls[0].function.arguments), WEATHER["function"]["parameters"])
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.slow
def test_sixteen_concurrent_clients_each_with_its_own_schema(client) -> None:  # noqa: F811
    def schema(i: int) -> dict:
        return {"type": "object", "properties": {"id": {"const": i}, "tag": {"enum": [f"t{i}a", f"t{i}b"]},
                                                 "n": {"type": "integer", "minimum": 0, "maximum": i * 10}},
                "required": ["id", "tag", "n"], "additionalProperties": False}

    def one(i: int):
        out = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=300, seed=100 + i,
                                             response_format=_rf(schema(i), f"s{i}"))
        return i, out.choices[0]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    for i, choice in results:
        assert choice.model_extra["complete"] is True, (i, choice.message.content)
        value = json.loads(choice.message.content)
        jsonschema.validate(value, schema(i))
        assert value["id"] == i


def test_disconnect_mid_stream_frees_the_sequence(servers) -> None:  # noqa: F811
    url = servers["open"].url
    body = {"messages": MSG, "max_tokens": 400, "stream": True, "ignore_eos": True, "seed": 1}
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]
        assert any(line.startswith("data: ") for line in got)
        assert httpx.get(url + "/health").json()["slots_processing"] >= 1
    deadline = time.time() + 20
    while httpx.get(url + "/health").json()["slots_processing"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.get(url + "/health").json()["slots_processing"] == 0
    ok = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 3}, timeout=60)
    assert ok.status_code == 200
    with pytest.raises(httpx.ReadTimeout):                # not streamed: the client gives up waiting
        httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 200000, "ignore_eos": True},
                   timeout=httpx.Timeout(60, read=1.0))
    deadline = time.time() + 20
    while httpx.get(url + "/health").json()["slots_processing"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.get(url + "/health").json()["slots_processing"] == 0


def _err(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


def test_bad_requests_get_openai_errors(servers) -> None:  # noqa: F811
    url = servers["open"].url
    post = lambda path, body: httpx.post(url + path, json=body, timeout=60)  # noqa: E731
    err = _err(post("/v1/chat/completions", {"messages": MSG, "response_format": _rf(
        {"type": "object", "properties": {"a": {"type": "strin"}}})}), 400)
    assert "#/properties/a/type" in err["message"] and err["param"] == "response_format"
    err = _err(post("/completion", {"prompt": "x", "grammar": 'root ::= "a" |\nfoo ::= ( "b"'}), 400)
    assert "line 2" in err["message"] and "column" in err["message"] and err["code"] == "invalid_grammar"
    err = _err(post("/completion", {"prompt": "x", "grammar": "root ::= missing"}), 400)
    assert "missing" in err["message"]
    _err(post("/v1/chat/completions", {"messages": []}), 400)
    _err(post("/v1/chat/completions", {"messages": MSG, "temperature": "hot"}), 400)
    _err(post("/v1/chat/completions", {"messages": MSG, "n": 0}), 400)
    _err(post("/v1/chat/completions", {"messages": MSG, "grammar": "root ::= \"a\"", "json_schema": {}}), 400)
    _err(post("/v1/chat/completions", {"messages": MSG, "tool_choice": "required"}), 400)
    _err(post("/v1/completions", {"prompt": [999999]}), 400)
    _err(post("/v1/completions", {"prompt": "x", "logit_bias": {"abc": 1}}), 400)
    r = httpx.post(url + "/v1/completions", content=b"{not json", timeout=10)
    _err(r, 400)
    err = _err(post("/v1/completions", {"prompt": "word " * 2400, "max_tokens": 1}), 413)
    assert err["code"] == "context_length_exceeded"
    assert _err(httpx.get(url + "/v1/nothing"), 404)["type"] == "not_found_error"
    _err(httpx.post(url + "/v1/completions", content=b"[" * 100000 + b"]" * 100000, timeout=10), 400)
    import halter.limits
    old = halter.limits.LIMITS.request_body_bytes
    halter.limits.set(request_body_bytes=1000)
    try:
        assert _err(post("/v1/completions", {"prompt": "x" * 2000}), 413)["code"] == "body_too_large"
    finally:
        halter.limits.set(request_body_bytes=old)
    assert httpx.get(url + "/health").json()["status"] == "ok"          # still serving


def test_bad_requests_through_the_openai_client(client) -> None:  # noqa: F811
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=MSG, response_format=_rf({"type": "object", "minProperties": "x"}))
    assert e.value.status_code == 400
    with pytest.raises(openai.APIStatusError) as e:
        client.completions.create(model="tiny", prompt="word " * 2400, max_tokens=1)
    assert e.value.status_code == 413


def test_queue_full_is_429(servers) -> None:  # noqa: F811
    url = servers["tight"].url
    body = {"prompt": "x", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()           # kept: a dropped iterator closes the connection
        next(lines)
        err = _err(httpx.post(url + "/v1/completions", json={"prompt": "y", "max_tokens": 2}, timeout=60), 429)
        assert err["code"] == "queue_full"
    deadline = time.time() + 20
    while httpx.get(url + "/health").json()["slots_processing"] and time.time() < deadline:
        time.sleep(0.1)
    assert httpx.post(url + "/v1/completions", json={"prompt": "y", "max_tokens": 2}, timeout=60).status_code == 200


def test_api_key_is_enforced(servers) -> None:  # noqa: F811
    url = servers["keyed"].url
    assert httpx.get(url + "/health").status_code == 200
    assert _err(httpx.get(url + "/v1/models"), 401)["type"] == "authentication_error"
    _err(httpx.get(url + "/v1/models", headers={"Authorization": "Bearer wrong"}), 401)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    assert good.completions.create(model="tiny", prompt="hi", max_tokens=2).choices[0].text is not None


def test_llama_server_completion_endpoint(servers) -> None:  # noqa: F811
    url = servers["open"].url
    r = httpx.post(url + "/completion", json={"prompt": "Pick:", "n_predict": 20, "grammar": 'root ::= "yes" | "no"',
                                              "n_probs": 2}, timeout=60).json()
    assert r["content"] in ("yes", "no") and r["stop"] is True and r["stop_type"] == "eos" and r["complete"]
    assert len(r["completion_probabilities"]) == r["tokens_predicted"]
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 3}
    r = httpx.post(url + "/completion", json={"prompt": "Nums:", "n_predict": 200, "json_schema": schema, "seed": 2},
                   timeout=60).json()
    jsonschema.validate(json.loads(r["content"]), schema)
    with httpx.stream("POST", url + "/completion", json={"prompt": "Pick:", "stream": True, "n_predict": 20,
                                                         "grammar": 'root ::= "yes" | "no"'}, timeout=60) as s:
        events = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: ")]
    assert "".join(e["content"] for e in events) in ("yes", "no") and events[-1]["stop"] is True
