"""One-row products (batch-1 decode) on CUDA as a Triton kernel, where it beats cuBLAS.

A decode step at batch 1 multiplies one activation row by every weight matrix: ``y = W x`` reads
the whole matrix once and does two flops per weight, so its speed is the memory bandwidth it
reaches. cuBLAS runs these products with small-tile GEMM kernels that read a bf16 matrix at about
half the device's copy bandwidth. The kernel here gives each program a few rows of ``W`` and walks
along them in wide chunks, accumulating in float32 (as cuBLAS does), so the device streams the
matrix with many loads in flight.

Nothing is assumed about which is faster: ``tune(net)`` times, on the device, ``F.linear`` and a
few tile shapes of the kernel on each weight shape of the model's dense float ``Linear`` layers
(on matrices too many to stay in the L2 cache, as in a step),
checks the kernel's result against ``F.linear``, and gives a layer the kernel only where it was
faster. The choice is used while a CUDA graph is captured (``capturing()``), where Triton's
per-launch Python cost is paid once; eager steps keep ``F.linear``. Without Triton, or off CUDA,
nothing changes.
"""
from __future__ import annotations

import contextlib
import functools
import statistics
import warnings
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

# (rows per program, columns per chunk, warps, pipeline stages): tried in this order
CONFIGS = ((4, 512, 4, 3), (8, 256, 4, 3), (8, 512, 4, 3), (16, 256, 4, 3), (16, 512, 8, 3),
           (32, 256, 8, 3), (2, 1024, 4, 3), (8, 1024, 8, 2))
_state = {"capturing": False}
_kernel: Any = None


def _triton_kernel() -> Any:
    """The jitted kernel, defined on first use (``None`` when Triton is missing)."""
    global _kernel
    if _kernel is not None:
        return _kernel or None
    try:
        import triton
        import triton.language as tl
    except Exception:  # noqa: BLE001 - no Triton (CPU builds of torch): the kernel is never used
        _kernel = False
        return None

    @triton.jit
    def one_row_product(w_ptr, x_ptr, b_ptr, y_ptr, n_rows, n_cols, stride_w,
                        HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < n_rows
        acc = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, n_cols, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            col_ok = cols < n_cols
            w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :],
                        mask=row_ok[:, None] & col_ok[None, :], other=0.0)
            x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
            acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
        y = tl.sum(acc, axis=1)
        if HAS_BIAS:                 # added before the one rounding to the output's type
            y += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
        tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty, fp_downcast_rounding="rtne"), mask=row_ok)

    _kernel = one_row_product
    return _kernel


def available(device: torch.device) -> bool:
    """Whether the kernel can run on ``device`` (CUDA with Triton importable)."""
    return device.type == "cuda" and _triton_kernel() is not None


def one_row(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            config: tuple[int, int, int, int]) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` for an ``x`` of one row (any leading shape of size 1)."""
    n, k = weight.shape
    x1 = x.reshape(k)
    if not x1.is_contiguous():
        x1 = x1.contiguous()
    y = torch.empty(n, dtype=x.dtype, device=x.device)
    block_n, block_k, warps, stages = config
    _triton_kernel()[((n + block_n - 1) // block_n,)](
        weight, x1, weight if bias is None else bias, y, n, k, weight.stride(0), HAS_BIAS=bias is not None,
        BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps, num_stages=stages)
    return y.view(*x.shape[:-1], n)


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Layers with a tuned kernel use it inside this block (a CUDA graph's capture and its check)."""
    saved = _state["capturing"]
    _state["capturing"] = True
    try:
        yield
    finally:
        _state["capturing"] = saved


def active() -> bool:
    return _state["capturing"]


def _graph_time(fns: list[Callable[[], Any]], calls: int = 20, repeats: int = 5) -> float:
    """Seconds per call of the ``fns`` (taken in turn), ``calls`` of them captured in one CUDA
    graph, median of replays."""
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    calls = max(calls, len(fns))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def cold_copies(n: int, k: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Random ``[n, k]`` matrices, enough of them to hold twice the device's L2 cache: products
    taken in turn read memory, as a decode step's matrices (each read once per step) do, not a
    cached copy."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 << 20
    size = n * k * torch.empty((), dtype=dtype).element_size()
    count = max(2, min(64, -(-2 * l2 // size)))
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(n, k, device=device, dtype=dtype, generator=gen) for _ in range(count)]


def tune_shape(n: int, k: int, dtype: torch.dtype, device: torch.device, *, margin: float = 0.95
               ) -> tuple[tuple[int, int, int, int] | None, dict[str, float]]:
    """The fastest kernel config for a one-row product by an ``[n, k]`` matrix, or ``None`` when
    ``F.linear`` is as fast (the kernel must take at most ``margin`` of its time); also the times
    measured (seconds per call, by config name and ``"linear"``), on matrices read from memory
    (``cold_copies``)."""
    ws = cold_copies(n, k, dtype, device)
    x = torch.randn(1, k, device=device, dtype=dtype, generator=torch.Generator(device=device).manual_seed(1))
    ref = F.linear(x, ws[0]).float()
    times = {"linear": _graph_time([functools.partial(F.linear, x, w) for w in ws])}
    best: tuple[int, int, int, int] | None = None
    for cfg in CONFIGS:
        try:
            got = one_row(x, ws[0], None, cfg).float()
            if not torch.allclose(got, ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item()):
                continue
            t = _graph_time([functools.partial(one_row, x, w, None, cfg) for w in ws])
        except Exception:  # noqa: BLE001 - a config the device cannot run is skipped
            continue
        times[str(cfg)] = t
        if t <= margin * times["linear"] and (best is None or t < times[str(best)]):
            best = cfg
    return best, times


def tune(net: nn.Module) -> dict[tuple[int, int], tuple[int, int, int, int] | None]:
    """Give each dense float ``Linear`` of ``net`` on CUDA the kernel config that beat ``F.linear``
    on its weight shape (``one_row_config``; ``None`` where none did). Once per ``net``."""
    memo = getattr(net, "_one_row_configs", None)
    if memo is not None:
        return memo
    chosen: dict[tuple[int, int], tuple[int, int, int, int] | None] = {}
    for m in net.modules():
        w = getattr(m, "weight", None)
        if not hasattr(m, "one_row_config") or not isinstance(w, torch.Tensor) or w.dim() != 2 \
                or w.dtype not in (torch.bfloat16, torch.float16) or not available(w.device) \
                or not w.is_contiguous():
            continue
        key = (int(w.shape[0]), int(w.shape[1]))
        if key not in chosen:
            try:
                chosen[key] = tune_shape(*key, w.dtype, w.device)[0]
            except Exception as exc:  # noqa: BLE001 - tuning never stops a decode: cuBLAS it is
                warnings.warn(f"timing the one-row kernel on a {list(key)} matrix failed ({type(exc).__name__}: "
                              f"{exc}); that shape keeps cuBLAS", RuntimeWarning, stacklevel=2)
                chosen[key] = None
        m.one_row_config = chosen[key]
    net._one_row_configs = chosen
    return chosen
