"""The generation loop: N independent requests decoded together in the model's KV cache.

Each ``Request`` has its own prompt, sampler chain, optional grammar, stop strings, ``max_tokens``
and seed; each occupies one cache sequence (two with classifier-free guidance: the negative prompt
is its second sequence). Prompts are evaluated in chunks of ``n_batch``; then every step

1. the forward pass for the tokens just sampled has been launched (asynchronous on CUDA);
2. on CUDA, the CPU computes every grammar row's next-token bitmask meanwhile (on the CPU the
   sampler builds a mask only when it needs one: grammar-first, or a rejected token);
3. the logits are read (the one device -> host synchronisation per step), combined with the
   guidance row if any, and each row is sampled by its ``CommonSampler`` (grammar-first or
   resample-on-reject, with the bitmask from step 2), accepted, and checked for an end;
4. a sequence that filled its context is shifted (llama.cpp: keep ``n_keep``, drop half of the
   rest), and one batched forward pass is launched for the rows still running (``Model.decode``
   with one token per row: the static step of ``halter.engine.static_decode`` — a CUDA graph
   replay by default on CUDA — unless the model's decode mode is eager; prompts stay eager).

More requests than cache sequences run in consecutive chunks. ``generate`` is this loop with one
request; ``generate_batch`` maps a list of requests onto it.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from halter.engine.results import (FINISH_REASONS, GenerationResult, Stream, Timings,  # noqa: F401
                                   complete_utf8_prefix, find_stop, releasable)
from halter.errors import NoValidTokenError
from halter.grammar.bitmask import allocate_bitmask

if TYPE_CHECKING:
    from halter.engine.model import Model

__all__ = ["GenerationResult", "Request", "Stream", "Timings", "generate", "generate_batch",
           "shift_context"]


@dataclass(frozen=True)
class Request:
    """One sequence to generate; the keywords of ``generate`` (see there) as a value.

    ``sampler`` (any object with ``sample(logits) -> int`` and ``accept(token)``) excludes
    ``sampling``/``seed``/``sampling_fields``, which otherwise build llama.cpp's chain.
    """

    prompt: str | Sequence[int]
    max_tokens: int = 256
    sampling: Any = None
    sampler: Any = None
    seed: int | None = None
    sampling_fields: Mapping[str, Any] = field(default_factory=dict)
    grammar: Any = None
    grammar_first: bool = False
    stop: str | Sequence[str] = ()
    n_keep: int = 0
    add_bos: bool | None = None
    parse_special: bool = False
    cfg_negative_prompt: str | Sequence[int] | None = None
    cfg_scale: float = 1.0
    device_sampling: bool | None = None


def generate(model: "Model", prompt: str | Sequence[int], *, max_tokens: int = 256,
             sampling: Any = None, sampler: Any = None, grammar: Any = None,
             stop: str | Sequence[str] = (), seed: int | None = None, stream: bool = False,
             grammar_first: bool = False, n_keep: int = 0, add_bos: bool | None = None,
             parse_special: bool = False, cfg_negative_prompt: str | Sequence[int] | None = None,
             cfg_scale: float = 1.0, seq_id: int = 0, device_sampling: bool | None = None,
             **sampling_fields: Any) -> GenerationResult | Stream:
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
    (``halter.engine.device_sampling``). Returns a ``GenerationResult``, or with ``stream=True`` a
    ``Stream`` of text pieces.
    """
    req = Request(prompt, max_tokens=max_tokens, sampling=sampling, sampler=sampler, seed=seed,
                  sampling_fields=sampling_fields, grammar=grammar, grammar_first=grammar_first,
                  stop=stop, n_keep=n_keep, add_bos=add_bos, parse_special=parse_special,
                  cfg_negative_prompt=cfg_negative_prompt, cfg_scale=cfg_scale,
                  device_sampling=device_sampling)
    row = _Row.prepare(model, req)
    if seq_id < 0 or seq_id + len(row.prompts) > model.cache.n_seq:
        need = "classifier-free guidance needs cache sequence" if len(row.prompts) > 1 else "no cache sequence"
        raise ValueError(f"{need} {seq_id + len(row.prompts) - 1}; load the model with "
                         f"n_seq_max >= {seq_id + len(row.prompts)}")
    row.seqs = list(range(seq_id, seq_id + len(row.prompts)))
    events = _single(model, row)
    if stream:
        return Stream(events)
    for event in events:
        if isinstance(event, GenerationResult):
            return event
    raise AssertionError("generation ended without a result")  # pragma: no cover


def generate_batch(model: "Model", requests: Sequence[Request]) -> list[GenerationResult]:
    """Run ``requests`` together, one batched forward pass per step; results in request order.

    Requests are packed into the cache's ``n_seq_max`` sequences (a guided request takes two);
    more run in consecutive chunks. Row ``i`` equals ``generate`` with the same arguments.
    """
    rows = [_Row.prepare(model, r, f" (request {i})") for i, r in enumerate(requests)]
    chunks: list[list[_Row]] = [[]]
    used = 0
    for row in rows:
        if used + len(row.prompts) > model.cache.n_seq:
            chunks.append([])
            used = 0
        row.seqs = list(range(used, used + len(row.prompts)))
        used += len(row.prompts)
        chunks[-1].append(row)
    for chunk in chunks:
        if chunk:
            for _ in _decode(model, chunk):
                pass
    return [r.result() for r in rows]


def _single(model: "Model", row: "_Row") -> Iterator[str | GenerationResult]:
    for _, piece in _decode(model, [row]):
        yield piece
    yield row.result()


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


_shift_context = shift_context          # the name earlier callers used


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


@functools.lru_cache(maxsize=32)
def _grammar_from_text(text: str) -> Any:
    """The same ``Grammar`` for the same GBNF text, so that its compiled masks carry over between calls."""
    from halter.constraints import resolve
    return resolve(grammar=text).grammar


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
                   timings=Timings(prompt_tokens=len(prompts[0])), device=device)

    @property
    def matcher(self) -> Any:
        return None if self.sampler.grammar is None else self.sampler.grammar.matcher

    def result(self) -> GenerationResult:
        return GenerationResult(text=self.out.decode("utf-8", errors="replace"), tokens=self.tokens,
                                finish_reason=self.reason, prompt_tokens=len(self.prompts[0]),  # type: ignore[arg-type]
                                timings=self.timings, seed=self.sampler.seed, matcher=self.matcher)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _decode(model: "Model", rows: list[_Row]) -> Iterator[tuple[int, str]]:
    """Decode ``rows`` (their ``seqs`` assigned, distinct) to the end; yields (row, text piece)."""
    vocab = model.vocab
    eog = set(vocab.eog_ids)
    token_bytes = vocab.token_bytes
    n_text = len(token_bytes)
    dev = model.device
    order: list[tuple[int, int]] = []                    # stacked logits row -> (row, prompt k)
    logits = []
    for i, r in enumerate(rows):
        t0 = time.perf_counter()
        r.sampler.accept_prompt(r.prompts[0])              # penalties see the prompt, grammar does not
        for k, (seq, toks) in enumerate(zip(r.seqs, r.prompts)):
            model.cache.clear(seq)
            logits.append(model.eval_prompt(toks, seq))
            order.append((i, k))
        _sync(dev)
        r.timings.prompt_ms = (time.perf_counter() - t0) * 1e3
        r.done = r.max_tokens == 0
    logits_dev = torch.stack(logits)
    overlap = dev.type == "cuda"
    bitmask = allocate_bitmask(len(rows), n_text) if overlap and any(r.matcher is not None for r in rows) else None
    t_loop = time.perf_counter()
    while True:
        active = [i for i, r in enumerate(rows) if not r.done]
        if not active:
            break
        # The forward pass for this step was launched already (async on CUDA): compute the masks
        # now, for free. On the CPU the pass has finished, so nothing is gained by computing a mask
        # before sampling: the sampler checks the chosen token alone and builds a mask only when
        # it needs one (grammar-first, or a rejected token), as llama.cpp's common sampler does.
        for i in active:
            r = rows[i]
            if r.matcher is not None and overlap:
                t = time.perf_counter()
                bitmask[i].fill(-1)
                r.matcher.fill_bitmask(bitmask[i])
                r.timings.mask_ms += (time.perf_counter() - t) * 1e3
        # the one device -> host sync per step; rows sampled on the device bring back their id only
        host = None if all(rows[i].device is not None for i in active) else logits_dev.float().cpu().numpy()
        where = {key: n for n, key in enumerate(order)}
        feed: list[tuple[int, int]] = []
        for i in active:
            if rows[i].device is not None:
                token = _sample_device(rows[i], logits_dev[where[(i, 0)]], i, bitmask)
            else:
                token = _sample(rows[i], host, where, i, bitmask, token_bytes)
            if _advance(rows[i], token, eog, token_bytes, n_text):
                feed.append((i, token))
        order, tokens, seqs = [], [], []
        for i, token in feed:                            # launch the next forward pass
            r = rows[i]
            for k, seq in enumerate(r.seqs):
                if model.cache.seq_pos_max(seq) + 1 >= model.n_ctx:
                    shift_context(model, seq, r.keep[k], r.timings)
                order.append((i, k))
                tokens.append([token])
                seqs.append(seq)
        if seqs:
            logits_dev = model.decode(tokens, seqs)
        for i in active:
            r = rows[i]
            safe = len(r.out) if r.done else releasable(r.out, r.stops)
            if safe > r.emitted:
                yield i, r.out[r.emitted:safe].decode("utf-8", errors="replace")
                r.emitted = safe
            if r.done:
                r.timings.generated_tokens = len(r.tokens)
                r.timings.decode_ms = (time.perf_counter() - t_loop) * 1e3
    _sync(dev)


def _sample(r: _Row, host: np.ndarray, where: dict[tuple[int, int], int], i: int,
            bitmask: np.ndarray | None, token_bytes: list[bytes]) -> int:
    """Sample and accept row ``i``'s next token from the step's logits."""
    t = time.perf_counter()
    row = host[where[(i, 0)]]
    if r.cfg_scale is not None:                          # llama.cpp's guidance on log-probabilities
        lp = row - np.logaddexp.reduce(row)
        neg = host[where[(i, 1)]]
        lg = neg - np.logaddexp.reduce(neg)
        row = r.cfg_scale * (lp - lg) + lg
    row = np.ascontiguousarray(row, dtype=np.float32)
    return _pick(r, t, i, bitmask, lambda mask: r.sampler.sample(row, r.grammar_first, bitmask=mask))


def _sample_device(r: _Row, logits: torch.Tensor, i: int, bitmask: np.ndarray | None) -> int:
    """``_sample`` for a row whose chain runs on the logits' device."""
    from halter.engine.device_sampling import sample_on_device
    t = time.perf_counter()
    return _pick(r, t, i, bitmask,
                 lambda mask: sample_on_device(r.device, logits, r.sampler, r.grammar_first, mask))


def _pick(r: _Row, t: float, i: int, bitmask: np.ndarray | None, choose: Any) -> int:
    """Run ``choose(mask)`` for row ``i``, accept the token, and book the grammar's and the
    sampler's time apart (started at ``t``)."""
    mask = bitmask[i] if r.matcher is not None and bitmask is not None else None
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


def _advance(r: _Row, token: int, eog: set[int], token_bytes: list[bytes], n_text: int) -> bool:
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

