"""One request of the generation loop: its description, its state, and the per-token steps.

A ``Request`` holds one sequence's prompt, sampler chain (or sampling parameters), optional
grammar, stop strings, ``max_tokens``, seed and the value parser of its constraint. ``_Row`` is
its state in the loop: tokenized prompts (the negative prompt of classifier-free guidance is a
second cache sequence), the ``CommonSampler`` (chain + grammar matcher), the text so far; it
ends in a ``halter.completion.Completion`` whose ``complete`` comes from the matcher's final state.

The loop itself is ``halter.engine.scheduler.Scheduler`` (continuous batching: requests join and
leave between decode steps). ``generate`` runs it with one request on the calling thread (or
streams it), ``generate_batch`` with many; ``halter serve`` runs it on a background thread. The
per-token steps it shares with nothing else live here: ``sample_host`` / ``sample_device`` (one
token, grammar and sampler time booked apart), ``advance`` (record a token, detect the end) and
``shift_context`` (llama.cpp's context shift when a sequence is full).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, Union

import numpy as np
import torch

from halter import cache
from halter.completion import Completion, CompletionStream, Timings, Usage
from halter.engine.pieces import complete_utf8_prefix, find_stop  # noqa: F401 (complete_utf8_prefix: re-exported)
from halter.errors import GrammarError, NoValidTokenError

if TYPE_CHECKING:
    from halter.engine.model import Model
    from halter.grammar import Grammar
    from halter.grammar.compiled import CompiledGrammar
    from halter.grammar.token_matcher import TokenMatcher
    from halter.sampling import SamplingParams

__all__ = ["GrammarLike", "Request", "Timings", "TokenSampler", "generate", "generate_batch", "run",
           "shift_context"]


class TokenSampler(Protocol):
    """What ``sampler=`` takes: picks a token id from one logits row, then is told the choice
    (``halter.sampling.SamplerChain`` is one)."""

    def sample(self, logits: np.ndarray) -> int: ...

    def accept(self, token: int) -> None: ...


GrammarLike = Union[str, "Grammar", "CompiledGrammar", "TokenMatcher"]
"""GBNF text, a ``Grammar``, a ``CompiledGrammar``, or a ``TokenMatcher`` (copied, never advanced)."""


@dataclass(frozen=True)
class Request:
    """One sequence to generate; the keywords of ``generate`` (see there) as a value.

    ``sampler`` (any object with ``sample(logits) -> int`` and ``accept(token)``) excludes
    ``sampling``/``seed``/``sampling_fields``, which otherwise build llama.cpp's chain. ``parse``
    turns the accepted text into the ``Completion``'s ``value`` (default: the text itself).
    """

    prompt: str | Sequence[int]
    max_tokens: int = 256
    sampling: "SamplingParams | None" = None
    sampler: TokenSampler | None = None
    seed: int | None = None
    sampling_fields: Mapping[str, Any] = field(default_factory=dict)
    grammar: GrammarLike | None = None
    grammar_first: bool = False
    stop: str | Sequence[str] = ()
    n_keep: int = 0
    add_bos: bool | None = None
    parse_special: bool = False
    cfg_negative_prompt: str | Sequence[int] | None = None
    cfg_scale: float = 1.0
    device_sampling: bool | None = None
    parse: Callable[[str], Any] | None = None


def generate(model: "Model", prompt: str | Sequence[int], *, max_tokens: int = 256,
             sampling: "SamplingParams | None" = None, sampler: TokenSampler | None = None,
             grammar: GrammarLike | None = None,
             stop: str | Sequence[str] = (), seed: int | None = None, stream: bool = False,
             grammar_first: bool = False, n_keep: int = 0, add_bos: bool | None = None,
             parse_special: bool = False, cfg_negative_prompt: str | Sequence[int] | None = None,
             cfg_scale: float = 1.0, seq_id: int = 0, device_sampling: bool | None = None,
             parse: Callable[[str], Any] | None = None,
             **sampling_fields: Any) -> Completion | CompletionStream:
    """Continue ``prompt`` (text, tokenized with BOS per the vocabulary, or token ids).

    ``sampler`` is any object with ``sample(logits) -> int`` and ``accept(token)`` (e.g. a
    ``halter.sampling.SamplerChain``); otherwise one is built from ``sampling`` (a
    ``SamplingParams``) and/or keyword fields such as ``temperature=0``. ``grammar`` (GBNF text,
    ``Grammar``, ``CompiledGrammar`` or ``TokenMatcher``, which is copied) constrains the tokens;
    with ``grammar_first=False`` the chain samples first and the grammar only resamples a rejected
    token, as llama.cpp does. ``n_keep`` prompt tokens (plus BOS; -1 = the whole prompt) survive
    context shifts. ``cfg_negative_prompt`` with ``cfg_scale != 1`` enables classifier-free
    guidance in cache sequence ``seq_id + 1``. ``device_sampling`` (None: on CUDA when the chain
    has a device version; True: required; False: the host chain) samples where the logits are
    (``halter.engine.device_sampling``). Returns a ``Completion``, or with ``stream=True`` a
    ``CompletionStream`` of text pieces.
    """
    req = Request(prompt, max_tokens=max_tokens, sampling=sampling, sampler=sampler, seed=seed,
                  sampling_fields=sampling_fields, grammar=grammar, grammar_first=grammar_first,
                  stop=stop, n_keep=n_keep, add_bos=add_bos, parse_special=parse_special,
                  cfg_negative_prompt=cfg_negative_prompt, cfg_scale=cfg_scale,
                  device_sampling=device_sampling, parse=parse)
    return run(model, req, stream=stream, seq_id=seq_id)


def run(model: "Model", req: Request, *, stream: bool = False, seq_id: int = 0) -> Completion | CompletionStream:
    """``generate`` for a ``Request``: cache sequence ``seq_id`` (and the next under guidance)."""
    from halter.engine.scheduler import Scheduler

    row = _Row.prepare(model, req)
    if seq_id < 0 or seq_id + len(row.prompts) > model.cache.n_seq:
        need = "classifier-free guidance needs cache sequence" if len(row.prompts) > 1 else "no cache sequence"
        raise ValueError(f"{need} {seq_id + len(row.prompts) - 1}; load the model with "
                         f"n_seq_max >= {seq_id + len(row.prompts)}")
    sched = Scheduler(model, seqs=range(seq_id, seq_id + len(row.prompts)),
                      n_batch=sum(len(p) for p in row.prompts))
    job = sched.enqueue(row)
    if stream:
        return CompletionStream(sched.stream(job), job.wait)
    sched.run()
    return job.wait()


def generate_batch(model: "Model", requests: Sequence[Request]) -> list[Completion]:
    """Run ``requests`` together on the scheduler, one batched forward pass per step; results in
    request order (the first failed request's error is raised once all have ended).

    Every prompt is read before the first token is sampled; the requests share the cache's
    ``n_seq_max`` sequences (a guided request takes two), and a request waiting for a sequence
    joins as soon as one is free. Row ``i`` equals ``generate`` with the same arguments.
    """
    from halter.engine.scheduler import Scheduler

    rows = [_Row.prepare(model, r, f" (request {i})") for i, r in enumerate(requests)]
    if not rows:
        return []
    sched = Scheduler(model, max_queue=len(rows), n_batch=sum(len(p) for r in rows for p in r.prompts))
    jobs = [sched.enqueue(row) for row in rows]
    sched.run()
    return [job.wait() for job in jobs]


def shift_context(model: "Model", seq: int, n_keep: int, timings: Timings) -> None:
    """llama.cpp's context shift: keep ``n_keep`` tokens, drop half of the rest, slide the tail."""
    n_past = model.cache.seq_pos_max(seq) + 1
    n_discard = (n_past - n_keep) // 2
    if n_discard <= 0:
        raise ValueError(f"cannot shift the context: n_keep={n_keep} leaves nothing to discard "
                         f"(n_ctx = {model.n_ctx})")
    model.cache.seq_rm(seq, n_keep, n_keep + n_discard)
    model.cache.seq_add(seq, n_keep + n_discard, n_past, -n_discard)
    timings.context_shifts += 1


def _make_sampler(model: "Model", req: Request) -> Any:
    """``CommonSampler`` over the caller's sampler or ``SamplingParams(...).build``, + the grammar."""
    from halter.sampling import CommonSampler, SamplingParams

    chain = req.sampler
    if chain is not None:
        if req.sampling_fields or req.sampling is not None or req.seed is not None:
            raise TypeError("pass either sampler= or sampling parameters (sampling=, seed=, ...), not both")
    else:
        params = req.sampling if req.sampling is not None else SamplingParams()
        fields = dict(req.sampling_fields, **({} if req.seed is None else {"seed": req.seed}))
        if fields:
            params = params.replace(**fields)
        vocab = model.vocab
        chain = params.build(model.n_vocab, vocab=vocab.token_bytes if params.dry_multiplier > 0 else None,
                             eog_ids=vocab.eog_ids, n_ctx_train=model.config.n_ctx_train)
    return CommonSampler(chain, _make_matcher(model, req.grammar))


def _grammar_from_text(text: str) -> Any:
    """The same ``Grammar`` for the same GBNF text, so that its compiled masks carry over between
    calls (a ``halter.cache`` memo)."""
    from halter.constraints import resolve
    return _GBNF_MEMO.get_or_make(text, lambda: resolve(grammar=text).grammar)


_GBNF_MEMO = cache.memo("engine.gbnf_grammars", 32)


def _make_matcher(model: "Model", grammar: Any) -> Any:
    """A ``TokenMatcher`` from GBNF text, a ``Grammar``, a ``CompiledGrammar`` or a matcher (copied)."""
    if grammar is None:
        return None
    if hasattr(grammar, "fill_bitmask"):
        return grammar.copy() if hasattr(grammar, "copy") else grammar
    if isinstance(grammar, str):
        grammar = _grammar_from_text(grammar)
    if hasattr(grammar, "compile"):
        grammar = grammar.compile(model.vocab)
    return grammar.matcher()


@dataclass
class _Row:
    """One request's state in the loop."""

    prompts: list[list[int]]               # the prompt, and the negative prompt under guidance
    keep: list[int]                        # tokens each sequence keeps through a context shift
    sampler: Any                           # CommonSampler: chain + grammar
    stops: list[bytes]
    max_tokens: int
    grammar_first: bool
    cfg_scale: float | None
    seqs: list[int] = field(default_factory=list)
    timings: Timings = field(default_factory=Timings)
    tokens: list[int] = field(default_factory=list)
    out: bytearray = field(default_factory=bytearray)
    emitted: int = 0
    reason: str = "length"
    done: bool = False
    device: Any = None                     # DeviceSampler when this row samples on the device
    parse: Callable[[str], Any] | None = None

    @classmethod
    def prepare(cls, model: "Model", req: Request, where: str = "") -> "_Row":
        """Validate and tokenize ``req``; build its sampler and grammar matcher.

        ``where`` is appended to error messages (which request of a batch).
        """
        if isinstance(req.max_tokens, bool) or not isinstance(req.max_tokens, int) or req.max_tokens < 0:
            raise ValueError(f"max_tokens must be an int >= 0, not {req.max_tokens!r}{where}")
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop)
        if any(not isinstance(s, str) or not s for s in stops):
            raise ValueError(f"stop strings must be non-empty str, got {stops!r}{where}")
        sampler = _make_sampler(model, req)
        use_cfg = req.cfg_negative_prompt is not None and req.cfg_scale != 1.0

        def tokenize(p: str | Sequence[int]) -> list[int]:
            if isinstance(p, str):
                return list(model.tokenizer.encode(p, add_bos=req.add_bos, parse_special=req.parse_special))
            return [int(t) for t in p]

        prompts = [tokenize(req.prompt)] + ([tokenize(req.cfg_negative_prompt)] if use_cfg else [])
        for name, toks in zip(("prompt", "cfg_negative_prompt"), prompts):
            if not toks:
                raise ValueError(f"the {name} is empty (no tokens to condition on){where}")
            if len(toks) > model.n_ctx - 4:
                raise ValueError(f"the {name} has {len(toks)} tokens; n_ctx = {model.n_ctx} leaves "
                                 f"room for at most {model.n_ctx - 4}{where}")
        if len(prompts) > model.cache.n_seq:
            raise ValueError("classifier-free guidance needs two cache sequences; load the model with "
                             "n_seq_max >= 2")
        bos = getattr(model.tokenizer, "bos_id", None) if isinstance(req.prompt, str) else None
        has_bos = bos is not None and prompts[0][0] == bos
        keep = [len(p) if req.n_keep < 0 else min(len(p), req.n_keep + (has_bos if i == 0 else 0))
                for i, p in enumerate(prompts)]
        from halter.engine.device_sampling import resolve
        try:
            device = resolve(req.device_sampling, model.device, sampler.chain, cfg=use_cfg)
        except ValueError as exc:
            raise ValueError(f"{exc}{where}") from None
        return cls(prompts, keep, sampler, [s.encode() for s in stops], req.max_tokens,
                   req.grammar_first, req.cfg_scale if use_cfg else None,
                   timings=Timings(prompt_tokens=len(prompts[0])), device=device, parse=req.parse)

    @property
    def matcher(self) -> Any:
        return None if self.sampler.grammar is None else self.sampler.grammar.matcher

    def result(self) -> Completion:
        """The ``Completion`` of this row (its matcher in its final state)."""
        text = self.out.decode("utf-8", errors="replace")
        matcher, reason = self.matcher, self.reason
        if matcher is None or reason in ("stop", "grammar"):
            complete = True                    # EOG is only allowed where the grammar may end
        elif reason == "length":
            complete = bool(matcher.is_accepting())
        else:                                  # stop string: the text was cut, check it afresh
            try:
                complete = bool(matcher.compiled.grammar.matches(text))
            except GrammarError:               # token-reference grammars match tokens, not text
                complete = False
        return Completion(text=text, complete=complete, finish_reason=reason,  # type: ignore[arg-type]
                          tokens=self.tokens, usage=Usage(len(self.prompts[0]), len(self.tokens)),
                          seed=self.sampler.seed, timings=self.timings,
                          _parse=self.parse if self.parse is not None else _text, matcher=matcher)


def _text(text: str) -> str:
    return text


def sample_host(r: _Row, row: np.ndarray, neg: np.ndarray | None, bitmask: np.ndarray | None) -> int:
    """Sample and accept ``r``'s next token from its host logits ``row`` (``neg``: the guidance
    row); ``bitmask`` is the grammar's mask when it was computed ahead (else ``None``)."""
    t = time.perf_counter()
    if r.cfg_scale is not None and neg is not None:      # llama.cpp's guidance on log-probabilities
        lp = row - np.logaddexp.reduce(row)
        lg = neg - np.logaddexp.reduce(neg)
        row = r.cfg_scale * (lp - lg) + lg
    row = np.ascontiguousarray(row, dtype=np.float32)
    return _pick(r, t, bitmask, lambda mask: r.sampler.sample(row, r.grammar_first, bitmask=mask))


def sample_device(r: _Row, logits: torch.Tensor, bitmask: np.ndarray | None) -> int:
    """``sample_host`` for a row whose chain runs on the logits' device."""
    from halter.engine.device_sampling import sample_on_device
    t = time.perf_counter()
    return _pick(r, t, bitmask,
                 lambda mask: sample_on_device(r.device, logits, r.sampler, r.grammar_first, mask))


def _pick(r: _Row, t: float, bitmask: np.ndarray | None, choose: Any) -> int:
    """Run ``choose(mask)``, accept the token, and book the grammar's and the sampler's time
    apart (started at ``t``)."""
    mask = bitmask if r.matcher is not None else None
    grammar = r.sampler.grammar
    in_grammar = grammar.seconds if grammar is not None else 0.0
    try:
        token = int(choose(mask))
        r.sampler.accept(token)
    except NoValidTokenError as exc:
        raise NoValidTokenError(f"{exc}; after {len(r.tokens)} generated tokens: "
                                f"{bytes(r.out)[-40:]!r}") from exc
    grammar_ms = ((grammar.seconds - in_grammar) * 1e3) if grammar is not None else 0.0
    r.timings.mask_ms += grammar_ms
    r.timings.sample_ms += (time.perf_counter() - t) * 1e3 - grammar_ms
    return token


def advance(r: _Row, token: int, eog: set[int], token_bytes: list[bytes], n_text: int) -> bool:
    """Record ``token``; return whether the row continues (else ``r.reason`` says why it ended)."""
    if token in eog:
        r.reason, r.done = "stop", True
        return False
    r.tokens.append(token)
    r.out += token_bytes[token] if token < n_text else b""
    hit = find_stop(r.out, r.stops, r.emitted)
    if hit is not None:
        del r.out[hit:]
        r.reason, r.done = "stop_string", True
    elif r.matcher is not None and r.matcher.is_finished():
        r.reason, r.done = "grammar", True
    elif len(r.tokens) >= r.max_tokens:
        r.reason, r.done = "length", True
    return not r.done

