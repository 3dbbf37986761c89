"""How a GGUF file's tensors become the ``Transformer``'s parameters.

``state_dict`` maps llama.cpp's tensor names to the module's, fusing Q, K and V into one
projection; ``install_quantized`` swaps the linear layers and embeddings whose weights are
quantized for ``QLinear``/``QEmbedding`` (packed for their kernels on the CPU's threads, the
int4 layers together in chunks: ``pack_batch``); ``fuse_dense_gate_up`` makes float gate and up
matrices one product on CUDA; ``skip_init`` builds the module on ``meta`` without random
initialisation; ``trim_heap`` returns the packing's freed memory to the system.
"""
from __future__ import annotations

import contextlib
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator

import torch

from halter.engine import packed_cache
from halter.engine.config import ModelConfig
from halter.engine.gguf_loader import check_scales
from halter.engine.pack_batch import Batch, batchable
from halter.engine.qlinear import QEmbedding, QLinear, group_parts, pick_kernel
from halter.engine.quant_tensor import QuantTensor, release_pages
from halter.engine.transformer import Linear, Transformer


def _fuse(parts: list[Any]) -> Any:
    """Row-wise fusion: a tensor when all parts are tensors, else the list of ``QuantTensor`` parts."""
    if all(isinstance(p, torch.Tensor) for p in parts):
        return torch.cat(parts)
    if all(isinstance(p, QuantTensor) for p in parts):
        return list(parts)
    dtype = next(p.dtype for p in parts if isinstance(p, torch.Tensor))
    return torch.cat([p if isinstance(p, torch.Tensor) else p.dequantize(dtype).to(dtype) for p in parts])


def state_dict(c: ModelConfig, t: dict[str, Any]) -> dict[str, Any]:
    """GGUF tensor names -> ``Transformer`` parameter names, fusing Q/K/V into ``wqkv``.

    Quantized weights (``weights="packed"``) stay ``QuantTensor``s (a list of parts for ``wqkv``).
    """
    sd = {"tok_embeddings.weight": t["token_embd.weight"], "norm.weight": t["output_norm.weight"],
          "output.weight": t.get("output.weight", t["token_embd.weight"])}
    for i in range(c.n_layer):
        b, p = f"blk.{i}.", f"layers.{i}."
        sd[p + "attention.wqkv.weight"] = _fuse([t[b + f"attn_{x}.weight"] for x in "qkv"])
        if c.attn_bias:
            sd[p + "attention.wqkv.bias"] = torch.cat([t[b + f"attn_{x}.bias"] for x in "qkv"])
        names = [("attention_norm", "attn_norm"), ("attention.wo", "attn_output"),
                 ("ffn_norm", "ffn_norm"), ("feed_forward.w1", "ffn_gate"),
                 ("feed_forward.w3", "ffn_up"), ("feed_forward.w2", "ffn_down")]
        if c.qk_norm:
            names += [("attention.q_norm", "attn_q_norm"), ("attention.k_norm", "attn_k_norm")]
        if c.post_norms:
            names += [("post_attention_norm", "post_attention_norm"), ("post_ffn_norm", "post_ffw_norm")]
        for ours, theirs in names:
            sd[p + ours + ".weight"] = t[b + theirs + ".weight"]
    return sd


def fuse_dense_gate_up(net: Transformer, rest: dict[str, Any]) -> None:
    """Float gate and up matrices as one ``w13`` product (one kernel reading both, on CUDA).

    Only on CUDA: on the CPU the concatenation would copy matrices that may still be pages of the
    memory-mapped file.
    """
    for i, layer in enumerate(net.layers):
        k1, k3 = f"layers.{i}.feed_forward.w1.weight", f"layers.{i}.feed_forward.w3.weight"
        w1, w3 = rest.get(k1), rest.get(k3)
        if not (isinstance(w1, torch.Tensor) and isinstance(w3, torch.Tensor)) or w1.dtype != w3.dtype:
            continue
        ff = layer.feed_forward
        with torch.device("meta"):
            ff.w13 = Linear(w1.shape[1], w1.shape[0] + w3.shape[0], bias=False)
        ff.w1 = ff.w3 = None
        rest[f"layers.{i}.feed_forward.w13.weight"] = torch.cat([rest.pop(k1), rest.pop(k3)])


@contextlib.contextmanager
def skip_init() -> Iterator[None]:
    """No random initialisation while the module is built on ``meta`` (the file's tensors replace it).

    On the meta device ``normal_`` runs through torch's Python references, which import the
    compiler stack (sympy, dynamo: seconds) for values that are thrown away.
    """
    names = ("normal_", "uniform_", "kaiming_uniform_", "trunc_normal_", "xavier_uniform_")
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for n in names:
        setattr(torch.nn.init, n, lambda t, *a, **k: t)
    try:
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.nn.init, n, f)


def install_quantized(net: Transformer, sd: dict[str, Any], dtype: torch.dtype,
                       device: torch.device, *, cache_key: str | None = None) -> tuple[dict[str, Any], bool]:
    """Swap the linear layers and embeddings whose weights are quantized for ``QLinear``/``QEmbedding``.

    ``cache_key`` (CPU): the file's ``packed_cache`` key; the packing stored under it is used
    instead of packing. Returns what is left of ``sd`` for ``load_state_dict``, and whether a
    stored packing was used (where not, ``packed_buffers(net)`` is what to store once the model
    has loaded).
    """
    stored = packed_cache.load(cache_key) if cache_key is not None else None
    try:
        return _install(net, sd, dtype, device, stored), stored is not None
    except packed_cache.Mismatch:                # a stored packing that does not fit: pack afresh
        packed_cache.discard(cache_key)  # type: ignore[arg-type]
        return _install(net, sd, dtype, device, None), False


def packed_buffers(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every buffer the CPU packing made, by module and part (``packed_cache``'s stored form)."""
    return {f"{name}.{k}": t for name, module in net.named_modules() if isinstance(module, QLinear)
            for k, t in module.stored_buffers().items()}


def _install(net: Transformer, sd: dict[str, Any], dtype: torch.dtype, device: torch.device,
             stored: dict[str, torch.Tensor] | None) -> dict[str, Any]:
    by_module: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in (stored or {}).items():      # "layers.3.attention.wqkv.0.packed0": module, buffer
        module, _, buffer = name.rpartition(".")
        module, _, part = module.rpartition(".")
        by_module.setdefault(module, {})[f"{part}.{buffer}"] = t

    def prebuilt(name: str) -> dict[str, torch.Tensor] | None:
        return None if stored is None else by_module.get(name, {})

    rest = dict(sd)
    # (parent, attribute, build, bytes packed, the parts of a QLinear that a shared packing may take)
    builds: list[tuple[torch.nn.Module, str, Callable[..., torch.nn.Module], int, list[QuantTensor] | None]] = []
    for i, layer in enumerate(net.layers):       # gate and up of one type: one product, one kernel call
        w1, w3 = sd.get(f"layers.{i}.feed_forward.w1.weight"), sd.get(f"layers.{i}.feed_forward.w3.weight")
        if isinstance(w1, QuantTensor) and isinstance(w3, QuantTensor) and w1.ggml_type == w3.ggml_type:
            ff = layer.feed_forward
            name = f"layers.{i}.feed_forward.w13"
            builds.append((ff, "w13", functools.partial(QLinear, [w1, w3], None, dtype=dtype, device=device,
                                                        prebuilt=prebuilt(name)),
                           0 if stored is not None else w1.nbytes + w3.nbytes, [w1, w3]))
            ff.w1 = ff.w3 = None
            del rest[f"layers.{i}.feed_forward.w1.weight"], rest[f"layers.{i}.feed_forward.w3.weight"]
    for key, value in sd.items():
        if not (isinstance(value, QuantTensor) or isinstance(value, list)) or key not in rest:
            continue
        path = key[:-len(".weight")]
        parent_path, _, attr = path.rpartition(".")
        parent = net.get_submodule(parent_path) if parent_path else net
        old = getattr(parent, attr)
        del rest[key]
        if isinstance(old, torch.nn.Embedding):    # looked up in place: nothing packed
            builds.append((parent, attr, functools.partial(QEmbedding, value, dtype=dtype, device=device), 0, None))
            continue
        bias = rest.pop(path + ".bias", None)
        parts = value if isinstance(value, list) else [value]
        builds.append((parent, attr, functools.partial(QLinear, parts, bias, dtype=dtype, device=device,
                                                       prebuilt=prebuilt(path)),
                       0 if stored is not None else sum(q.nbytes for q in parts), parts))
    shared, batches = _shared_packings([b[4] for b in builds], device) if stored is None else ({}, [])
    jobs = [job for b in batches for job in b.jobs()]
    alone = [i for i in range(len(builds)) if i not in shared]
    results = _run_all([j for j, _ in jobs] + [builds[i][2] for i in alone], device,
                       [c for _, c in jobs] + [builds[i][3] for i in alone])
    modules: dict[int, torch.nn.Module] = dict(zip(alone, results[len(jobs):]))
    for b in batches:
        b.done()
    for i, refs in shared.items():
        packing: dict[str, torch.Tensor] = {}
        for j, batch, g in refs:
            packed, sz = batch.result(g)
            packing.update({f"{j}.packed{t}": p for t, p in enumerate(packed)})
            packing.update({f"{j}.sz{t}": z for t, z in enumerate(sz)})
        modules[i] = builds[i][2](prebuilt=packing)
    for i, (parent, attr, _, _, _) in enumerate(builds):
        setattr(parent, attr, modules[i])
    for value in sd.values():        # file pages read while packing: only lookups come back
        for q in value if isinstance(value, list) else [value]:
            if isinstance(q, QuantTensor):
                check_scales(q)      # those the int4 packing did not check (lookups, bf16, dequant)
                release_pages(q)
    return rest


def _shared_packings(layers: list[list[QuantTensor] | None], device: torch.device
                     ) -> tuple[dict[int, list[tuple[int, Batch, int]]], list[Batch]]:
    """The CPU int4 packings done together (``pack_batch``): for each layer (by index in
    ``layers``, ``None``: not a ``QLinear``) whose every group of parts is int4 and whole
    64-row blocks, ``(group index in the layer, its Batch, its index there)`` per group, and the
    batches. A layer with any other group is left to build alone."""
    if device.type != "cpu":
        return {}, []
    by_kind: dict[tuple[str, int], list[list[QuantTensor]]] = {}
    refs: dict[int, list[tuple[int, tuple[str, int], int]]] = {}
    for i, parts in enumerate(layers):
        if parts is None:
            continue
        groups = group_parts(parts)
        if not all(pick_kernel(g[0], device, rows=sum(p.shape[0] for p in g)) == "int4" and batchable(g)
                   for g in groups):
            continue
        for j, g in enumerate(groups):
            kind = (g[0].type_name, g[0].shape[1])
            members = by_kind.setdefault(kind, [])
            refs.setdefault(i, []).append((j, kind, len(members)))
            members.append(g)
    batches = {kind: Batch(groups) for kind, groups in by_kind.items()}
    return {i: [(j, batches[kind], g) for j, kind, g in r] for i, r in refs.items()}, list(batches.values())


def _run_all(jobs: list[Callable[[], Any]], device: torch.device, costs: list[int] | None = None) -> list[Any]:
    """Run the load's jobs (layer builds, chunks of a shared packing: byte shuffling in torch
    ops), one job per thread at a time, the costliest first (``costs``: bytes each packs),
    results in the order given.

    On the CPU each job runs its ops on its own thread, torch's intra-op pool set to one thread
    meanwhile: ops split across a thread pool wait at a barrier for every thread, and on a machine
    whose cores are busy with other work each wait lasts a scheduler slice (loading took 2-5 s
    instead of 0.3 s with two background jobs on two cores). Costliest first: a tied output layer
    is the largest single build (Gemma 3's: half of the packing) and, started last, it ran alone
    while the other threads had nothing left to do."""
    n = torch.get_num_threads()
    if device.type != "cpu" or n <= 1 or len(jobs) <= 1:
        return [b() for b in jobs]
    order = sorted(range(len(jobs)), key=lambda i: -costs[i]) if costs is not None else list(range(len(jobs)))
    out: list[Any] = [None] * len(jobs)
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="halter-pack") as pool:
            for i, result in zip(order, pool.map(lambda i: jobs[i](), order)):
                out[i] = result
    finally:
        torch.set_num_threads(n)
    return out


def trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc ``malloc_trim``): the packing's
    temporaries would otherwise stay in the resident set after loading."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):      # not glibc
        pass
