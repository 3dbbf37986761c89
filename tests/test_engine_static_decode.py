"""The static-shape decode step: same logits and generations as eager, compiled and captured."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from tests.conftest import Greedy, sequence_operations, tiny_path
from halter import Model, jit
from halter.engine.generation import Request, Timings, shift_context
from halter.engine.static_decode import bucket_sizes, resolve_mode, span_sizes

PROMPT = [104, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]          # "hello world"
GRAMMAR = 'root ::= "{\\"n\\": " [1-9] [0-9]* "}"'


def _tokens(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 300, n).tolist()


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 1e-5) -> bool:
    return ((a - b).norm() / b.norm()).item() < tol


def _pair(directory: str, arch: str = "llama", mode: str = "static", **kw) -> tuple[Model, Model]:
    path = tiny_path(directory, arch, "F32")
    return tuple(Model.load(path, device="cpu", n_ctx=64, n_seq_max=4, progress=False, decode=d, **kw)
                 for d in ("eager", mode))                                  # type: ignore[return-value]


def _llama(directory: str, mode: str) -> Model:
    return Model.load(tiny_path(directory, "llama", "F32"), device="cpu", n_ctx=64, n_seq_max=4,
                      progress=False, decode=mode)


@pytest.fixture(scope="module")
def eager_llama(tiny_gguf_dir: str) -> Model:
    return _llama(tiny_gguf_dir, "eager")


@pytest.fixture(scope="module")
def static_llama(tiny_gguf_dir: str) -> Model:
    return _llama(tiny_gguf_dir, "static")


@pytest.fixture(scope="module")
def traced_llama(tiny_gguf_dir: str) -> Model:
    return _llama(tiny_gguf_dir, "trace")


@pytest.fixture(params=["static", "trace"])
def models(request: pytest.FixtureRequest, eager_llama: Model) -> tuple[Model, Model]:
    """(eager, the static step as is or traced) on the same weights."""
    other = request.getfixturevalue(f"{request.param}_llama" if request.param == "static" else "traced_llama")
    for m in (eager_llama, other):
        m.cache.clear()
    return eager_llama, other


def _both(models: tuple[Model, Model], fn) -> list:
    return [fn(m) for m in models]


@pytest.mark.parametrize("mode", ["static", "trace"])
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_static_step_gives_the_eager_logits_and_cache(tiny_gguf_dir: str, arch: str, mode: str) -> None:
    eager, static = _pair(tiny_gguf_dir, arch, mode)
    assert (eager.decode_mode, static.decode_mode) == ("eager", mode)
    for m in (eager, static):
        m.eval_prompt(_tokens(9, 1), 0)
        m.eval_prompt(_tokens(5, 2), 2)
    for step in range(4):          # rows out of order, a bucket of 4 with rows 1 and 3 padding
        a, b = eager.decode([[3 + step], [4]], [2, 0]), static.decode([[3 + step], [4]], [2, 0])
        assert b.shape == (2, eager.n_vocab) and _close(b, a)
    a, b = eager.decode([[7]], [2]), static.decode([[7]], [2])
    assert _close(b, a)
    assert (static.cache.pos == eager.cache.pos).all()
    assert torch.allclose(static.cache.k, eager.cache.k, atol=1e-5)
    assert torch.allclose(static.cache.v, eager.cache.v, atol=1e-5)


@pytest.mark.parametrize("mode", ["static", "trace"])
def test_attention_span_buckets_give_the_eager_logits(tiny_gguf_dir: str, mode: str) -> None:
    eager, static = _pair(tiny_gguf_dir)
    static.set_decode(mode, min_span=16)                       # spans 16, 32, 64 of n_ctx 64
    for m in (eager, static):
        m.eval_prompt(_tokens(9, 1), 0)
        m.eval_prompt(_tokens(5, 2), 2)
    for step in range(50):                                     # row 0 grows to 59 cells
        assert _close(static.decode([[step], [4]], [2, 0]), eager.decode([[step], [4]], [2, 0]))
    assert sorted(static._static.steps) == [(4, 16), (4, 32), (4, 64)]
    for m in (eager, static):
        m.cache.seq_rm(0, 3, None)                             # back to a short row: a short span
    assert _close(static.decode([[1]], [0]), eager.decode([[1]], [0]))
    assert (1, 16) in static._static.steps


def test_padding_rows_are_left_untouched(models: tuple[Model, Model]) -> None:
    _, static = models
    static.eval_prompt(_tokens(64, 3), 0)                     # row 0 full: no free cell at all
    static.eval_prompt(_tokens(6, 4), 2)                      # row 3 stays empty
    c = static.cache
    before = [(c.k[:, r].clone(), c.v[:, r].clone(), c.pos[r].clone()) for r in (0, 3)]
    static.decode([[5]], [1])                                 # bucket 2: row 0 pads
    static.decode([[5]], [2])                                 # bucket 4: rows 0, 1, 3 pad
    for r, (k, v, pos) in zip((0, 3), before):
        assert torch.equal(c.k[:, r], k) and torch.equal(c.v[:, r], v) and torch.equal(c.pos[r], pos)
    assert static.cache.n_tokens(0) == 64 and static.cache.n_tokens(3) == 0
    assert static.cache.seq_positions(1).tolist() == [0] and static.cache.n_tokens(2) == 7


def test_building_a_step_leaves_the_cache_as_it_was(models: tuple[Model, Model]) -> None:
    """A step is traced (or compiled) on all-zero inputs; a bucket of one row writes row 0's cell
    0 then, so that cell is restored: the bucket's first real step sees the prompt intact."""
    _, m = models
    m.eval_prompt(_tokens(10, 7), 0)
    c = m.cache
    before = (c.k.clone(), c.v.clone(), c.pos.clone())
    m._static.step_for(1, 64)
    m._static.step_for(2, 64)
    assert torch.equal(c.k, before[0]) and torch.equal(c.v, before[1]) and torch.equal(c.pos, before[2])


def test_static_logits_after_sequence_operations(models: tuple[Model, Model]) -> None:
    ids = _tokens(40, 5)
    for a, b in zip(*_both(models, lambda m: sequence_operations(m, ids))):
        assert _close(b, a)


def test_cache_operations_never_reallocate(models: tuple[Model, Model]) -> None:
    _, m = models
    c = m.cache
    ptrs = [t.data_ptr() for t in (c.k, c.v, c.pos)]
    m.eval_prompt(_tokens(64, 6), 0)
    m.decode([[1]], [1])
    shift_context(m, 0, 4, Timings())
    c.seq_cp(0, 2)
    c.seq_rm(2, 3, 10)
    c.seq_add(2, 0, None, 5)
    c.clear(1)
    c.clear()
    assert [t.data_ptr() for t in (c.k, c.v, c.pos)] == ptrs


def test_generations_are_identical_to_eager(models: tuple[Model, Model]) -> None:
    eos = models[0].vocab.eos_id

    class NoEnd(Greedy):
        def sample(self, logits) -> int:
            logits = np.array(logits)
            logits[eos] = -np.inf
            return int(logits.argmax())

    cases = [
        dict(max_tokens=30, sampler=Greedy()),
        dict(max_tokens=120, sampler=NoEnd(), n_keep=3),                       # context shifts
        dict(max_tokens=12, temperature=1.0, seed=3, cfg_negative_prompt=[110, 111], cfg_scale=1.5),
        dict(max_tokens=20, temperature=1.0, seed=4, grammar=GRAMMAR),
        dict(max_tokens=20, sampler=Greedy(), grammar=GRAMMAR, grammar_first=True),
    ]
    for kw in cases:
        a, b = _both(models, lambda m: m.generate(PROMPT, **kw))
        assert (b.tokens, b.text, b.finish_reason) == (a.tokens, a.text, a.finish_reason), kw
    assert b.timings.generated_tokens > 0
    shifted = models[1].generate(PROMPT, max_tokens=120, sampler=NoEnd(), n_keep=3)
    assert shifted.timings.context_shifts >= 2


def test_batched_requests_are_identical_to_eager(models: tuple[Model, Model]) -> None:
    requests = [
        Request(PROMPT, max_tokens=12, seed=1, sampling_fields={"temperature": 1.0}),
        Request(PROMPT[:5], max_tokens=9, seed=2, sampling_fields={"temperature": 1.0},
                cfg_negative_prompt=[110, 111, 112], cfg_scale=1.5),
        Request([97, 98], max_tokens=20, seed=3, grammar=GRAMMAR, sampling_fields={"temperature": 1.0}),
        Request(PROMPT[3:], max_tokens=15, seed=5, stop=["e"]),
        Request([120, 121], max_tokens=25, seed=6),
    ]                               # 6 sequences on 4 rows: some wait for a free one, rows finish at different steps
    a, b = _both(models, lambda m: m.generate_batch(requests))
    assert [(r.tokens, r.finish_reason) for r in b] == [(r.tokens, r.finish_reason) for r in a]


def test_compiled_step_has_no_graph_break_nor_recompiles(tiny_gguf_dir: str) -> None:
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    eager, compiled = _pair(tiny_gguf_dir)
    compiled.set_decode("compile", backend=counter)
    assert compiled.decode_mode == "compile"
    for m in (eager, compiled):
        m.eval_prompt(_tokens(7, 8), 0)
        m.eval_prompt(_tokens(4, 9), 1)
    for step in range(5):                          # bucket 2 only: compiled once
        a, b = eager.decode([[10 + step], [20]], [0, 1]), compiled.decode([[10 + step], [20]], [0, 1])
        assert _close(b, a)
    assert counter.frame_count == 1
    eager.cache.seq_rm(0, 2, 4)
    compiled.cache.seq_rm(0, 2, 4)
    assert _close(compiled.decode([[3], [4]], [1, 0]), eager.decode([[3], [4]], [1, 0]))
    assert _close(compiled.decode([[5]], [0]), eager.decode([[5]], [0]))   # bucket 1: second graph
    assert counter.frame_count == 2
    res_a = eager.generate(PROMPT, max_tokens=10, sampler=Greedy(), seq_id=1)
    res_b = compiled.generate(PROMPT, max_tokens=10, sampler=Greedy(), seq_id=1)
    assert res_a.tokens == res_b.tokens and counter.frame_count == 2     # bucket 2 again


def test_modes_resolve_and_bad_ones_are_refused(static_llama: Model, tiny_gguf_dir: str) -> None:
    with pytest.raises(ValueError, match="'cuda-graph' needs a CUDA device; this model is on cpu"):
        Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu", decode="cuda-graph",
                   progress=False)
    assert Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu",
                      progress=False).decode_mode == "trace"                # auto on the CPU
    assert resolve_mode("auto", torch.device("cpu")) == "trace"
    assert resolve_mode("auto", torch.device("cuda")) == "cuda-graph"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_mode("cuda-graph", torch.device("cpu"))
    with pytest.raises(ValueError, match="decode mode 'fast' not understood"):
        static_llama.set_decode("fast")
    assert static_llama.decode_mode == "static"
    assert bucket_sizes(1) == [1] and bucket_sizes(4) == [1, 2, 4] and bucket_sizes(6) == [1, 2, 4, 6]
    assert bucket_sizes(16) == [1, 2, 4, 8, 16]
    assert span_sizes(4096) == [256, 512, 1024, 2048, 4096] and span_sizes(168) == [168]
    assert span_sizes(300) == [256, 300] and span_sizes(64, 16) == [16, 32, 64]


def test_a_failed_graph_capture_degrades_to_the_uncaptured_step(models: tuple[Model, Model]) -> None:
    """Capture can fail (here: no CUDA at all); the bucket then runs uncaptured, same logits."""
    from halter.engine.static_decode import StaticDecoder
    eager, static = models
    for m in (eager, static):
        m.eval_prompt(_tokens(6, 3), 1)
    dec = StaticDecoder(static.net, static.rope, static.cache, "cuda-graph")
    if torch.cuda.is_available():
        pytest.skip("capture succeeds on a CUDA device")
    n = static.cache.n_tokens(1)
    cells = static.cache.reserve([1], np.array([[n]]), write_device=False)
    eager_logits = eager.decode([[9]], [1])
    with pytest.warns(RuntimeWarning, match="CUDA graph capture"):
        got = dec([9], [1], np.array([n]), cells[:, 0])
    assert _close(got, eager_logits)


def test_a_failed_trace_degrades_to_the_untraced_step(models: tuple[Model, Model], monkeypatch) -> None:
    from halter.engine.static_decode import StaticDecoder
    eager, static = models
    for m in (eager, static):
        m.eval_prompt(_tokens(6, 3), 1)

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot trace this")
    monkeypatch.setattr(torch.jit, "trace", refuse)
    dec = StaticDecoder(static.net, static.rope, static.cache, "trace")
    n = static.cache.n_tokens(1)
    cells = static.cache.reserve([1], np.array([[n]]), write_device=False)
    eager_logits = eager.decode([[9]], [1])
    with pytest.warns(RuntimeWarning, match="tracing the decode step .* cannot trace this"):
        got = dec([9], [1], np.array([n]), cells[:, 0])
    assert _close(got, eager_logits)
    assert dec.steps[dec.bucket(2, n + 1)].run == dec.steps[dec.bucket(2, n + 1)].forward


def test_traced_steps_hold_no_copy_of_the_weights(traced_llama: Model) -> None:
    before = {t.untyped_storage().data_ptr() for t in list(traced_llama.net.parameters())
              + list(traced_llama.net.buffers())}
    traced_llama.cache.clear()
    traced_llama.eval_prompt(_tokens(5, 1), 0)
    traced_llama.decode([[3]], [0])
    graphs = []
    for st in traced_llama._static.steps.values():
        graphs += [c.cell_contents for c in st.run.__closure__ or () if isinstance(c.cell_contents, torch.jit.ScriptFunction)]
    assert graphs
    for g in graphs:
        consts = [n.t("value") for n in g.graph.nodes()
                  if n.kind() == "prim::Constant" and n.output().type().kind() == "TensorType"]
        big = [t for t in consts if t.numel() > 64]
        assert big and all(t.untyped_storage().data_ptr() in before for t in big)


def cuda(test):
    """Marked ``cuda`` (``pytest -m cuda``) and skipped without a CUDA device."""
    return pytest.mark.cuda(pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")(test))


@cuda
def test_cuda_graph_decode_equals_eager_on_cuda(tiny_gguf_dir: str) -> None:
    path = tiny_path(tiny_gguf_dir, "llama", "F32")
    eager, graph = (Model.load(path, device="cuda", dtype="f32", n_ctx=64, n_seq_max=4,
                               progress=False, decode=d) for d in ("eager", "cuda-graph"))
    assert graph.decode_mode == "cuda-graph"
    for m in (eager, graph):
        m.eval_prompt(_tokens(9, 1), 0)
        m.eval_prompt(_tokens(5, 2), 2)
    for step in range(3):
        assert _close(graph.decode([[3 + step], [4]], [2, 0]), eager.decode([[3 + step], [4]], [2, 0]))
    for m in (eager, graph):                    # sequence ops mutate the captured tensors in place
        m.cache.seq_rm(0, 2, 5)
        m.cache.seq_add(0, 5, None, -3)
    assert _close(graph.decode([[9]], [0]), eager.decode([[9]], [0]))
    assert sorted(graph._static.steps) == [(1, 64), (4, 64)]


@cuda
def test_cuda_graph_generations_equal_eager_on_cuda(tiny_gguf_dir: str) -> None:
    path = tiny_path(tiny_gguf_dir, "llama", "F32")
    eager, graph = (Model.load(path, device="cuda", dtype="f32", n_ctx=64, n_seq_max=4,
                               progress=False, decode=d) for d in ("eager", "cuda-graph"))
    requests = [Request(PROMPT, max_tokens=100, sampler=Greedy(), n_keep=3),
                Request(PROMPT[:4], max_tokens=9, seed=2, sampling_fields={"temperature": 1.0},
                        cfg_negative_prompt=[110, 111], cfg_scale=1.5),
                Request([97, 98], max_tokens=20, seed=3, grammar=GRAMMAR, sampling_fields={"temperature": 1.0})]
    a, b = eager.generate_batch(requests), graph.generate_batch(requests)
    assert [(r.tokens, r.finish_reason) for r in b] == [(r.tokens, r.finish_reason) for r in a]


@cuda
def test_compiled_step_captured_as_a_cuda_graph_equals_eager(tiny_gguf_dir: str) -> None:
    path = tiny_path(tiny_gguf_dir, "llama", "F32")
    eager = Model.load(path, device="cuda", dtype="f32", n_ctx=64, n_seq_max=2, progress=False, decode="eager")
    fused = Model.load(path, device="cuda", dtype="f32", n_ctx=64, n_seq_max=2, progress=False, decode="eager")
    fused.set_decode("cuda-graph", backend="inductor")
    for m in (eager, fused):
        m.eval_prompt(_tokens(9, 1), 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)        # a failed capture falls back with a warning
        for step in range(4):
            assert _close(fused.decode([[3 + step]], [0]), eager.decode([[3 + step]], [0]))
    assert hasattr(fused._static.steps[1, 64], "graph")


def test_auto_never_traces_a_model_with_per_product_dequantization(tiny_gguf_dir: str) -> None:
    # the tiny Q4_K llama's 310-row output matrix is too short for the int4 kernel: it is
    # dequantized at every product, which TorchScript's tracer cannot record; auto runs it fused
    # where numba is installed, else eagerly; a traced step records the layers and leaves such an
    # output layer to Python
    path = tiny_path(tiny_gguf_dir, "llama", "Q4_K")
    auto = Model.load(path, device="cpu", n_ctx=64, progress=False)
    assert any("dequant" in getattr(m, "kernels", ()) for m in auto.net.modules())
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # no "tracing failed" warning on the default path
        got = auto.generate(PROMPT, max_tokens=6, temperature=0.0, ignore_eos=True)
    assert auto.decode_mode == ("fused" if jit.available() else "eager")
    traced = Model.load(path, device="cpu", n_ctx=64, progress=False, decode="trace")
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # traced: no fall-back to the static step
        again = traced.generate(PROMPT, max_tokens=6, temperature=0.0, ignore_eos=True)
    assert again.tokens == got.tokens
    f32 = Model.load(tiny_path(tiny_gguf_dir, "llama", "F32"), device="cpu", n_ctx=64, progress=False)
    assert f32.decode_mode == "trace"


@pytest.mark.parametrize("arch", ["qwen3", "gemma2", "gemma3", "phi3"])
def test_static_and_traced_steps_follow_eager_on_the_other_architectures(tmp_path, arch: str) -> None:
    # Q/K norms (qwen3, gemma3), soft-capped attention and post norms (gemma2), sliding windows
    # with their own rope (gemma3), fused projections (phi3): one-token rows through each
    from halter.engine import build_tiny_gguf
    path = build_tiny_gguf(tmp_path / f"{arch}.gguf", arch=arch, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, seed=4)
    out = {}
    for mode in ("eager", "static", "trace"):
        m = Model.load(path, n_ctx=64, n_seq_max=3, progress=False, decode=mode)
        m.eval_prompt(_tokens(12, 1), 0)
        m.eval_prompt(_tokens(6, 2), 1)
        out[mode] = [m.decode([[5]], [0]), m.decode([[6], [7]], [0, 1]), m.decode([[8]], [1])]
    for mode in ("static", "trace"):
        assert all(_close(a, b, 1e-4) for a, b in zip(out[mode], out["eager"])), mode
