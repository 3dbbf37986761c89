"""Response bodies in OpenAI's shapes (and llama-server's for ``/completion``), whole or as stream chunks.

``finish_reason`` tells the truth: ``"stop"`` (end-of-generation token, stop string, or the
grammar's end), ``"length"`` (``max_tokens``), ``"tool_calls"`` (a complete tool call). Every
choice of a constrained request carries ``"complete"``: ``false`` means the structured output was
cut (by ``max_tokens`` or a stop string) and is NOT valid JSON / a full grammar match.
"""
from __future__ import annotations

import uuid
from typing import Any

from halter.completion import Completion
from halter.engine.scheduler import TokenLogprob
from halter.server.tools import tool_calls_of

__all__ = ["chat_chunk", "chat_choice", "completion_choice", "finish_reason", "native_body",
           "new_id", "usage_of"]


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def finish_reason(c: Completion) -> str:
    return "length" if c.finish_reason == "length" else "stop"


def usage_of(prompt_tokens: int, completions: list[Completion]) -> dict[str, int]:
    out = sum(c.usage.completion_tokens for c in completions)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": out, "total_tokens": prompt_tokens + out}


def _tok(token_bytes: list[bytes], t: int) -> tuple[str, list[int]]:
    b = token_bytes[t] if t < len(token_bytes) else b""
    return b.decode("utf-8", errors="replace"), list(b)


def chat_logprobs(lps: list[TokenLogprob], token_bytes: list[bytes]) -> dict[str, Any]:
    content = []
    for lp in lps:
        text, raw = _tok(token_bytes, lp.token)
        top = []
        for t, v in lp.top:
            tt, tb = _tok(token_bytes, t)
            top.append({"token": tt, "logprob": v, "bytes": tb})
        content.append({"token": text, "logprob": lp.logprob, "bytes": raw, "top_logprobs": top})
    return {"content": content}


def completion_logprobs(lps: list[TokenLogprob], token_bytes: list[bytes], offset: int = 0) -> dict[str, Any]:
    tokens, token_lps, tops, offsets = [], [], [], []
    for lp in lps:
        text, _ = _tok(token_bytes, lp.token)
        offsets.append(offset)
        offset += len(text)
        tokens.append(text)
        token_lps.append(lp.logprob)
        tops.append({_tok(token_bytes, t)[0]: v for t, v in lp.top})
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def chat_choice(i: int, c: Completion, *, constrained: bool, tools: bool,
                logprobs: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": c.text}
    reason = finish_reason(c)
    calls = tool_calls_of(c.text) if tools and c.complete else None
    if calls:
        message["content"] = None
        message["tool_calls"] = calls
        reason = "tool_calls"
    choice: dict[str, Any] = {"index": i, "message": message, "finish_reason": reason, "logprobs": logprobs}
    if constrained:
        choice["complete"] = c.complete
    return choice


def completion_choice(i: int, c: Completion, *, constrained: bool, logprobs: dict[str, Any] | None
                      ) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": i, "text": c.text, "finish_reason": finish_reason(c), "logprobs": logprobs}
    if constrained:
        choice["complete"] = c.complete
    return choice


def chat_chunk(cid: str, created: int, model: str, choices: list[dict[str, Any]],
               usage: dict[str, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                            "system_fingerprint": "halter", "choices": choices}
    if usage is not None:
        body["usage"] = usage
    return body


_STOP_TYPE = {"stop": "eos", "grammar": "eos", "stop_string": "word", "length": "limit"}


def native_body(c: Completion, *, prompt_tokens: int, model: str, constrained: bool,
                probs: list[dict[str, Any]] | None) -> dict[str, Any]:
    """llama-server's final ``/completion`` object."""
    t = c.timings
    body: dict[str, Any] = {
        "content": c.text, "stop": True, "model": model, "tokens": c.tokens,
        "tokens_predicted": c.usage.completion_tokens, "tokens_evaluated": prompt_tokens,
        "stop_type": _STOP_TYPE.get(c.finish_reason, "none"), "truncated": False,
        "timings": {"prompt_n": prompt_tokens, "prompt_ms": getattr(t, "prompt_ms", 0.0),
                    "predicted_n": c.usage.completion_tokens, "predicted_ms": getattr(t, "decode_ms", 0.0)},
    }
    if constrained:
        body["complete"] = c.complete
    if probs is not None:
        body["completion_probabilities"] = probs
    return body


def native_probs(lps: list[TokenLogprob], token_bytes: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for lp in lps:
        text, raw = _tok(token_bytes, lp.token)
        out.append({"id": lp.token, "token": text, "bytes": raw, "logprob": lp.logprob,
                    "top_logprobs": [{"id": t, "token": _tok(token_bytes, t)[0], "logprob": v} for t, v in lp.top]})
    return out
