"""The sampler interface and the chain that runs samplers in order (llama.cpp's sampler chain).

A sampler has a ``name`` and four operations: ``apply(candidates)`` filters or transforms the
candidates in place (a selector also sets ``candidates.selected``), ``accept(token)`` tells it
which token was chosen, ``reset()`` forgets the history, ``clone()`` returns an independent copy
with the same state. ``SamplerChain`` applies its samplers in order and forwards the rest.
"""
from __future__ import annotations

import copy
from typing import Any, Iterable

from halter.sampling.candidates import Candidates


class Sampler:
    """Base class: stateless samplers only override ``apply``; stateful ones also the rest."""

    name: str = "sampler"

    def apply(self, candidates: Candidates) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def accept(self, token: int) -> None:
        """Record the chosen token (no-op for stateless samplers)."""

    def reset(self) -> None:
        """Forget accepted tokens and restart random streams (no-op for stateless samplers)."""

    def clone(self) -> "Sampler":
        """An independent sampler with the same parameters and state."""
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class SamplerChain(Sampler):
    """Samplers applied in order; ``accept``/``reset``/``clone`` reach every one of them.

    ``sample(logits)`` builds full-vocabulary candidates from one logits row (never modifying
    it), applies the chain and returns the selected token id. It does not ``accept`` the token
    unless ``accept=True``: call ``chain.accept(token)`` once the token is final, as llama.cpp's
    ``common_sampler`` does. The candidates of the last step stay available as ``candidates``.
    """

    name = "chain"

    def __init__(self, samplers: Iterable[Sampler] = (), *, seed: int | None = None) -> None:
        self.samplers: list[Sampler] = []
        for s in samplers:
            self.add(s)
        self.seed = seed
        self.candidates: Candidates | None = None
        self.n_sample = 0

    def add(self, sampler: Sampler) -> "SamplerChain":
        """Append a sampler (``llama_sampler_chain_add``); returns the chain."""
        if not (hasattr(sampler, "apply") and hasattr(sampler, "accept") and hasattr(sampler, "reset")
                and hasattr(sampler, "clone")):
            raise TypeError(f"SamplerChain: {sampler!r} is not a sampler (needs apply/accept/reset/clone)")
        self.samplers.append(sampler)
        return self

    def apply(self, candidates: Candidates) -> None:
        for s in self.samplers:
            s.apply(candidates)

    def accept(self, token: int) -> None:
        for s in self.samplers:
            s.accept(int(token))
        self.n_sample += 1

    def reset(self) -> None:
        for s in self.samplers:
            s.reset()

    def clone(self) -> "SamplerChain":
        new = SamplerChain([s.clone() for s in self.samplers], seed=self.seed)
        return new

    def sample(self, logits: Any, *, accept: bool = False) -> int:
        """Apply the chain to one logits row and return the selected token id."""
        cand = Candidates.from_logits(logits)
        self.apply(cand)
        self.candidates = cand
        if not 0 <= cand.selected < cand.size:
            raise ValueError("SamplerChain: no token was selected; end the chain with a selector "
                             "(dist, greedy, mirostat or mirostat_v2)")
        token = int(cand.ids[cand.selected])
        if accept:
            self.accept(token)
        return token

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.samplers]

    def __len__(self) -> int:
        return len(self.samplers)

    def __iter__(self):
        return iter(self.samplers)

    def __getitem__(self, i: int) -> Sampler:
        return self.samplers[i]

    def __repr__(self) -> str:
        return "SamplerChain(logits -> " + " -> ".join(self.names) + ")"
