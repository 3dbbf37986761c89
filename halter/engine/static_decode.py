"""The static-shape decode step: one new token for each of the first B cache rows, fixed shapes.

``Model.decode`` attends over a variable number of cells and builds new tensors every call, which
nothing can capture or compile once. Here a step for bucket ``(B, L)`` has preallocated device
inputs (token, position, cell, active flag and output order per row), attends over the first
``L`` cells of each row (a span bucket: powers of two from ``min_span`` up, and ``n_ctx``; empty
cells hold position -1 and are masked already) and writes its logits into a preallocated
``[B, n_vocab]`` buffer, so the same step can be run as is
(``"static"``), recorded once per bucket by ``torch.jit.trace`` and run as a TorchScript graph
(``"trace"``: the same operators without Python between them), compiled with
``torch.compile(fullgraph=True, dynamic=False)`` (``"compile"``) or captured once per bucket into
a CUDA graph and replayed (``"cuda-graph"``; one-row products there run ``gemv``'s Triton kernel
where it was measured faster than cuBLAS). In ``"fused"`` mode (the CPU default where it can run)
steps of sequences of at most ``fused_decode.MAX_SPAN`` cells run ``fused_decode.FusedStep``
instead, over exactly the sequences' rows; longer ones run the traced buckets.

Batch row ``b`` is cache row ``b``: keys and values are read through views of the cache (no
gather). A bucket covers the requested sequences' rows and pads with the others, which are
*inactive*: their key, value and position are written back unchanged into cell 0 of their own
row (``torch.where`` with the value read from that cell), so padding never alters a real sequence
and needs no spare cache row (a bucket of one row has no padding: its row is written directly).
Their logits are computed and ignored (possibly NaN for an empty
row: batch rows never mix). The KV-cache operations mutate ``k``, ``v`` and ``pos`` in place, so
captured graphs stay valid through ``seq_rm``, ``seq_add``, ``seq_cp`` and context shifts.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from halter.engine import gemv
from halter.engine.fused_decode import MAX_SPAN, FusedStep
from halter.engine.kv_cache import KVCache
from halter.engine.rope import Rope
from halter.engine.thread_governor import ThreadGovernor
from halter.engine.transformer import Transformer

DECODE_MODES = ("auto", "eager", "static", "trace", "fused", "compile", "cuda-graph")
_TOKEN, _POS, _CELL, _ACTIVE, _ORDER = range(5)      # rows of a step's input buffer


def resolve_mode(mode: str, device: torch.device) -> str:
    """The decode mode to use: ``"auto"`` is CUDA graphs on CUDA and the traced step elsewhere."""
    if mode not in DECODE_MODES:
        raise ValueError(f"decode mode {mode!r} not understood (use one of {', '.join(DECODE_MODES)})")
    if mode == "auto":
        return "cuda-graph" if device.type == "cuda" else "trace"
    if mode == "cuda-graph" and device.type != "cuda":
        raise ValueError(f"decode mode 'cuda-graph' needs a CUDA device; this model is on {device}")
    if mode == "fused" and device.type != "cpu":
        raise ValueError(f"decode mode 'fused' runs on the CPU; this model is on {device}")
    return mode


def bucket_sizes(n_seq: int) -> list[int]:
    """Batch buckets for a cache of ``n_seq`` rows: the powers of two below it, and ``n_seq``."""
    sizes = [1 << i for i in range(n_seq.bit_length()) if (1 << i) < n_seq]
    return sizes + [n_seq]


def span_sizes(n_ctx: int, min_span: int = 256) -> list[int]:
    """Attention span buckets: the powers of two from ``min_span`` below ``n_ctx``, and ``n_ctx``."""
    sizes, s = [], 1 << max(0, min_span - 1).bit_length()
    while s < n_ctx:
        sizes.append(s)
        s *= 2
    return sizes + [n_ctx]


def static_forward(net: Transformer, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   pos_cache: torch.Tensor, inputs: torch.Tensor, rows: torch.Tensor,
                   out: torch.Tensor, span: int) -> None:
    """One token for each of cache rows ``0..B-1`` (``B = inputs.shape[1]``); logits into ``out``.

    Attention covers the first ``span`` cells of each row (every active row's tokens lie there).
    ``inputs [5, B]`` holds per row the token, position, cell, active flag (0/1) and, in its
    first entries, the output order (unused here). Writes keys, values and positions of the
    active rows into their cells; inactive rows write back what their cell already holds.
    """
    x = net.embed(inputs[_TOKEN][:, None])                                     # [B, 1, E]
    static_layers(net, rope, k_cache, v_cache, pos_cache, inputs, rows, out, span, x)


def static_layers(net: Transformer, rope: Rope, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  pos_cache: torch.Tensor, inputs: torch.Tensor, rows: torch.Tensor,
                  out: torch.Tensor, span: int, x: torch.Tensor, head: bool = True) -> torch.Tensor:
    """``static_forward`` from the embedded tokens ``x [B, 1, E]`` on (what ``"trace"`` records);
    returns the last layer's output ``[B, E]``, which ``head=False`` leaves to the caller instead of
    writing the logits into ``out``."""
    B = inputs.shape[1]
    positions, cells = inputs[_POS], inputs[_CELL]
    active = inputs[_ACTIVE].bool()
    pos_cache[rows, cells] = torch.where(active, positions, pos_cache[rows, cells])
    cached = pos_cache[:B, :span]                                              # [B, L]
    inputs = net.layer_inputs(positions[:, None], cached, rope)   # cos, sin [B, 1, 1, D]; mask [B, 1, 1, L]
    keep = active[:, None, None]
    # views taken once for all layers (a traced step records each indexing as operators)
    keys, values = k_cache[:, :B, :, :span], v_cache[:, :B, :, :span]          # [n_layer, B, Hkv, L, D]
    k_row0, v_row0 = k_cache[:, 0], v_cache[:, 0]                              # [n_layer, Hkv, C, D]
    x = x.squeeze(1)                                     # [B, E]: the layers take one token a row
    for layer in net.layers:
        attn = layer.attention
        i, Hkv, D = attn.layer, attn.n_head_kv, attn.head_dim
        cos, sin, layer_rope, mask = inputs[attn.sliding]
        q, k, v = attn.project(layer.attention_norm(x), cos, sin, layer_rope)
        if B == 1:             # a bucket of one row is the row of the one sequence: active
            k_row0[i].index_copy_(1, cells, k.reshape(Hkv, 1, D))
            v_row0[i].index_copy_(1, cells, v.reshape(Hkv, 1, D))
        else:
            kc, vc = k_cache[i], v_cache[i]                                    # [S, Hkv, C, D]
            kc[rows, :, cells] = torch.where(keep, k[:, 0], kc[rows, :, cells])  # [B, Hkv, D]
            vc[rows, :, cells] = torch.where(keep, v[:, 0], vc[rows, :, cells])
        h = x + layer.post_attention_norm(attn.attend(q, keys[i], values[i], mask, one_token=True))
        x = h + layer.post_ffn_norm(layer.feed_forward(layer.ffn_norm(h)))
    if head:
        out.copy_(net.head(x))
    return x


def _simplify(graph: Any, example: tuple[torch.Tensor, ...]) -> None:
    """Fold a traced step's shape arithmetic (its shapes are fixed) and pool its constants.

    The tracer records every ``x.shape`` read as size ops and every Python number as a constant
    node: SmolLM2's step has 8,721 nodes, 1,506 after this (and runs ~10 % faster). Best effort:
    the graph is left as traced where a pass is missing in this torch.
    """
    try:
        torch._C._jit_pass_complete_shape_analysis(graph, example, False)
        torch._C._jit_pass_peephole(graph, False)
        torch._C._jit_pass_constant_propagation(graph)
        torch._C._jit_pass_constant_pooling(graph)
        torch._C._jit_pass_dce(graph)
    except (AttributeError, RuntimeError):           # pragma: no cover - depends on the torch build
        pass


class StaticStep:
    """The decode step for bucket ``(B, span)``: its input and output buffers and how it is run."""

    def __init__(self, net: Transformer, rope: Rope, cache: KVCache, B: int, span: int) -> None:
        dev = cache.k.device
        self.B, self.span, self.net, self.rope, self.cache = B, span, net, rope, cache
        self.inputs = torch.zeros((5, B), dtype=torch.long, device=dev)
        self.rows = torch.arange(B, device=dev)
        self.logits = torch.zeros((B, net.config.n_vocab), dtype=torch.float32, device=dev)
        if dev.type == "cuda":     # pinned staging buffer: one asynchronous copy per step
            self.host_t = torch.zeros((5, B), dtype=torch.long, pin_memory=True)
            self.copied: Any = torch.cuda.Event()
        else:
            self.host_t, self.copied = self.inputs, None
        self.host = self.host_t.numpy()
        self.run: Callable[[], None] = self.forward

    def forward(self) -> None:
        static_forward(self.net, self.rope, self.cache.k, self.cache.v, self.cache.pos,
                       self.inputs, self.rows, self.logits, self.span)

    def stage(self, tokens: Sequence[int], seq_ids: Sequence[int], positions: np.ndarray,
              cells: np.ndarray) -> None:
        """Write this step's inputs (rows not in ``seq_ids`` inactive) and send them to the device."""
        if self.copied is not None:
            self.copied.synchronize()       # the previous step's copy has left the pinned buffer
        h = self.host
        h[:] = 0
        h[_TOKEN, seq_ids] = tokens
        h[_POS, seq_ids] = positions
        h[_CELL, seq_ids] = cells
        h[_ACTIVE, seq_ids] = 1
        h[_ORDER, :len(seq_ids)] = seq_ids
        if self.copied is not None:
            self.inputs.copy_(self.host_t, non_blocking=True)
            self.copied.record()


class StaticDecoder:
    """Runs ``Model.decode``'s one-token steps through ``StaticStep``s in one of the static modes.

    ``mode``: ``"static"`` (the step as is), ``"trace"`` (``torch.jit.trace`` per bucket on first
    use), ``"fused"`` (steps whose sequences hold at most ``fused_decode.MAX_SPAN`` cells run a
    ``FusedStep`` over exactly their rows; the others are traced), ``"compile"`` (``torch.compile`` with ``backend``, default inductor) or ``"cuda-graph"`` (captured per bucket on first use, then replayed; with a
    ``backend``, the step compiled with it is what is captured: fused kernels, fewer launches).
    ``min_span`` is the smallest attention span bucket. With a ``governor`` (CPU), each step runs
    on the thread count it chooses.
    """

    def __init__(self, net: Transformer, rope: Rope, cache: KVCache, mode: str,
                 backend: Any = None, min_span: int = 256, governor: ThreadGovernor | None = None) -> None:
        if mode not in ("static", "trace", "fused", "compile", "cuda-graph"):
            raise ValueError(f"StaticDecoder mode must be static, trace, fused, compile or cuda-graph, "
                             f"not {mode!r}")
        self.net, self.rope, self.cache, self.mode = net, rope, cache, mode
        self.buckets = bucket_sizes(cache.n_seq)
        self.spans = span_sizes(cache.n_ctx, min_span)
        self.steps: dict[tuple[int, int], StaticStep] = {}
        self._fused_steps: dict[int, FusedStep] = {}   # "fused": the step per number of sequences
        self._fused_ok: bool | None = None              # "fused": did the fused step pass its check
        self._compiled: Any = None
        if mode == "compile" or (mode == "cuda-graph" and backend is not None):
            self._compiled = torch.compile(static_forward, fullgraph=True, dynamic=False,
                                           backend="inductor" if backend is None else backend)
        self._pool: Any = None
        self.governor = governor
        # TorchScript's tracer cannot record a product that decodes blocks (dtype views) or one
        # that runs outside torch ("q8": numba and machine code): in "fused" mode such a model's
        # other buckets run the plain step, without trying
        untraceable = {"dequant", "q8"}
        head = set(net.output.modules())
        self._traceable = not any(untraceable & set(getattr(m, "kernels", ())) for m in net.modules() if m not in head)
        # an output layer on "q8" runs after the traced layers, in Python
        self._trace_head = not any(untraceable & set(getattr(m, "kernels", ())) for m in head)

    def bucket(self, n_rows: int, n_cells: int) -> tuple[int, int]:
        """The smallest bucket holding cache rows ``0..n_rows-1`` and cells ``0..n_cells-1``."""
        return (next(b for b in self.buckets if b >= n_rows),
                next(s for s in self.spans if s >= n_cells))

    def step_for(self, B: int, span: int) -> StaticStep:
        """The bucket's step, built (traced, compiled, captured) on first use.

        Building runs the step on all-zero inputs (every row inactive); a bucket of one row
        writes its row's cell 0 regardless (its one row is always active in real use), so that
        cell of the bucket's rows is kept aside and restored afterwards.
        """
        st = self.steps.get((B, span))
        if st is None:
            st = StaticStep(self.net, self.rope, self.cache, B, span)
            c = self.cache
            kept = (c.k[:, :B, :, 0].clone(), c.v[:, :B, :, 0].clone(), c.pos[:B, 0].clone())
            try:
                self._build(st)
            finally:
                if st.inputs.is_cuda:
                    torch.cuda.synchronize(st.inputs.device)
                c.k[:, :B, :, 0], c.v[:, :B, :, 0], c.pos[:B, 0] = kept
            self.steps[B, span] = st
        return st

    def _build(self, st: StaticStep) -> None:
        if self._compiled is not None:
            compiled = self._compiled
            args = (self.net, self.rope, self.cache.k, self.cache.v, self.cache.pos,
                    st.inputs, st.rows, st.logits, st.span)
            # one cache entry per bucket (and per model): more than dynamo's default limit of 8
            limit = max(torch._dynamo.config.recompile_limit, 1024)
            with torch._dynamo.config.patch(recompile_limit=limit):
                compiled(*args)          # compile now, on all-zero inputs
            st.run = lambda: compiled(*args)
            if self.mode == "cuda-graph":
                st.forward = st.run      # type: ignore[method-assign] - the compiled step is captured
        if self.mode == "cuda-graph" and self._compiled is None:
            gemv.tune(self.net)          # once per model: one-row products faster than cuBLAS's
            with gemv.capturing():       # captured, and checked against the same kernels run eagerly
                st.run = self._checked(st, self._capture, "CUDA graph capture", "uncaptured", 1e-3)
        elif self.mode == "cuda-graph":
            st.run = self._checked(st, self._capture, "CUDA graph capture", "uncaptured", 1e-3)
        elif self.mode == "trace" or (self.mode == "fused" and self._traceable):
            st.run = self._checked(st, self._trace, "tracing the decode step", "untraced", 0.0)

    def _trace(self, st: StaticStep) -> Callable[[], None]:
        """The step's layers recorded by ``torch.jit.trace`` (TorchScript): one C++ graph that runs
        the same operators without the Python between them. The embedding lookup stays in Python
        (it decodes quantized rows through dtype views the tracer does not record), and so does an
        output layer on the ``"q8"`` kernel (numba and machine code: the graph ends at its input)."""
        net, rope, span, with_head = self.net, self.rope, st.span, self._trace_head
        args = (self.cache.k, self.cache.v, self.cache.pos, st.inputs, st.rows, st.logits)

        def layers(x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor,
                   inputs: torch.Tensor, rows: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
            hidden = static_layers(net, rope, k, v, pos, inputs, rows, out, span, x, head=with_head)
            return out if with_head else hidden
        tokens = st.inputs[_TOKEN][:, None]
        example = (net.embed(tokens),) + args
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # TracerWarnings about Python values recorded as constants
            traced = torch.jit.trace(layers, example, check_trace=False)
        _simplify(traced.graph, example)

        def run() -> None:
            with torch.jit.optimized_execution(False):   # the graph as simplified here, run as is
                hidden = traced(net.embed(tokens), *args)
            if not with_head:
                st.logits.copy_(net.head(hidden))
        return run

    def _checked(self, st: StaticStep, build: Callable[[StaticStep], Callable[[], None]], label: str,
                 fallback: str, tol: float) -> Callable[[], None]:
        """``build(st)``'s runner, checked once against the plain step; falls back to it with a warning.

        The check runs both on the build's own inputs (every row inactive, so the cache is
        unchanged) and wants the same logits (within ``tol``; a trace: bit for bit). A build that
        fails or disagrees costs speed, never a wrong token.
        """
        cuda = st.inputs.is_cuda
        try:
            run = build(st)
            run()
            if cuda:
                torch.cuda.synchronize()
            got = st.logits.clone()
            st.forward()
            if cuda:
                torch.cuda.synchronize()
            if not torch.allclose(got, st.logits, rtol=tol, atol=tol, equal_nan=True):
                raise RuntimeError("its logits differ from the plain step's")
            return run
        except Exception as exc:  # noqa: BLE001 - any failure degrades to the plain step
            warnings.warn(f"{label} for bucket (B={st.B}, span={st.span}) failed ({type(exc).__name__}: "
                          f"{exc}); this bucket runs the static step {fallback}", RuntimeWarning, stacklevel=3)
            return st.forward

    def _capture(self, st: StaticStep) -> Callable[[], None]:
        """Warm up on a side stream, capture one step into a CUDA graph; returns its replay."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):   # inputs are all zero: every row inactive, cache unchanged
            for _ in range(3):
                st.forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            st.forward()
        st.graph = graph                                      # type: ignore[attr-defined]
        return graph.replay

    def _fused(self, n: int) -> FusedStep | None:
        """The fused step for ``n`` sequences, or None where the fused step failed its check."""
        if self._fused_ok is None:
            self._fused_ok = self._check_fused()
        if not self._fused_ok:
            return None
        fs = self._fused_steps.get(n)
        if fs is None:
            fs = self._fused_steps[n] = FusedStep(self.net, self.rope, self.cache, n)
        return fs

    def _check_fused(self) -> bool:
        """Run the fused step once against the plain static step (token 0 at position 0 in cell 0
        of row 0, which is restored afterwards). The two round differently (the order of float32
        sums), so their logits must agree within 5 % of their norm: a check for a kernel that is
        wrong, not for rounding. False, with a warning, where they do not or a kernel raises."""
        c = self.cache
        kept = (c.k[:, 0, :, 0].clone(), c.v[:, 0, :, 0].clone(), c.pos[0, 0].clone())
        try:
            fused = FusedStep(self.net, self.rope, c, 1)
            fused.stage([0], [0], np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
            fused.run()
            plain = StaticStep(self.net, self.rope, c, 1, self.spans[0])
            plain.host[_ACTIVE] = 1
            plain.forward()
            if not bool(((fused.logits - plain.logits).norm() <= 0.05 * plain.logits.norm()).item()):
                raise RuntimeError("its logits differ from the plain step's")
            self._fused_steps[1] = fused
            return True
        except Exception as exc:  # noqa: BLE001 - any failure degrades to the other steps
            warnings.warn(f"the fused decode step failed ({type(exc).__name__}: {exc}); decode steps "
                          f"run the static step {'traced' if self._traceable else 'untraced'}",
                          RuntimeWarning, stacklevel=4)
            return False
        finally:
            c.k[:, 0, :, 0], c.v[:, 0, :, 0], c.pos[0, 0] = kept

    def __call__(self, tokens: Sequence[int], seq_ids: Sequence[int], positions: np.ndarray,
                 cells: np.ndarray) -> torch.Tensor:
        """Logits ``[len(seq_ids), n_vocab]`` (a new tensor) of one token appended to each sequence.

        ``positions`` and ``cells`` were reserved in the cache already (host side only).
        """
        fs = self._fused(len(seq_ids)) if self.mode == "fused" and \
            int(self.cache.used[list(seq_ids)].max()) <= MAX_SPAN else None
        if fs is not None:
            fs.stage(tokens, seq_ids, positions, cells)
            if self.governor is not None:
                self.governor.step(("fused", fs.n), fs.run)
            else:
                fs.run()
            return fs.logits.clone()
        st = self.step_for(*self.bucket(max(seq_ids) + 1, int(cells.max()) + 1))
        st.stage(tokens, seq_ids, positions, cells)
        if self.governor is not None:
            self.governor.step((st.B, st.span), st.run)
        else:
            st.run()
        return st.logits.index_select(0, st.inputs[_ORDER, :len(seq_ids)])
