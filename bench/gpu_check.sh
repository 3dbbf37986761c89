#!/usr/bin/env bash
# The GPU check, one command of at most 8 minutes (about 5 on an H200) on a bare GPU machine (PyTorch, no network):
#   1. the CUDA tests (pytest -m cuda);
#   2. bench/gpu_bench.py on a random ~1B llama in bf16: decode at batch 1 and 16 in the eager,
#      static and CUDA-graph modes with the fraction of the memory-bandwidth bound, schema-
#      constrained vs unconstrained decode, device vs host sampling agreement, and a Q4_K copy of the
#      model (weights kept quantized on the GPU) against bf16, a profile of the batch-1 step, the
#      one-row products per weight shape (cuBLAS, torch.mv, halter's Triton kernel), and the step
#      compiled by inductor and captured.
# Prepared beforehand with bench/gpu_prepare.sh (wheels in .whl/, carried along).
# Results go to $OUT (or ./gpu_check_out) as gpu_check.md and pytest.log. GPU_BENCH_EXTRA= (empty) skips
# the inductor compile (about 30 s) when device time is short.
set -uo pipefail
cd "$(dirname "$0")/.."
OUTDIR=${OUT:-gpu_check_out}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check: installing the carried wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python3 -c "import torch, halter; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), halter.__file__)" \
    || exit 1
start=$(date +%s)
timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda --durations=5 tests/test_cuda.py \
    tests/test_engine_static_decode.py 2>&1 | tee "$OUTDIR/pytest.log"
rc_tests=${PIPESTATUS[0]}
echo "pytest -m cuda: exit $rc_tests, $(( $(date +%s) - start )) s"
left=$(( 420 - ($(date +%s) - start) ))
timeout "$left" python3 bench/gpu_bench.py --decode 64 --repeats 3 --quant Q4_K ${GPU_BENCH_EXTRA---compile} --out "$OUTDIR/gpu_check.md"
rc_bench=$?
echo "gpu_bench: exit $rc_bench, total $(( $(date +%s) - start )) s"
exit $(( rc_tests != 0 || rc_bench != 0 ))
