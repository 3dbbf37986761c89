"""``Model``: a GGUF file loaded into the PyTorch transformer, with its KV cache and tokenizer.

``Model.load`` picks the device and dtype, reads the file, makes its tensors the transformer's
parameters (``halter.engine.weights``) and allocates the cache; ``decode`` evaluates tokens appended to cached sequences (llama.cpp's
``llama_decode``); ``logits`` is the stateless convenience for a whole token list. One-token
decode steps go through ``halter.engine.static_decode`` in the static modes (``set_decode``).
This class only decodes: the generation loop is ``halter.engine.scheduler`` (driven by
``halter.engine.generation``), and ``halter.Model`` (``halter.api``) adds ``generate``,
``generate_batch`` and ``model(...)`` on top.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch

from halter.engine import fused_decode
from halter.engine.config import ModelConfig
from halter.engine.gguf_loader import Progress, load_gguf
from halter.engine.kv_cache import KVCache
from halter.engine.packed_cache import enabled as packed_cache_enabled, key_for as packed_cache_key, \
    store_later as packed_cache_store
from halter.engine.rope import Rope, rope_for
from halter.engine.static_decode import StaticDecoder, resolve_mode
from halter.engine.thread_governor import ThreadGovernor
from halter.engine.transformer import Transformer
from halter.engine.weights import fuse_dense_gate_up, install_quantized, packed_buffers, skip_init, state_dict, \
    trim_heap
from halter.errors import ModelLoadError

if TYPE_CHECKING:
    from halter.engine.tokenizer import Tokenizer
    from halter.vocab import Vocabulary


def default_device() -> torch.device:
    """CUDA when available, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA devices that support it, else fp16 there; fp32 on the CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def physical_cores() -> int:
    """Physical CPU cores (distinct (package, core) pairs in ``/proc/cpuinfo``), else ``os.cpu_count()``."""
    try:
        cores, phys = set(), None
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "physical id":
                    phys = value.strip()
                elif key == "core id":
                    cores.add((phys, value.strip()))
        if cores:
            return len(cores)
    except OSError:
        pass
    return os.cpu_count() or 1


def set_threads(n_threads: int | None) -> None:
    """``torch.set_num_threads(n_threads)``; ``None``: at most the physical cores."""
    if n_threads is None:
        n = physical_cores()
        if torch.get_num_threads() > n:
            torch.set_num_threads(n)
        return
    if n_threads < 1:
        raise ValueError(f"n_threads must be positive, not {n_threads}")
    torch.set_num_threads(int(n_threads))


_DTYPES = {"f32": torch.float32, "float32": torch.float32, "f16": torch.float16,
           "float16": torch.float16, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16}


class Model:
    """A loaded GGUF model: transformer, KV cache for ``n_seq_max`` sequences, tokenizer."""

    def __init__(self, path: str, config: ModelConfig, net: Transformer, rope: Rope,
                 cache: KVCache, n_batch: int, decode: str = "auto", *, adapt_threads: bool = False) -> None:
        self.path, self.config, self.net, self.rope, self.cache = path, config, net, rope, cache
        self.n_batch = n_batch
        self.adapt_threads = adapt_threads       # CPU decode steps on fewer threads while cores are busy
        self._tokenizer: "Tokenizer | None" = None
        self._vocab: "Vocabulary | None" = None
        self._static: StaticDecoder | None = None
        self.decode_mode = "eager"
        self.set_decode(decode)

    @classmethod
    def load(cls, path: str | os.PathLike[str], device: str | torch.device | None = None,
             dtype: str | torch.dtype | None = None, n_ctx: int | None = None, *,
             n_batch: int = 512, n_seq_max: int = 2, progress: Progress = True,
             decode: str = "auto", weights: str = "packed", n_threads: int | None = None,
             packed_cache: bool = True) -> "Model":
        """Load ``path`` (a GGUF file, or ``hf://OWNER/REPO/FILE.gguf``) for inference.

        An ``hf://`` path is downloaded into halter's model cache first (``halter.fetch.pull``;
        needs ``huggingface_hub``), or taken from the cache when it is there.

        ``device`` defaults to CUDA when available; ``dtype`` to bf16/fp16 on CUDA and fp32 on the
        CPU (also accepts "f32", "f16", "bf16"). ``n_ctx`` (default: the training context, at most
        4096) is the cache length per sequence; ``n_seq_max`` sequences can be cached at once
        (two by default, for classifier-free guidance). ``progress``: True prints to stderr,
        False is quiet, a callable gets ``(tensors_done, tensors_total, name)``. ``decode`` is the
        decode-step mode (see ``set_decode``). ``weights="packed"`` (default) keeps quantized
        matrices quantized in memory (``halter.engine.qlinear``); ``"dequantize"`` decodes every
        tensor to ``dtype`` at load (more memory; the reference the packed path is tested against).
        ``n_threads`` sets torch's CPU threads (``torch.set_num_threads``, process-wide); by
        default the physical cores when torch uses more threads than that. ``packed_cache``: on the
        CPU, keep the packed matrices in halter's cache directory after the first load of a file
        and map them on later loads instead of packing again (``halter.engine.packed_cache``;
        ``HALTER_PACKED_CACHE=0`` also turns it off).
        """
        dev = default_device() if device is None else torch.device(device)
        if isinstance(dtype, str):
            if dtype.lower() not in _DTYPES:
                raise ValueError(f"dtype {dtype!r} not understood (use one of {sorted(_DTYPES)})")
            dtype = _DTYPES[dtype.lower()]
        dt = default_dtype(dev) if dtype is None else dtype
        resolve_mode(decode, dev)                 # a bad mode fails before the file is read
        if n_batch < 1 or n_seq_max < 1:
            raise ValueError(f"n_batch ({n_batch}) and n_seq_max ({n_seq_max}) must be positive")
        if weights not in ("packed", "dequantize"):
            raise ValueError(f"weights must be 'packed' or 'dequantize', not {weights!r}")
        set_threads(n_threads)
        from halter.fetch import resolve_model_path
        path = resolve_model_path(path, progress=bool(progress))
        config, tensors, _ = load_gguf(path, dtype=dt, device=dev, progress=progress, weights=weights)
        n_ctx = min(config.n_ctx_train, 4096) if n_ctx is None else int(n_ctx)
        if n_ctx < 1:
            raise ValueError(f"n_ctx must be positive, not {n_ctx}")
        with torch.device("meta"), skip_init():
            net = Transformer(config)
        try:
            key = packed_cache_key(path, dt) if packed_cache and dev.type == "cpu" and weights == "packed" \
                and packed_cache_enabled() else None
            rest, from_cache = install_quantized(net, state_dict(config, tensors), dt, dev, cache_key=key)
            if dev.type == "cuda":
                fuse_dense_gate_up(net, rest)
            net.load_state_dict(rest, assign=True, strict=True)
        except RuntimeError as exc:
            raise ModelLoadError(f"tensors do not fit the model ({exc})", path=path) from exc
        net.eval().requires_grad_(False)
        rope = rope_for(config, tensors, n_ctx, dev)     # rope scaling; LongRoPE depends on n_ctx
        if config.rope_base_swa:      # gemma3: sliding layers rotate with their own base, unscaled
            net.rope_swa = Rope(config.head_dim, config.rope_base_swa, config.rope_type, device=dev)
        cache = KVCache(n_layer=config.n_layer, n_seq=n_seq_max, n_ctx=n_ctx,
                        n_head_kv=config.n_head_kv, head_dim=config.head_dim, rope=rope,
                        dtype=dt, device=dev)
        if net.rope_swa is not None:
            cache.layer_ropes = [net.rope_swa if swa else rope for swa in config.swa_layers]
        if dev.type == "cpu":
            trim_heap()
        if key is not None and not from_cache:    # a model that loaded: its packing for later loads
            packed_cache_store(key, packed_buffers(net))
        return cls(os.fspath(path), config, net, rope, cache, n_batch, decode, adapt_threads=n_threads is None)

    def set_decode(self, mode: str = "auto", *, backend: str | Callable[..., Any] | None = None,
                   min_span: int | None = None) -> None:
        """How one-token decode steps run: ``"eager"``, ``"static"``, ``"trace"``, ``"fused"``,
        ``"compile"``, ``"cuda-graph"``.

        ``"auto"`` is ``"cuda-graph"`` on CUDA; on the CPU ``"fused"`` for a float32 model whose
        matrices stay quantized (``weights="packed"``) where numba is installed, else ``"trace"``
        (``"eager"`` for a model with a matrix dequantized at every product: Q2_K, Q3_K, or rows
        the int4 kernel cannot take, whose block decoding TorchScript's tracer cannot record; an
        explicit ``"trace"`` there falls back to the untraced step with a warning). The static
        modes run ``halter.engine.static_decode``'s fixed-shape step (attention over a span bucket
        of cells: powers of two from ``min_span`` (default 64 on the CPU, where attention's cost
        follows the span, 256 on CUDA), and ``n_ctx``); ``"trace"`` records it per (batch, span)
        bucket on first use with ``torch.jit.trace`` (a fraction of a second) and runs it as one
        TorchScript graph; ``"fused"`` runs steps whose sequences hold at most 1,024 cells each as
        the products with numba-compiled code between them (``halter.engine.fused_decode``,
        over exactly the sequences' rows) and traces the others; ``"compile"`` compiles the
        step with ``torch.compile(backend=backend or "inductor")``, ``"cuda-graph"`` captures one
        CUDA graph per bucket on first use (with a ``backend``, of the step compiled with it:
        inductor fuses the elementwise work into fewer kernels). Prompt chunks of several tokens
        and ``all_logits`` calls always run eagerly. Previously traced or compiled steps and graphs
        are dropped. An explicit ``"fused"`` the model cannot run raises ``ValueError`` saying why.
        """
        resolved = resolve_mode(mode, self.device)
        if mode == "auto" and resolved == "trace" and fused_decode.unsupported(self.net, self.cache) is None:
            resolved = "fused"
        elif mode == "auto" and resolved == "trace" and self._dequantizes_per_product():
            resolved = "eager"      # the tracer cannot record block decoding (dtype views): see above
        elif resolved == "fused":
            reason = fused_decode.unsupported(self.net, self.cache)
            if reason is not None:
                raise ValueError(f"decode mode 'fused' cannot run this model: {reason}")
        if min_span is None:
            min_span = 256 if self.device.type == "cuda" else 64
        governor = ThreadGovernor(torch.get_num_threads()) \
            if self.adapt_threads and self.device.type == "cpu" and torch.get_num_threads() > 1 else None
        self._static = None if resolved == "eager" else \
            StaticDecoder(self.net, self.rope, self.cache, resolved, backend=backend, min_span=min_span,
                          governor=governor)
        self.decode_mode = resolved

    def _dequantizes_per_product(self) -> bool:
        """Does some matrix of the model run through the dequantize-per-product kernel?"""
        return any("dequant" in getattr(m, "kernels", ()) for m in self.net.modules())

    # -- properties ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.cache.k.device

    @property
    def dtype(self) -> torch.dtype:
        """The compute dtype (activations, cache, dequantized weights)."""
        return self.cache.k.dtype

    @property
    def n_ctx(self) -> int:
        """Tokens each sequence can hold in the cache."""
        return self.cache.n_ctx

    @property
    def n_vocab(self) -> int:
        """Rows of the output layer (may exceed the tokenizer's vocabulary)."""
        return self.config.n_vocab

    @property
    def tokenizer(self) -> "Tokenizer":
        """The GGUF file's tokenizer (``halter.engine.tokenizer.Tokenizer``), loaded on first use."""
        if self._tokenizer is None:
            from halter.engine.tokenizer import Tokenizer
            self._tokenizer = Tokenizer.from_gguf(self.path)
        return self._tokenizer

    @property
    def vocab(self) -> "Vocabulary":
        """The file's ``halter.vocab.Vocabulary`` (token bytes, EOG ids), the tokenizer's."""
        if self._vocab is None:
            try:
                self._vocab = self.tokenizer.vocab
            except ImportError:   # tokenizer module absent: the vocabulary alone still loads
                from halter.vocab import Vocabulary
                self._vocab = Vocabulary.from_gguf(self.path)
        return self._vocab

    # -- evaluation ---------------------------------------------------------------------------
    @torch.inference_mode()
    def decode(self, tokens: Sequence[Sequence[int]] | torch.Tensor, seq_ids: Sequence[int],
               *, all_logits: bool = False) -> torch.Tensor:
        """Append ``tokens [B][T]`` to sequences ``seq_ids`` (one row each) and evaluate them.

        Positions continue from each sequence's last cached position. Returns float32 logits on
        the model's device: ``[B, T, n_vocab]`` with ``all_logits``, else ``[B, n_vocab]`` for the
        last token of each row. Rows must have the same length; evaluate longer prompts with
        ``eval_prompt`` (chunks of ``n_batch``). On CUDA the call returns before the GPU is done:
        work on the CPU before touching the logits overlaps with the forward pass. One-token
        steps (``T == 1``, last logits) use the static step unless the decode mode is eager.
        """
        ids = torch.as_tensor(tokens, dtype=torch.long)
        if ids.ndim != 2 or ids.shape[0] != len(seq_ids) or ids.shape[1] == 0:
            raise ValueError(f"tokens must be [len(seq_ids)={len(seq_ids)}, T>0], got {tuple(ids.shape)}")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError(f"sequence ids must be distinct, got {list(seq_ids)}")
        if int(ids.min()) < 0 or int(ids.max()) >= self.n_vocab:
            raise ValueError(f"token ids must be in [0, {self.n_vocab}), got {int(ids.min())}..{int(ids.max())}")
        T = ids.shape[1]
        start = np.array([self.cache.seq_pos_max(s) + 1 for s in seq_ids])
        positions = start[:, None] + np.arange(T)[None, :]
        if T == 1 and not all_logits and self._static is not None:
            cells = self.cache.reserve(list(seq_ids), positions, write_device=False)
            return self._static(ids[:, 0].tolist(), list(seq_ids), positions[:, 0], cells[:, 0])
        cells = self.cache.reserve(list(seq_ids), positions)
        n_attend = int(max(self.cache.used[s] for s in seq_ids))
        dev = self.device
        first = int(seq_ids[0])
        span = (first, first + len(seq_ids)) if list(seq_ids) == list(range(first, first + len(seq_ids))) \
            else None
        c0 = int(cells[0, 0])
        same = span is not None and bool((cells == np.arange(c0, c0 + T)[None, :]).all())
        def forward() -> torch.Tensor:
            return self.net(ids.to(dev), torch.as_tensor(positions, device=dev),
                            torch.as_tensor(list(seq_ids), device=dev),
                            slice(c0, c0 + T) if same else torch.as_tensor(cells, device=dev),
                            self.cache, self.rope, n_attend, last_only=not all_logits, row_span=span)
        governor = self._static.governor if self._static is not None else None
        logits = forward() if governor is None else governor.run_chunk(forward)
        return logits if all_logits else logits[:, -1]

    def eval_prompt(self, tokens: Sequence[int], seq_id: int = 0, *, all_logits: bool = False
                    ) -> torch.Tensor:
        """Append ``tokens`` to ``seq_id`` in chunks of ``n_batch``; logits of the last (or all)."""
        if len(tokens) == 0:
            raise ValueError("no tokens to evaluate")
        chunks = [self.decode([list(tokens[i:i + self.n_batch])], [seq_id], all_logits=all_logits)
                  for i in range(0, len(tokens), self.n_batch)]
        return torch.cat([c[0] for c in chunks]) if all_logits else chunks[-1][0]

    def logits(self, token_ids: Sequence[int]) -> torch.Tensor:
        """Logits for every position of ``token_ids`` (no BOS added): CPU float32 ``[n, n_vocab]``.

        Stateless: uses sequence 0 of the cache and clears it before and after.
        """
        tokens = list(token_ids)
        if len(tokens) > self.n_ctx:
            raise ValueError(f"{len(tokens)} tokens do not fit n_ctx = {self.n_ctx}")
        self.cache.clear(0)
        try:
            return self.eval_prompt(tokens, 0, all_logits=True).cpu()
        finally:
            self.cache.clear(0)

    def __repr__(self) -> str:
        c = self.config
        return (f"Model({os.path.basename(self.path)!r}, arch={c.arch}, n_layer={c.n_layer}, "
                f"n_embd={c.n_embd}, n_vocab={c.n_vocab}, n_ctx={self.n_ctx}, "
                f"device={self.device}, dtype={self.dtype})")
