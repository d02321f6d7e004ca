#!/usr/bin/env bash
# The GPU check: ONE script for a CUDA machine (written for the project's device machine: NVIDIA H200,
# Python 3.12 with PyTorch preinstalled, no network). Run from the repository root:
#
#     bash benchmarks/gpu_check.sh            # ~5-8 minutes; prints everything
#
# What it does (docs/GPU.md, "Checking on a GPU machine"):
#   0. installs carried wheels from .whl/ (if any) into /tmp/site: e.g. onnxruntime-gpu (which then shadows the
#      CPU onnxruntime) and tensorrt; collage itself runs from the source tree (PYTHONPATH), nothing else is
#      installed;
#   1. prints the GPU, the versions and `collage backends --device all` (which GPU backends run, or why not);
#   2. runs tests/test_backends_gpu.py: the GPU conformance checks (zoo subgraphs against the ONNX Runtime CPU
#      fp32 reference, save -> load, device IO with torch CUDA tensors, CUDA-event timing, refusal of an op,
#      TensorRT's engine cache) for every GPU backend that is available, plus the CPU-side tests;
#   3. a smoke benchmark: each available GPU backend on the whole resnet50 / mobilenetv2 / bert-base, max abs
#      error against the CPU reference and the median of 50 CUDA-event-timed calls (device IO, no host copies);
#   4. `collage bench --target cuda` on resnet50, mobilenetv2, bert-base over the available GPU backends, with a
#      measuring budget of 20-30 s per model, writing results-<model>/<date>-cuda.{md,csv} under $OUT (or /tmp/collage-gpu-check).
# Every step has its own time limit (30 + 120 + 120 + 60 + 70 + 90 s, plus nvidia-smi) so that the whole stays under 8 minutes; a step that fails or times out
# is reported and the script goes on. Exit status: 0 if every step passed, else 1.
set -u
export PYTHONUNBUFFERED=1
ROOT=$(pwd)
DEST=${OUT:-/tmp/collage-gpu-check}
mkdir -p "$DEST"
export COLLAGE_CACHE=${COLLAGE_CACHE:-/tmp/collage-gpu-cache}
PY=${PYTHON:-python3}
status=0
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
run() {  # run LIMIT_S CMD...: report the exit code, remember a failure
    local limit=$1; shift
    timeout --kill-after=10 "$limit" "$@"
    local rc=$?
    [ $rc -eq 124 ] && echo "!!! timed out after ${limit}s: $*"
    [ $rc -ne 0 ] && { echo "!!! exit $rc: $*"; status=1; }
    return 0
}

step "0. carried wheels"
if ls .whl/*.whl >/dev/null 2>&1; then
    ls -la .whl/
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "!!! could not install the carried wheels"; exit 1; }
    export PYTHONPATH=/tmp/site:$ROOT
else
    echo "no .whl/ folder: only what the machine has (PyTorch, the CPU onnxruntime) is used"
    export PYTHONPATH=$ROOT
fi

step "1. machine and backends"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || status=1
$PY - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for mod in ("numpy", "onnx", "onnxruntime", "torch", "tensorrt", "networkx", "pandas", "tqdm"):
    try:
        m = importlib.import_module(mod)
        print(f"{mod:12s} {getattr(m, '__version__', '?')}  {getattr(m, '__file__', '')}")
    except Exception as e:
        print(f"{mod:12s} MISSING ({type(e).__name__}: {e})")
try:
    import onnxruntime
    print("onnxruntime providers:", onnxruntime.get_available_providers())
except Exception:
    pass
try:
    import torch
    print("torch cuda:", torch.version.cuda, "available:", torch.cuda.is_available(),
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception:
    pass
EOF
run 30 $PY -c "from collage.cli import main; raise SystemExit(main(['backends', '--device', 'all']))"
GPU_BACKENDS=$($PY -c "
from collage.backends import backend_names, unavailable_reason
print(','.join(n for n in backend_names('cuda') if unavailable_reason(n) is None))" 2>/dev/null)
echo "available GPU backends: ${GPU_BACKENDS:-none}"

step "2. tests/test_backends_gpu.py (conformance of the GPU backends)"
run 120 $PY -m pytest -q -rs -p no:cacheprovider tests/test_backends_gpu.py

if [ -z "$GPU_BACKENDS" ]; then
    echo "!!! no GPU backend is available: skipping the benchmarks"
    exit 1
fi

step "3. smoke benchmark: whole models, device IO, CUDA events"
run 120 $PY - "$GPU_BACKENDS" <<'EOF'
import sys, time
import numpy as np
import torch
from collage import zoo
from collage.backends import get_backend
from collage.backends.cuda_timing import event_times_ms
from collage.backends.onnxruntime import make_session

names = sys.argv[1].split(",")
for model_name in ("mobilenetv2", "resnet50", "bert-base"):
    g = zoo.load_graph(f"zoo:{model_name}")
    feeds = zoo.random_inputs(g)
    ref = make_session(g.model, optimize=True).run(None, feeds)
    for name in names:
        try:
            t0 = time.perf_counter()
            c = get_backend(name, device_io=True).compile(g.model)
            build_s = time.perf_counter() - t0
            dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            out = c.run(dev)
            err = max(float(np.max(np.abs(out[o].float().cpu().numpy() - r))) for o, r in zip(c.output_names, ref))
            samples = event_times_ms(lambda: c.run(dev), repeat=50, warmup=10)
            ev = np.median([s.event_ms for s in samples]); wall = np.median([s.wall_ms for s in samples])
            print(f"{model_name:12s} {name:17s} build {build_s:6.1f}s  max_abs_err {err:.2e}  "
                  f"median {ev:.3f} ms (events)  {wall:.3f} ms (wall)", flush=True)
        except Exception as e:
            print(f"{model_name:12s} {name:17s} FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
EOF

step "4. collage bench --target cuda"
# one call per model (a timeout loses one model, not three): MODEL:LIMIT_S:MEASURING_BUDGET
for spec in mobilenetv2:60:20s resnet50:70:25s bert-base:90:30s; do
    IFS=: read -r m limit budget <<< "$spec"
    run "$limit" $PY -c "from collage.cli import main; raise SystemExit(main())" bench --models "zoo:$m" \
        --target cuda --backends "$GPU_BACKENDS" --budget "$budget" --out "$DEST/results-$m"
    cat "$DEST/results-$m"/*.md 2>/dev/null
done

step "done: status $status"
exit $status
