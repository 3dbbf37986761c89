"""The generation loop, as llama.cpp's main program runs it.

Evaluate the prompt in chunks of ``n_batch``; then repeatedly launch the forward pass, compute
the grammar's next-token bitmask on the CPU while the device works, read the logits, combine
them with the classifier-free-guidance row if any, sample, accept, and feed the token back.
Stop at an end-of-generation token, a stop string or ``max_tokens``; when a sequence fills the
context, keep its first ``n_keep`` tokens, drop half of the rest and shift the remainder.
Streaming yields text pieces that never split a UTF-8 character or reveal part of a stop string.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import torch

from halter.errors import NoValidTokenError
from halter.grammar.bitmask import allocate_bitmask, apply_bitmask

if TYPE_CHECKING:
    from halter.engine.model import Model

FINISH_REASONS = ("stop", "length", "stop_string")


@dataclass
class Timings:
    """Milliseconds spent per phase; ``mask_ms`` is the grammar's share of the decode loop."""

    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generated_tokens: int = 0
    decode_ms: float = 0.0
    mask_ms: float = 0.0
    sample_ms: float = 0.0
    context_shifts: int = 0

    @property
    def prompt_tps(self) -> float:
        return self.prompt_tokens / (self.prompt_ms / 1e3) if self.prompt_ms else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated_tokens / (self.decode_ms / 1e3) if self.decode_ms else 0.0


@dataclass
class GenerationResult:
    """What one call produced: ``text`` (stop string excluded), ``tokens``, why it ended."""

    text: str
    tokens: list[int]
    finish_reason: str           # "stop" (end-of-generation token or grammar finished),
                                 # "length" (max_tokens), "stop_string"
    prompt_tokens: int
    timings: Timings = field(default_factory=Timings)


class Stream:
    """Iterator of text pieces; ``result`` holds the ``GenerationResult`` once exhausted."""

    def __init__(self, events: Iterator[str | GenerationResult]) -> None:
        self._events = events
        self.result: GenerationResult | None = None

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> str:
        for event in self._events:
            if isinstance(event, GenerationResult):
                self.result = event
                break
            return event
        raise StopIteration


def complete_utf8_prefix(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b & 0xC0 != 0x80:                       # a lead byte (or ASCII): is its sequence whole?
            need = 1 if b < 0x80 else 2 if b >> 5 == 0b110 else 3 if b >> 4 == 0b1110 \
                else 4 if b >> 3 == 0b11110 else 1
            return n if back >= need else n - back
    return n


def _stop_holdback(data: bytes, stops: Sequence[bytes]) -> int:
    """How many trailing bytes of ``data`` could still grow into one of ``stops``."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(data)), best, -1):
            if data.endswith(s[:k]):
                best = k
                break
    return best


def _make_sampler(model: "Model", sampler: Any, sampling: Any, seed: int | None,
                  kwargs: dict[str, Any]) -> Any:
    """The sampler chain: the caller's, or ``SamplingParams(...).build`` (+ keyword fields)."""
    if sampler is not None:
        if kwargs or sampling is not None or seed is not None:
            raise TypeError("pass either sampler= or sampling parameters (sampling=, seed=, ...), not both")
        return sampler
    from halter.sampling import SamplingParams

    params = sampling if sampling is not None else SamplingParams()
    if kwargs or seed is not None:
        params = params.replace(**kwargs, **({} if seed is None else {"seed": seed}))
    vocab = model.vocab
    return params.build(model.n_vocab, vocab=vocab.token_bytes if params.dry_multiplier > 0 else None,
                        eog_ids=vocab.eog_ids, n_ctx_train=model.config.n_ctx_train)


def _make_matcher(model: "Model", grammar: Any) -> Any:
    """A ``TokenMatcher`` from GBNF text, a ``Grammar``, a ``CompiledGrammar`` or a matcher.

    A matcher the caller passes is copied, never advanced in place.
    """
    if grammar is None:
        return None
    if hasattr(grammar, "fill_bitmask"):
        return grammar.copy() if hasattr(grammar, "copy") else grammar
    if isinstance(grammar, str):
        from halter.grammar import Grammar
        grammar = Grammar.from_gbnf(grammar)
    if hasattr(grammar, "compile"):
        grammar = grammar.compile(model.vocab)
    return grammar.matcher()


def _token_allowed(bitmask: np.ndarray, token: int) -> bool:
    return bool((int(bitmask[token >> 5]) >> (token & 31)) & 1)


def _shift_context(model: "Model", seq: int, n_keep: int, timings: Timings) -> None:
    """llama.cpp's context shift: keep ``n_keep`` tokens, drop half of the rest, slide the tail."""
    n_past = model.cache.seq_pos_max(seq) + 1
    n_discard = (n_past - n_keep) // 2
    if n_discard <= 0:
        raise ValueError(f"cannot shift the context: n_keep={n_keep} leaves nothing to discard "
                         f"(n_ctx = {model.n_ctx})")
    model.cache.seq_rm(seq, n_keep, n_keep + n_discard)
    model.cache.seq_add(seq, n_keep + n_discard, n_past, -n_discard)
    timings.context_shifts += 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def generate(model: "Model", prompt: str | Sequence[int], *, max_tokens: int = 256,
             sampling: Any = None, sampler: Any = None, grammar: Any = None,
             stop: str | Sequence[str] = (), seed: int | None = None, stream: bool = False,
             grammar_first: bool = False, n_keep: int = 0, add_bos: bool | None = None,
             parse_special: bool = False, cfg_negative_prompt: str | Sequence[int] | None = None,
             cfg_scale: float = 1.0, seq_id: int = 0, **sampling_kwargs: Any
             ) -> GenerationResult | Stream:
    """Continue ``prompt`` (text, tokenized with BOS per the vocabulary, or token ids).

    ``sampler`` is any object with ``sample(logits) -> int`` and ``accept(token)`` (e.g. a
    ``halter.sampling.SamplerChain``); otherwise one is built from ``sampling`` (a
    ``SamplingParams``) and/or keyword fields such as ``temperature=0``. ``grammar`` (GBNF text,
    ``Grammar``, ``CompiledGrammar`` or ``TokenMatcher``) constrains the tokens; with
    ``grammar_first=False`` the chain samples first and the grammar only resamples a rejected
    token, as llama.cpp does. ``n_keep`` prompt tokens (plus BOS; -1 = the whole prompt) survive
    context shifts. ``cfg_negative_prompt`` with ``cfg_scale != 1`` enables classifier-free
    guidance in cache sequence ``seq_id + 1``. Returns a ``GenerationResult``, or with
    ``stream=True`` a ``Stream`` of text pieces.
    """
    if max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
    stops = [stop] if isinstance(stop, str) else list(stop)
    if any(not isinstance(s, str) or not s for s in stops):
        raise ValueError(f"stop strings must be non-empty str, got {stops!r}")
    chain = _make_sampler(model, sampler, sampling, seed, sampling_kwargs)
    matcher = _make_matcher(model, grammar)
    use_cfg = cfg_negative_prompt is not None and cfg_scale != 1.0
    seqs = [seq_id, seq_id + 1] if use_cfg else [seq_id]
    if use_cfg and seq_id + 1 >= model.cache.n_seq:
        raise ValueError(f"classifier-free guidance needs cache sequence {seq_id + 1}; "
                         f"load the model with n_seq_max >= {seq_id + 2}")

    def tokenize(p: str | Sequence[int]) -> list[int]:
        if isinstance(p, str):
            return list(model.tokenizer.encode(p, add_bos=add_bos, parse_special=parse_special))
        return [int(t) for t in p]

    prompts = [tokenize(prompt)] + ([tokenize(cfg_negative_prompt)] if use_cfg else [])
    for name, toks in zip(("prompt", "cfg_negative_prompt"), prompts):
        if not toks:
            raise ValueError(f"the {name} is empty (no tokens to condition on)")
        if len(toks) > model.n_ctx - 4:
            raise ValueError(f"the {name} has {len(toks)} tokens; n_ctx = {model.n_ctx} leaves "
                             f"room for at most {model.n_ctx - 4}")
    bos = getattr(model.tokenizer, "bos_id", None) if isinstance(prompt, str) else None
    has_bos = bos is not None and prompts[0][0] == bos
    keep = [len(p) if n_keep < 0 else min(len(p), n_keep + (has_bos if i == 0 else 0))
            for i, p in enumerate(prompts)]
    events = _run(model, prompts, seqs, keep, chain, matcher, [s.encode() for s in stops],
                  max_tokens, grammar_first, cfg_scale if use_cfg else None)
    if stream:
        return Stream(events)
    for event in events:
        if isinstance(event, GenerationResult):
            return event
    raise AssertionError("generation ended without a result")  # pragma: no cover


def _run(model: "Model", prompts: list[list[int]], seqs: list[int], keep: list[int], chain: Any,
         matcher: Any, stops: list[bytes], max_tokens: int, grammar_first: bool,
         cfg_scale: float | None) -> Iterator[str | GenerationResult]:
    vocab = model.vocab
    eog = set(vocab.eog_ids)
    token_bytes = vocab.token_bytes
    n_text = len(token_bytes)
    timings = Timings(prompt_tokens=len(prompts[0]))
    dev = model.device
    if hasattr(chain, "accept_prompt"):                  # penalties see the prompt, grammar does not
        chain.accept_prompt(prompts[0])
    else:
        for t in prompts[0]:
            chain.accept(t)
    t0 = time.perf_counter()
    for seq in seqs:
        model.cache.clear(seq)
    logits_dev = torch.stack([model.eval_prompt(toks, seq) for seq, toks in zip(seqs, prompts)])
    _sync(dev)
    timings.prompt_ms = (time.perf_counter() - t0) * 1e3

    bitmask = None
    if matcher is not None:
        bitmask = allocate_bitmask(None, n_text)
    out, generated, emitted = bytearray(), [], 0
    finish = "length"
    t_loop = time.perf_counter()
    for _ in range(max_tokens):
        # The forward pass for this step was launched already (async on CUDA): do CPU work now.
        t = time.perf_counter()
        masked = False
        if matcher is not None:
            bitmask.fill(-1)
            masked = matcher.fill_bitmask(bitmask) is not False
            if masked and not bitmask.any():
                raise NoValidTokenError("the grammar allows no token of the vocabulary here (dead end) "
                                        f"after {len(generated)} generated tokens: {bytes(out)[-40:]!r}")
        timings.mask_ms += (time.perf_counter() - t) * 1e3
        logits = logits_dev.float().cpu().numpy()        # the one device -> host sync per step
        t = time.perf_counter()
        row = logits[0]
        if cfg_scale is not None:                        # llama.cpp's guidance on log-probabilities
            lp = row - np.logaddexp.reduce(row)
            lg = logits[1] - np.logaddexp.reduce(logits[1])
            row = cfg_scale * (lp - lg) + lg
        row = np.ascontiguousarray(row, dtype=np.float32)
        if masked and grammar_first:
            apply_bitmask(row, bitmask, vocab_size=n_text)
        token = int(chain.sample(row.copy()))
        if masked and not grammar_first and not (token < n_text and _token_allowed(bitmask, token)):
            apply_bitmask(row, bitmask, vocab_size=n_text)   # rejected: resample within the grammar
            token = int(chain.sample(row))
        chain.accept(token)
        timings.sample_ms += (time.perf_counter() - t) * 1e3
        if token in eog:
            finish = "stop"
            break
        if matcher is not None and not matcher.accept_token(token):
            raise NoValidTokenError(f"the grammar rejected token {token} "
                                    f"({token_bytes[token]!r}) that the mask allowed")
        generated.append(token)
        out += token_bytes[token] if token < n_text else b""
        hit = _find_stop(out, stops, emitted)
        if hit is not None:
            del out[hit:]
            finish = "stop_string"
            break
        if matcher is not None and matcher.is_finished():
            finish = "stop"
            break
        if len(generated) < max_tokens:                  # launch the next forward pass
            for i, seq in enumerate(seqs):
                if model.cache.seq_pos_max(seq) + 1 >= model.n_ctx:
                    _shift_context(model, seq, keep[i], timings)
            logits_dev = model.decode([[token]] * len(seqs), seqs)
        safe = complete_utf8_prefix(bytes(out))
        safe -= _stop_holdback(bytes(out[:safe]), stops)
        if safe > emitted:
            yield out[emitted:safe].decode("utf-8", errors="replace")
            emitted = safe
    _sync(dev)
    timings.generated_tokens = len(generated)
    timings.decode_ms = (time.perf_counter() - t_loop) * 1e3
    if len(out) > emitted:
        yield out[emitted:].decode("utf-8", errors="replace")
    yield GenerationResult(text=out.decode("utf-8", errors="replace"), tokens=generated,
                           finish_reason=finish, prompt_tokens=len(prompts[0]), timings=timings)


def _find_stop(out: bytearray, stops: list[bytes], emitted: int) -> int | None:
    """Byte offset of the earliest stop string that ends in the unemitted tail, else None."""
    best = None
    for s in stops:
        i = out.find(s, max(0, emitted - len(s) + 1))
        if i >= 0 and (best is None or i < best):
            best = i
    return best
