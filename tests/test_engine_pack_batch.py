"""The int4 packing of many layers at once (``pack_batch.Batch``) against packing each alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from halter.engine.pack_batch import Batch, batchable, pack_cpu
from halter.engine.quant_tensor import INT4_TYPES
from halter.errors import ModelLoadError
from tests.test_engine_packed import random_quant


def _groups(name: str, width: int = 256) -> list[list]:
    sizes = [[128, 64, 192], [256], [64, 64]]        # fused parts, a layer alone, two small parts
    return [[random_quant(name, (n, width), seed=10 * g + j) for j, n in enumerate(group)]
            for g, group in enumerate(sizes)]


@pytest.mark.parametrize("name", INT4_TYPES)
@pytest.mark.parametrize("chunk_rows", [128, 4096])
def test_each_groups_packing_is_what_packing_it_alone_makes(name: str, chunk_rows: int) -> None:
    # 128-row chunks end inside parts and run across parts and groups; 4096 holds them all
    groups = _groups(name)
    batch = Batch(groups, chunk_rows=chunk_rows)
    assert len(batch.chunks) == (6 if chunk_rows == 128 else 1)
    batch.run()
    for g, group in enumerate(groups):
        packed, sz = batch.result(g)
        want_packed, want_sz = pack_cpu(group)
        assert len(packed) == len(want_packed) and len(sz) == len(want_sz)
        for got, want in zip(packed + sz, want_packed + want_sz):
            assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
            assert torch.equal(got, want)
        assert all(p.scales_checked for p in group)


def test_jobs_run_in_any_order_on_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor
    groups = _groups("Q4_1")
    batch = Batch(groups, chunk_rows=64)
    jobs = batch.jobs()
    assert sum(cost for _, cost in jobs) == sum(p.nbytes for g in groups for p in g)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda job: job[0](), reversed(jobs)))
    batch.done()
    for g, group in enumerate(groups):
        assert torch.equal(batch.result(g)[0][0], pack_cpu(group)[0][0])


def test_a_nan_scale_is_refused_naming_its_part() -> None:
    groups = _groups("Q4_K")
    bad = groups[0][1]                       # the middle part of a group, inside a chunk of three parts
    bad.raw[10, 0:2] = torch.tensor([np.nan], dtype=torch.float16).view(torch.uint8)
    for g, group in enumerate(groups):
        for j, p in enumerate(group):
            p.source_path, p.source_name = "m.gguf", f"blk.{g}.part{j}.weight"
    with pytest.raises(ModelLoadError, match="NaN or infinite") as err:
        Batch(groups, chunk_rows=4096).run()
    assert err.value.field == "blk.0.part1.weight" and err.value.path == "m.gguf"


def test_only_int4_parts_of_whole_blocks_of_one_type_and_width_batch() -> None:
    assert batchable([random_quant("Q4_0", (128, 256))])
    assert not batchable([random_quant("Q4_0", (64, 256)), random_quant("Q4_0", (48, 256))])
    assert not batchable([random_quant("Q6_K", (64, 256))])
    with pytest.raises(ValueError, match="one type and width"):
        Batch([[random_quant("Q4_0", (64, 256))], [random_quant("Q4_1", (64, 256))]])
    with pytest.raises(ValueError, match="one type and width"):
        Batch([[random_quant("Q4_0", (64, 256))], [random_quant("Q4_0", (64, 512))]])
    with pytest.raises(ValueError, match="64-row blocks"):
        Batch([[random_quant("Q4_0", (48, 256))], [random_quant("Q4_0", (64, 256))]])
    with pytest.raises(ValueError, match="64-row blocks"):
        Batch([[random_quant("Q4_0", (64, 256)), random_quant("Q4_0", (40, 256))]])
    Batch([[random_quant("Q4_0", (64, 256)), random_quant("Q4_0", (48, 256))]])   # a shorter block at the end
