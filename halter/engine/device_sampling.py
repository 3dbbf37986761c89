"""Sampling on the device that holds the logits: only the chosen token id comes back to the host.

On CUDA the default chain (top-k, top-p, min-p, temperature, dist, or greedy) runs as
``halter.sampling.device.DeviceSampler`` on the logits the forward pass left on the GPU, and the
grammar's bitmask (computed on the host while the forward pass runs) is applied there too. The
resample-on-reject order of llama.cpp's common sampler is kept: the chain draws from the raw
logits, the host checks that one token against the bitmask, and only a rejected token is drawn
again with the mask applied, from the same random stream; ``grammar_first`` masks first. The
draws use the chain's seed and ``std::mt19937`` stream, so the device path picks the tokens the
CPU chain picks (up to float rounding at a boundary).

A request whose chain has a sampler with no device version (penalties, DRY, mirostat, typical,
XTC, logit bias, ``ignore_eos``, a custom sampler object) or that uses classifier-free guidance
samples on the host as before.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from halter.errors import NoValidTokenError
from halter.grammar.bitmask import allocate_bitmask
from halter.sampling.device import DeviceSampler


def device_sampler_for(chain: Any, *, cfg: bool) -> DeviceSampler | None:
    """The device version of ``chain`` (built by ``SamplingParams.build``), or ``None`` if it has none."""
    params = getattr(chain, "params", None)
    if params is None or cfg:
        return None
    try:
        return DeviceSampler.from_params(params)
    except ValueError:
        return None


def resolve(policy: bool | None, device: torch.device, chain: Any, *, cfg: bool) -> DeviceSampler | None:
    """``policy`` None: on CUDA when the chain has a device version; True: required; False: never."""
    if policy is False or (policy is None and device.type != "cuda"):
        return None
    ds = device_sampler_for(chain, cfg=cfg)
    if ds is None and policy:
        raise ValueError("device_sampling=True, but this request's sampler chain has no device version "
                         "(penalties, DRY, mirostat, typical, XTC, logit bias, ignore_eos, a custom "
                         "sampler, or classifier-free guidance)")
    return ds


def _allowed(token: int, bitmask: np.ndarray, n_text: int) -> bool:
    return 0 <= token < n_text and bool((int(bitmask[token >> 5]) >> (token & 31)) & 1)


def sample_on_device(ds: DeviceSampler, logits: torch.Tensor, common: Any, grammar_first: bool,
                     bitmask: np.ndarray | None) -> int:
    """One token from a ``[V]`` device logits row; ``common`` is the row's ``CommonSampler``.

    The grammar's ``bitmask`` is computed here when the caller has none (on the CPU nothing is
    computed ahead). Raises ``NoValidTokenError`` when the mask leaves no finite logit.
    """
    grammar = common.grammar
    if grammar is None:
        return int(ds.sample(logits))
    n_text = grammar.vocab_size
    if not grammar_first and bitmask is not None and ds.rng == "llama":
        # the mask is ready (computed while the forward pass ran): both draws in one pass, so a
        # rejected token costs no second round trip; the stream advances as if drawn one by one
        raw, redrawn, ok = ds.sample_checked(logits, bitmask, n_text)
        if _allowed(raw, bitmask, n_text):
            ds.commit_draws(1)
            return raw
        common.n_resampled += 1
        ds.commit_draws(2)
        if not ok:
            raise NoValidTokenError("the grammar allows no token with a finite logit here")
        return redrawn
    if not grammar_first:
        token = int(ds.sample(logits))
        if bitmask is not None:
            if _allowed(token, bitmask, n_text):
                return token
        elif grammar.is_allowed(token):
            return token
        common.n_resampled += 1
    if bitmask is None:
        bitmask = allocate_bitmask(1, n_text)[0]
        bitmask.fill(-1)
        grammar.matcher.fill_bitmask(bitmask)
    mask = ds.to_device(np.ascontiguousarray(bitmask, dtype=np.int32), logits.device)
    row = logits[:n_text] if logits.shape[-1] > n_text else logits
    token = int(ds.sample(row, mask))
    if not _allowed(token, bitmask, n_text) or not torch.isfinite(row[token]).item():
        raise NoValidTokenError("the grammar allows no token with a finite logit here")
    return token
