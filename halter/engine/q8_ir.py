"""The Q8_0 tile kernel of ``q8_product``, written as LLVM IR (llvmlite) and compiled for this CPU.

numba's loops widen each 8-bit code to float32 and multiply-add it: three vector instructions per
16 codes, compute-bound short of the memory bandwidth on an output layer. Here the activations are
rounded to 16-bit integers per block of 32 (``q8_product`` does it), and each 16-row slice of a
tile takes, per pair of codes, one widening load (``vpmovsxbw``: 32 codes to 16-bit) and one
``pmaddwd`` (16 lanes of ``code_0 * x_0 + code_1 * x_1``, fused with the accumulation into
``vpdpwssd`` where the CPU has AVX512-VNNI). Per block the 32-bit sums are scaled in float32 by the
block's float16 scale (``vcvtph2ps``) and the activations' block scale. LLVM emits this only for
AVX-512 (``available``); elsewhere ``q8_product`` is not used.

``kernel(rows)`` is the machine code for ``rows`` activation rows at once (1, 2 or 4: each code
widened once for all of them), a C function of integer arguments (pointers as addresses)::

    void q8_tiles(codes, scales, xq, xscale, y, t0, t1, nb, n_out)

over tiles ``t0 <= t < t1`` of ``codes int8 [T, nb, 16, 64, 2]`` (tile, block, code pair, row,
code of the pair) and ``scales float16 [T, nb, 64]``, with ``xq int16 [rows, nb * 32]``,
``xscale float32 [rows, nb]``, writing ``y float32 [rows, n_out]`` at columns ``64 t ...``.
"""
from __future__ import annotations

from typing import Any

_compiled: dict[int, tuple[Any, int]] = {}        # rows -> (execution engine, function address)
_available: list[bool] = []
ROW_GROUPS = (4, 2, 1)


def available() -> bool:
    """Whether this CPU has the AVX-512 the kernel is written for (F and BW). Read from
    ``/proc/cpuinfo`` where there is one (asked while a model loads: importing llvmlite there would
    add ~40 MB and ~0.1 s to every load), else from LLVM's view of the host."""
    if not _available:
        flags = _cpuinfo_flags()
        if flags is None:
            try:
                from llvmlite import binding
                features = binding.get_host_cpu_features()
                flags = {name for name in ("avx512f", "avx512bw") if features.get(name)}
            except (ImportError, RuntimeError):    # pragma: no cover - without llvmlite
                flags = set()
        _available.append({"avx512f", "avx512bw"} <= flags)
    return _available[0]


def _cpuinfo_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _module(rows: int) -> Any:
    import llvmlite.binding as llvm
    import llvmlite.ir as ir

    i8, i16, i32, i64, f32 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()
    v32i8, v32i16 = ir.VectorType(i8, 32), ir.VectorType(i16, 32)
    v16i32, v16f, v16h = ir.VectorType(i32, 16), ir.VectorType(f32, 16), ir.VectorType(ir.HalfType(), 16)
    m = ir.Module(name=f"q8_tiles_{rows}")
    m.triple = llvm.get_process_triple()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [i64] * 9), name="q8_tiles")
    a_codes, a_scales, a_xq, a_xs, a_y, t0, t1, nb, n_out = fn.args
    madd = ir.Function(m, ir.FunctionType(v16i32, [v32i16, v32i16]), name="llvm.x86.avx512.pmaddw.d.512")
    fma = ir.Function(m, ir.FunctionType(v16f, [v16f, v16f, v16f]), name="llvm.fma.v16f32")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    codes = b.inttoptr(a_codes, i8.as_pointer())
    scales = b.inttoptr(a_scales, ir.HalfType().as_pointer())
    xq = b.inttoptr(a_xq, i32.as_pointer())                  # code pairs' activations, two int16 each
    xs, y = b.inttoptr(a_xs, f32.as_pointer()), b.inttoptr(a_y, f32.as_pointer())
    c = lambda v: ir.Constant(i64, v)                         # noqa: E731
    splat = ir.Constant(v16i32, [0] * 16)

    def broadcast(value: Any, vtype: Any) -> Any:
        one = b.insert_element(ir.Constant(vtype, None), value, ir.Constant(i32, 0))
        return b.shuffle_vector(one, ir.Constant(vtype, None), splat)

    def loop(start: Any, end: Any, body: Any, name: str) -> None:
        before = b.block
        head, inner, done = (fn.append_basic_block(f"{name}.{s}") for s in ("head", "body", "done"))
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(i64, name=name)
        i.add_incoming(start, before)
        b.cbranch(b.icmp_signed("<", i, end), inner, done)
        b.position_at_end(inner)
        body(i)
        i.add_incoming(b.add(i, c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    # accumulators as stack slots, which LLVM's mem2reg keeps in registers
    outs = [[b.alloca(v16f) for _ in range(4)] for _ in range(rows)]
    accs = [[b.alloca(v16i32) for _ in range(4)] for _ in range(rows)]
    x_row = b.mul(nb, c(16))                                 # pairs a row of xq

    def tile(t: Any) -> None:
        for slot in (s for row in outs for s in row):
            b.store(ir.Constant(v16f, None), slot)

        def block(k: Any) -> None:
            tk = b.add(b.mul(t, nb), k)                      # (tile, block) index
            for slot in (s for row in accs for s in row):
                b.store(ir.Constant(v16i32, None), slot)

            def pair(p: Any) -> None:
                xv = [b.bitcast(broadcast(b.load(b.gep(xq, [b.add(b.mul(c(r), x_row), b.add(b.mul(k, c(16)), p))])),
                                          v16i32), v32i16) for r in range(rows)]
                base = b.mul(b.add(b.mul(tk, c(16)), p), c(128))
                for j in range(4):                           # 16 rows of the tile each
                    ptr = b.bitcast(b.gep(codes, [b.add(base, c(32 * j))]), v32i8.as_pointer())
                    w = b.sext(b.load(ptr, align=1), v32i16)
                    for r in range(rows):
                        b.store(b.add(b.load(accs[r][j]), b.call(madd, [w, xv[r]])), accs[r][j])
            loop(c(0), c(16), pair, "pair")
            for j in range(4):
                ptr = b.bitcast(b.gep(scales, [b.add(b.mul(tk, c(64)), c(16 * j))]), v16h.as_pointer())
                scale = b.fpext(b.load(ptr, align=2), v16f)
                for r in range(rows):
                    xsr = broadcast(b.load(b.gep(xs, [b.add(b.mul(c(r), nb), k)])), v16f)
                    b.store(b.call(fma, [b.sitofp(b.load(accs[r][j]), v16f), b.fmul(scale, xsr),
                                         b.load(outs[r][j])]), outs[r][j])
        loop(c(0), nb, block, "block")
        for r in range(rows):
            for j in range(4):
                at = b.add(b.mul(c(r), n_out), b.add(b.mul(t, c(64)), c(16 * j)))
                b.store(b.load(outs[r][j]), b.bitcast(b.gep(y, [at]), v16f.as_pointer()), align=4)
    loop(t0, t1, tile, "tile")
    b.ret_void()
    return m


def kernel(rows: int) -> int:
    """The address of the compiled kernel for ``rows`` activation rows (compiled once a process)."""
    got = _compiled.get(rows)
    if got is None:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        mod = llvm.parse_assembly(str(_module(rows)))
        mod.verify()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        # 512-bit vectors (LLVM's tuning for Intel's server cores would otherwise prefer 256)
        tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(), opt=3,
                                          features=llvm.get_host_cpu_features().flatten() + ",-prefer-256-bit")
        builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        builder.getModulePassManager().run(mod, builder)
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        got = _compiled[rows] = (engine, engine.get_function_address("q8_tiles"))
    return got[1]
