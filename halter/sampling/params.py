"""Sampling parameters as llama-server names them, sampler names as llama.cpp spells them, and
the chain llama.cpp's ``common_sampler_init`` builds from them.

Default order: ``penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature``, with
logit-bias first when any bias is set and the selector last (``dist``, or ``greedy`` when
``temperature <= 0``). Mirostat replaces the whole list by ``temp`` + mirostat.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping, Sequence

from halter.sampling.base import Sampler, SamplerChain
from halter.sampling.dry import Dry
from halter.sampling.penalties import LogitBias, Penalties
from halter.sampling.rng import LLAMA_DEFAULT_SEED, resolve_seed
from halter.sampling.selectors import Dist, Greedy, Mirostat, MirostatV2
from halter.sampling.temperature import TempExt, Temperature
from halter.sampling.truncation import MinP, TopK, TopNSigma, TopP, Typical, Xtc

_WHOLE_CONTEXT = 2**31 - 1
DEFAULT_SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")

# canonical names and aliases as common/sampling.cpp accepts them
_CANONICAL = {"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature",
              "infill", "adaptive_p"}
_ALIASES = {"top-k": "top_k", "top-p": "top_p", "top-n-sigma": "top_n_sigma", "nucleus": "top_p",
            "typical-p": "typ_p", "typical": "typ_p", "typ-p": "typ_p", "typ": "typ_p", "min-p": "min_p",
            "temp": "temperature", "adaptive-p": "adaptive_p"}
_LETTERS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p", "p": "top_p",
            "m": "min_p", "x": "xtc", "t": "temperature", "i": "infill", "a": "adaptive_p"}
_UNSUPPORTED = {"infill", "adaptive_p"}


def sampler_name(name: str) -> str:
    """The canonical llama.cpp name for a sampler name or alias (``"nucleus"`` -> ``"top_p"``)."""
    key = name.strip()
    if key in _CANONICAL:
        return key
    if key in _ALIASES:
        return _ALIASES[key]
    valid = ", ".join(sorted(_CANONICAL | set(_ALIASES)))
    raise ValueError(f"unknown sampler name {name!r}; valid names: {valid}")


def parse_samplers(spec: str | Sequence[str]) -> tuple[str, ...]:
    """Parse ``--samplers "a;b;c"``, a list of names, or a ``--sampling-seq`` letter string."""
    if isinstance(spec, str):
        text = spec.strip()
        if ";" in text:
            names = [n for n in text.split(";") if n.strip()]
        elif text in _CANONICAL or text in _ALIASES:
            names = [text]
        elif text and all(ch in _LETTERS for ch in text):
            return parse_sampling_seq(text)
        elif not text:
            names = []
        else:
            names = [text]
    else:
        names = list(spec)
        for n in names:
            if not isinstance(n, str):
                raise TypeError(f"sampler names must be strings, got {n!r}")
    return tuple(sampler_name(n) for n in names)


def parse_sampling_seq(seq: str) -> tuple[str, ...]:
    """Parse llama.cpp's one-letter ``--sampling-seq`` (e d s k y p m x t)."""
    out = []
    for pos, ch in enumerate(seq):
        if ch not in _LETTERS:
            raise ValueError(f"unknown sampler letter {ch!r} at position {pos} of {seq!r}; "
                             f"valid letters: {''.join(_LETTERS)}")
        out.append(_LETTERS[ch])
    return tuple(out)


def _frozen_bias(value: Any) -> Mapping[int, float]:
    if isinstance(value, Mapping):
        items = value.items()
    else:
        items = value
    out: dict[int, float] = {}
    for item in items:
        try:
            tok, bias = item
        except (TypeError, ValueError):
            raise ValueError(f"logit_bias: expected (token, bias) pairs, got {item!r}") from None
        if isinstance(tok, str) and tok.lstrip("-").isdigit():
            tok = int(tok)
        if isinstance(tok, bool) or not isinstance(tok, int):
            raise TypeError(f"logit_bias: token ids must be ints, got {tok!r}")
        if bias is False:  # llama-server: [[id, false]] bans the token
            bias = -math.inf
        elif isinstance(bias, bool) or not isinstance(bias, (int, float)):
            raise TypeError(f"logit_bias: bias for token {tok} must be a number or false, got {bias!r}")
        out[tok] = out.get(tok, 0.0) + float(bias)
    return MappingProxyType(out)


@dataclass(frozen=True)
class SamplingParams:
    """One definition of the sampling parameters, named and defaulted as llama-server's fields.

    ``samplers`` takes ``"a;b;c"``, a sequence of names, or ``--sampling-seq`` letters; it is
    stored as a tuple of canonical names. ``seed=None`` (or -1) means random; ``build`` resolves it
    once so ``chain.seed`` can replay the run.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = 64
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", '"', "*")
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    logit_bias: Mapping[int, float] = field(default_factory=lambda: MappingProxyType({}))
    ignore_eos: bool = False
    min_keep: int = 0
    seed: int | None = None
    samplers: str | Sequence[str] = DEFAULT_SAMPLERS

    def __post_init__(self) -> None:
        object.__setattr__(self, "samplers", parse_samplers(self.samplers))
        object.__setattr__(self, "logit_bias", _frozen_bias(self.logit_bias))
        object.__setattr__(self, "dry_sequence_breakers", tuple(self.dry_sequence_breakers))
        if self.mirostat not in (0, 1, 2):
            raise ValueError(f"mirostat must be 0 (off), 1 or 2, got {self.mirostat!r}")
        for name in ("top_k", "repeat_last_n", "dry_allowed_length", "dry_penalty_last_n", "min_keep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {v!r}")
        if self.min_keep < 0:
            raise ValueError(f"min_keep must be >= 0, got {self.min_keep}")
        for name in ("temperature", "top_p", "min_p", "typical_p", "top_n_sigma", "repeat_penalty",
                     "presence_penalty", "frequency_penalty", "dry_multiplier", "dry_base", "xtc_probability",
                     "xtc_threshold", "mirostat_tau", "mirostat_eta", "dynatemp_range", "dynatemp_exponent"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise TypeError(f"{name} must be a number, got {v!r}")
        if self.seed is not None:
            resolve_seed(self.seed)  # validates the range

    def replace(self, **changes: Any) -> "SamplingParams":
        """A copy with some fields changed."""
        from dataclasses import replace
        return replace(self, **changes)

    def build(self, n_vocab: int, *, vocab: Sequence[object] | None = None, eog_ids: Iterable[int] = (),
              n_ctx_train: int | None = None, tokenize: Callable[[bytes], list[int]] | None = None) -> SamplerChain:
        """The sampler chain llama.cpp's ``common_sampler_init`` builds (grammar not included).

        ``vocab`` (token pieces) is needed only when DRY is on; ``eog_ids`` only for
        ``ignore_eos``; ``n_ctx_train`` is what ``dry_penalty_last_n = -1`` means.
        """
        if isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or n_vocab <= 0:
            raise ValueError(f"build: n_vocab must be a positive int, got {n_vocab!r}")
        seed = resolve_seed(self.seed)
        samplers: list[Sampler] = []
        bias = dict(self.logit_bias)
        if self.ignore_eos:
            eog = list(eog_ids)
            if not eog:
                raise ValueError("ignore_eos needs eog_ids (the end-of-generation token ids)")
            for t in eog:
                bias[int(t)] = -math.inf
        if bias:
            samplers.append(LogitBias(n_vocab, bias))
        if self.mirostat == 0:
            for name in self.samplers:
                samplers.append(self._make(name, n_vocab, seed, vocab, n_ctx_train, tokenize))
            samplers.append(Greedy() if self.temperature <= 0 else Dist(seed))
        elif self.mirostat == 1:
            samplers += [Temperature(self.temperature),
                         Mirostat(n_vocab, seed, self.mirostat_tau, self.mirostat_eta, 100)]
        else:
            samplers += [Temperature(self.temperature), MirostatV2(seed, self.mirostat_tau, self.mirostat_eta)]
        chain = SamplerChain(samplers, seed=seed)
        chain.params = self.replace(seed=seed)     # type: ignore[attr-defined]  # what built it (device sampling)
        return chain

    def _make(self, name: str, n_vocab: int, seed: int, vocab: Any, n_ctx_train: int | None,
              tokenize: Any) -> Sampler:
        if name in _UNSUPPORTED:
            raise ValueError(f"sampler {name!r} is not supported by halter")
        if name == "penalties":
            return Penalties(self.repeat_last_n, self.repeat_penalty, self.frequency_penalty, self.presence_penalty)
        if name == "dry":
            last_n = self.dry_penalty_last_n
            if last_n == -1:    # the whole context, as llama.cpp's common layer used to resolve it
                last_n = n_ctx_train if n_ctx_train else _WHOLE_CONTEXT
            return Dry(self.dry_multiplier, self.dry_base, self.dry_allowed_length, last_n,
                       self.dry_sequence_breakers, vocab=vocab, n_ctx_train=n_ctx_train, tokenize=tokenize)
        if name == "top_n_sigma":
            return TopNSigma(self.top_n_sigma)
        if name == "top_k":
            return TopK(self.top_k)
        if name == "typ_p":
            return Typical(self.typical_p, self.min_keep)
        if name == "top_p":
            return TopP(self.top_p, self.min_keep)
        if name == "min_p":
            return MinP(self.min_p, self.min_keep)
        if name == "xtc":
            return Xtc(self.xtc_probability, self.xtc_threshold, self.min_keep, seed)
        if name == "temperature":
            return TempExt(self.temperature, self.dynatemp_range, self.dynatemp_exponent)
        raise ValueError(f"unknown sampler name {name!r}")  # pragma: no cover - names are validated


# -- make_sampler: llama.cpp's llama_sampler_init_* by name -----------------------------------

def _grammar(grammar: Any) -> Sampler:
    from halter.sampling.grammar import GrammarSampler
    return GrammarSampler(grammar)


_FACTORIES: dict[str, Callable[..., Sampler]] = {
    "greedy": Greedy, "dist": Dist, "top_k": TopK, "top_p": TopP, "min_p": MinP, "typical": Typical,
    "temp": Temperature, "temp_ext": TempExt, "xtc": Xtc, "top_n_sigma": TopNSigma, "mirostat": Mirostat,
    "mirostat_v2": MirostatV2, "penalties": Penalties, "dry": Dry, "logit_bias": LogitBias, "grammar": _grammar,
}
_FACTORY_ALIASES = {"typ_p": "typical", "temperature": "temp", "nucleus": "top_p"}


def make_sampler(name: str, *args: Any, **params: Any) -> Sampler:
    """Build one sampler by its llama.cpp name with the C API's parameter names.

    ``make_sampler("top_k", k=40)``, ``make_sampler("top_p", p=0.95, min_keep=1)``,
    ``make_sampler("dist", seed=42)``, ``make_sampler("temp_ext", t=0.8, delta=0.5, exponent=1)``,
    ``make_sampler("mirostat_v2", seed=1, tau=5, eta=0.1)``, ``make_sampler("grammar", compiled)``.
    Dashes and underscores are interchangeable (``"top-k"``).
    """
    key = name.strip().replace("-", "_")
    key = _FACTORY_ALIASES.get(key, key)
    factory = _FACTORIES.get(key)
    if factory is None:
        raise ValueError(f"unknown sampler {name!r}; valid names: {', '.join(sorted(_FACTORIES))}")
    try:
        return factory(*args, **params)
    except TypeError as e:
        raise TypeError(f"make_sampler({name!r}): {e}") from None


__all__ = ["SamplingParams", "make_sampler", "parse_samplers", "parse_sampling_seq", "sampler_name",
           "DEFAULT_SAMPLERS", "LLAMA_DEFAULT_SEED"]
