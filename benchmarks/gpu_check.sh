#!/usr/bin/env bash
# The GPU check: ONE script for a CUDA machine (written for the project's device machine: NVIDIA H200, Python 3.12
# with PyTorch preinstalled, no network). Run from the repository root, on a fresh machine:
#
#     bash benchmarks/gpu_check.sh            # at most 7 minutes (CHECK_S=420); prints everything
#
# What it does (docs/GPU.md, "Checking on a GPU machine"):
#   0. installs carried wheels from .whl/ (if any: optuna, highspy and their dependencies, which the image lacks)
#      into /tmp/site; collage itself runs from the source tree (PYTHONPATH), nothing else is installed;
#   1. prints the GPU, the versions and `collage backends --device all` (which GPU backends and variants run);
#   2. the GPU tests: tests/backends/test_backends_gpu.py (conformance of every available GPU backend against the
#      ONNX Runtime CPU reference, save -> load, device IO), test_torch_variants.py (torch-inductor, the tf32/bf16/
#      fp16 variants), tests/runtime/test_resident.py and test_graphs.py (device-resident artifacts, CUDA-graph
#      replay), tests/measure/test_device_timing.py (CUDA events in the measuring worker),
#      tests/measure/test_device_transitions.py (hand-overs timed eagerly and in one CUDA graph); slow ones left out;
#   3. the torch anchors (benchmarks/torch_anchors.py): eager fp32/tf32/bf16, CUDA graph fp32/bf16, torch.compile;
#   4. `collage bench --target cuda` on mobilenetv2, resnet50, bert-base over every available fp32 GPU backend,
#      keeping the artifacts; then each artifact timed as it deploys (device-resident, graph-replayed, CUDA events);
#   5. resnet50 and bert-base tuned with the lower-precision variants under cos=0.999,rel=0.01, timed alike;
#   6. results/bench/<date>-cuda.md and .csv, in $RESULTS (default $OUT/results/bench): the goal of issue 41 per model, the
#      plans, the anchors and bench's table (benchmarks/cuda_results.py).
# Every step has its own time limit, cut to what is left of CHECK_S seconds, so the whole stays under 7 minutes;
# a step that fails or times out is reported and the script goes on. Exit status: 0 if every step passed, else 1.
set -u
export PYTHONUNBUFFERED=1
START=$(date +%s)
CHECK_S=${CHECK_S:-420}
ROOT=$(pwd)
DEST=${OUT:-/tmp/collage-gpu-check}
RESULTS=${RESULTS:-$DEST/results/bench}
mkdir -p "$DEST" "$RESULTS"
export COLLAGE_CACHE=${COLLAGE_CACHE:-/tmp/collage-gpu-cache}
PY=${PYTHON:-python3}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S), $(( $(date +%s) - START )) s)"; }
run() {  # run LIMIT_S CMD...: at most LIMIT_S and what is left of CHECK_S; report the exit code, remember a failure
    local limit=$1; shift
    local left=$(( CHECK_S - ($(date +%s) - START) - 12 ))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then echo "!!! no time left for: $*"; status=1; return 0; fi
    timeout --kill-after=5 "$limit" "$@"
    local rc=$?
    [ $rc -eq 124 ] && echo "!!! timed out after ${limit}s: $*"
    [ $rc -ne 0 ] && { echo "!!! exit $rc: $*"; status=1; }
    return 0
}
COLLAGE=("$PY" -c "from collage.cli import main; raise SystemExit(main())")  # the CLI from the source tree

step "0. carried wheels"
if ls .whl/*.whl >/dev/null 2>&1; then
    ls -la .whl/
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "!!! could not install the carried wheels"; exit 1; }
    export PYTHONPATH=/tmp/site:$ROOT
else
    echo "no .whl/ folder: only what the machine has is used"
    export PYTHONPATH=$ROOT
fi

step "1. machine and backends"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || status=1
$PY - <<'PYEOF'
import importlib, sys
print("python", sys.version.split()[0])
for mod in ("numpy", "onnx", "onnxruntime", "torch", "triton", "tensorrt", "optuna", "highspy", "pandas"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod:12s} {getattr(m, '__version__', '?')}")
    except Exception as e:
        print(f"{mod:12s} MISSING ({type(e).__name__}: {e})")
PYEOF
run 30 "${COLLAGE[@]}" backends --device all
# the available GPU backends: fp32 ones (bench) and all of them with the variants (the budgeted tunes)
read -r GPU_FP32 GPU_ALL <<< "$($PY -c "
from collage.backends import VARIANTS, backend_names, unavailable_reason
fp32 = [n for n in backend_names('cuda') if unavailable_reason(n) is None]
low = [n for n, (_, d) in VARIANTS.items() if d == 'cuda' and unavailable_reason(n) is None]
print(','.join(fp32) or '-', ','.join(fp32 + low) or '-')" 2>/dev/null)"
echo "available GPU backends: fp32 ${GPU_FP32:--}; with variants ${GPU_ALL:--}"

step "2. GPU tests"
run 75 $PY -m pytest -q -rs -p no:cacheprovider -m "not slow" tests/backends/test_backends_gpu.py \
    tests/backends/test_torch_variants.py tests/runtime/test_resident.py tests/runtime/test_graphs.py \
    tests/measure/test_device_timing.py tests/measure/test_device_transitions.py

if [ -z "${GPU_FP32:-}" ] || [ "$GPU_FP32" = "-" ]; then
    echo "!!! no GPU backend is available: no benchmarks"
    exit 1
fi

step "3. torch anchors"
run 70 $PY benchmarks/torch_anchors.py --models resnet50,bert-base,mobilenetv2 --device cuda --repeat 50 \
    --out "$DEST/anchors"

step "4. collage bench --target cuda (fp32: $GPU_FP32), then the artifacts as they deploy"
run 120 "${COLLAGE[@]}" bench --models zoo:mobilenetv2,zoo:resnet50,zoo:bert-base --target cuda --backends "$GPU_FP32" \
    --budget 10s --out "$DEST/bench" --artifacts "$DEST/art-fp32"
ls -d "$DEST"/art-fp32/*/ >/dev/null 2>&1 && \
    run 25 $PY benchmarks/cuda_results.py plan "$DEST"/art-fp32/*/ --tag fp32 --out "$DEST/plans.jsonl"

step "5. lower precision under cos=0.999,rel=0.01 ($GPU_ALL)"
for m in resnet50 bert-base; do
    run 45 $PY benchmarks/cuda_results.py lowp --model "$m" --backends "$GPU_ALL" --accuracy cos=0.999,rel=0.01 \
        --budget 12 --work "$DEST/art-lowp" --out "$DEST/plans.jsonl"
done

step "6. results"
run 15 $PY benchmarks/cuda_results.py merge --plans "$DEST/plans.jsonl" --anchors "$DEST/anchors.csv" \
    --bench "$DEST/bench" --out "$RESULTS"
cat "$RESULTS"/*-cuda.md 2>/dev/null

step "done: status $status"
exit $status
