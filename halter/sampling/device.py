"""Sampling on torch tensors that stay on their device (GPU or CPU), batched.

Fixed shapes, no per-token host loop: optional grammar bitmask, then llama.cpp's default
order top-k -> top-p -> min-p -> temperature -> dist (or greedy when ``temperature <= 0``), for a
``[B, V]`` logits tensor at once. Only the ``[B]`` chosen tokens (and, if asked, the ``[B, k]``
short candidate list) are produced; nothing is copied to the host unless the caller does it.
The draw follows llama.cpp's backend ``dist``: the first candidate whose running probability
reaches a uniform number ``u``, with ``u`` from a seeded ``std::mt19937`` per row (``rng="llama"``:
the same stream as the numpy chain, one draw per row and step, as llama.cpp's ``dist`` draws even
when one candidate is left; it sends ``[B]`` doubles to the device) or from a torch generator on
the device (``rng="torch"``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from halter.grammar.bitmask import apply_bitmask, bitmask_to_bool
from halter.sampling.params import SamplingParams
from halter.sampling.rng import LLAMA_DEFAULT_SEED, Mt19937, resolve_seed

_DEVICE_SAMPLERS = ("top_k", "top_p", "min_p", "temperature")


@dataclass
class DeviceResult:
    """Tokens ``[B]`` plus the candidates they were drawn from (``ids``/``probs`` ``[B, k]``)."""

    tokens: torch.Tensor
    ids: torch.Tensor
    probs: torch.Tensor


class DeviceSampler:
    """Batched temperature / top-k / top-p / min-p / greedy / dist on torch tensors.

    ``top_k <= 0`` keeps the whole (sorted) vocabulary; ``top_p >= 1`` and ``min_p <= 0`` are
    off; ``temperature <= 0`` is greedy. ``seed`` seeds one ``std::mt19937`` per batch row
    (row ``b`` uses ``seed + b``) when ``rng="llama"``, or a torch generator on the device when
    ``rng="torch"``.
    """

    def __init__(self, *, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 min_keep: int = 0, seed: int | None = LLAMA_DEFAULT_SEED, rng: str = "llama") -> None:
        if rng not in ("llama", "torch"):
            raise ValueError(f"DeviceSampler: rng must be 'llama' or 'torch', got {rng!r}")
        self.temperature = float(temperature)
        self.top_k = int(top_k)
        self.top_p = float(top_p)
        self.min_p = float(min_p)
        self.min_keep = int(min_keep)
        self.seed = resolve_seed(seed)
        self.rng = rng
        self._streams: list[Mt19937] = []
        self._generator: torch.Generator | None = None
        self._pinned: dict[tuple, tuple[torch.Tensor, Any]] = {}

    @classmethod
    def from_params(cls, params: SamplingParams, *, rng: str = "llama") -> "DeviceSampler":
        """The device sampler for ``params``; raises if ``params`` turn on a sampler it lacks."""
        off = []
        if params.repeat_penalty != 1.0 or params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
            off.append("penalties")
        if params.dry_multiplier != 0.0:
            off.append("dry")
        if params.top_n_sigma > 0:
            off.append("top_n_sigma")
        if params.typical_p < 1.0:
            off.append("typ_p")
        if params.xtc_probability > 0 and params.xtc_threshold <= 0.5:
            off.append("xtc")
        if params.mirostat:
            off.append("mirostat")
        if params.dynatemp_range > 0:
            off.append("dynatemp")
        if params.logit_bias or params.ignore_eos:
            off.append("logit_bias")
        if off:
            raise ValueError(f"DeviceSampler does not implement {', '.join(off)}; use the numpy chain")
        order = [n for n in params.samplers if n in _DEVICE_SAMPLERS]
        if order != [n for n in _DEVICE_SAMPLERS if n in order]:
            raise ValueError(f"DeviceSampler applies top_k, top_p, min_p, temperature in that order; got {order}")
        return cls(temperature=params.temperature, top_k=params.top_k if "top_k" in order else 0,
                   top_p=params.top_p if "top_p" in order else 1.0, min_p=params.min_p if "min_p" in order else 0.0,
                   min_keep=params.min_keep, seed=params.seed, rng=rng)

    def _uniform(self, batch: int, device: torch.device, n_kept: torch.Tensor) -> torch.Tensor:
        if self.rng == "torch":
            if self._generator is None or self._generator.device != device:
                self._generator = torch.Generator(device=device)
                self._generator.manual_seed(self.seed)
            return torch.rand(batch, generator=self._generator, device=device, dtype=torch.float64)
        self._stream(batch - 1)
        # llama.cpp's dist draws once per step whatever is left, so nothing is read back
        u = np.array([s.uniform_double() for s in self._streams[:batch]], dtype=np.float64)
        return self.to_device(u, device)

    def to_device(self, arr: np.ndarray, device: torch.device) -> torch.Tensor:
        """``arr`` as a tensor on ``device``. To CUDA through a pinned buffer this sampler reuses: a
        copy from pageable memory would wait for the stream (the forward pass still running), so
        the sampling kernels would launch only after it instead of queueing behind it."""
        if device.type != "cuda":
            return torch.from_numpy(np.array(arr, copy=True)).to(device)
        key = (arr.dtype.str, arr.shape, device)
        slot = self._pinned.get(key)
        if slot is None:
            slot = self._pinned[key] = (torch.from_numpy(np.empty_like(arr)).pin_memory(), torch.cuda.Event())
        host, copied = slot
        copied.synchronize()                   # the previous copy out of this buffer has finished
        host.numpy()[...] = arr
        out = host.to(device, non_blocking=True)
        copied.record()
        return out

    def reset(self) -> None:
        self._streams.clear()
        self._generator = None

    @torch.no_grad()
    def sample(self, logits: torch.Tensor, bitmask: Any = None, *, return_candidates: bool = False) -> Any:
        """Tokens for a ``[V]`` or ``[B, V]`` logits tensor (not modified), on the tensor's device."""
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
            raise TypeError("DeviceSampler.sample: logits must be a floating point torch tensor")
        single = logits.dim() == 1
        x = logits.unsqueeze(0) if single else logits
        if x.dim() != 2 or x.shape[-1] == 0:
            raise ValueError(f"DeviceSampler.sample: logits must be [V] or [B, V], got {tuple(logits.shape)}")
        x = x.to(torch.float32, copy=True)
        if bitmask is not None:
            bm = bitmask
            if isinstance(bitmask, np.ndarray):          # to the device without waiting for the stream
                arr = np.ascontiguousarray(bitmask)
                bm = self.to_device(arr.view(np.int32) if arr.dtype == np.uint32 else arr, x.device)
            apply_bitmask(x, bm.unsqueeze(0) if bm.dim() == 1 else bm)
        tokens, ids, probs = self._chain(x, lambda B, kept: self._uniform(B, x.device, kept))
        if single:
            tokens, ids, probs = tokens[0], ids[0], probs[0]
        if return_candidates:
            return DeviceResult(tokens=tokens, ids=ids, probs=probs)
        return tokens

    @torch.no_grad()
    def sample_checked(self, logits: torch.Tensor, bitmask: np.ndarray, vocab_size: int) -> tuple[int, int, bool]:
        """llama.cpp's resample-on-reject for one ``[V]`` row, both draws in one pass and one copy.

        Returns ``(raw, redrawn, redrawn_ok)``: the token drawn from the raw logits, the token the
        redraw after a rejection gives (the logits masked by ``bitmask``, the stream's next draw),
        and whether that token's masked logit is finite. Nothing is drawn from the row's stream:
        the caller commits one draw (``raw`` kept) or two (``commit_draws``). Needs ``rng="llama"``.
        """
        if self.rng != "llama":
            raise ValueError("DeviceSampler.sample_checked needs rng='llama'")
        V = logits.shape[-1]
        keep = self._keep_rows(bitmask, vocab_size, V)          # [2, V]: row 0 raw, row 1 masked
        # both rows in one kernel; the mask's bits are unpacked on the host, while the forward pass
        # still runs on the device, rather than by a few kernels queued after it
        x = torch.where(self.to_device(keep, logits.device), logits.to(torch.float32), float("-inf"))
        u = self.to_device(np.array(self._stream(0).peek_doubles(2)), x.device)
        tokens, _, _ = self._chain(x, lambda B, kept: u)
        ok = torch.isfinite(x[1].gather(0, tokens[1:])).long()
        raw, redrawn, finite = torch.cat([tokens, ok]).tolist()    # the one device -> host copy
        return raw, redrawn, bool(finite)

    @staticmethod
    def _keep_rows(bitmask: np.ndarray, vocab_size: int, n_logits: int) -> np.ndarray:
        """``[2, n_logits]`` bools: row 0 all kept, row 1 the tokens ``bitmask`` allows (none at or
        past ``vocab_size``)."""
        keep = np.ones((2, n_logits), dtype=bool)
        n = min(vocab_size, n_logits, 32 * len(bitmask))
        keep[1, :n] = bitmask_to_bool(bitmask, n)
        keep[1, n:] = False
        return keep

    def commit_draws(self, n: int) -> None:
        """Advance row 0's stream by ``n`` draws (after ``sample_checked``); greedy draws none."""
        if self.temperature > 0:
            stream = self._stream(0)
            for _ in range(n):
                stream.uniform_double()

    def _stream(self, row: int) -> Mt19937:
        while len(self._streams) <= row:
            self._streams.append(Mt19937((self.seed + len(self._streams)) & 0xFFFFFFFF))
        return self._streams[row]

    def _chain(self, x: torch.Tensor, uniform) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """top-k, top-p, min-p, temperature, dist (or greedy) on float32 ``[B, V]`` logits (modified)."""
        B, V = x.shape
        k = V if self.top_k <= 0 else min(self.top_k, V)
        vals, ids = torch.topk(x, k, dim=-1, sorted=True)  # fixed [B, k]
        pos = torch.arange(k, device=x.device)
        keep = torch.ones_like(vals, dtype=torch.bool)
        if self.top_p < 1.0:
            probs = torch.softmax(vals, dim=-1)
            before = torch.cumsum(probs, dim=-1) - probs  # mass strictly before each entry
            keep &= (before < np.float32(self.top_p)) | (pos < max(self.min_keep, 1))
        if self.min_p > 0.0:
            thr = vals[:, :1] + float(np.log(np.float32(self.min_p)))
            keep &= (vals >= thr) | (pos < max(self.min_keep, 1))
        vals = vals.masked_fill(~keep, float("-inf"))
        if self.temperature <= 0:
            choice = torch.zeros(B, dtype=torch.long, device=x.device)  # sorted: the first is the best
            probs = (pos == 0).to(torch.float32).expand(B, k)
        else:
            vals = vals / np.float32(self.temperature)
            probs = torch.softmax(vals, dim=-1)
            cum = torch.cumsum(probs.to(torch.float64), dim=-1)
            target = uniform(B, keep.sum(dim=-1)) * cum[:, -1]
            choice = (cum < target.unsqueeze(-1)).sum(dim=-1).clamp_(max=k - 1)
        return ids.gather(1, choice.unsqueeze(-1)).squeeze(-1), ids, probs
