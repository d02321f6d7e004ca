PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all,test,cluster]'
	touch $(STAMP)

venv: $(STAMP)

# lint-imports: the layer contracts in pyproject.toml ([tool.importlinter]); tests/test_layers.py adds the
# cycle and private-name checks. TEST_JOBS pytest-xdist workers (tests/conftest.py says why two are safe);
# TEST_JOBS=0 runs the tests in this process.
TEST_JOBS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(BIN)/lint-imports && $(PYTEST) $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/lint-imports && $(PYTEST) -m "not slow" $(PYTEST_ARGS)

# What collage is for, in a few minutes on 2 cores: Inception v1 (143 nodes) tuned twice.
# 1. fp32 over ONNX Runtime and OpenVINO: on a CPU the two are close, and the plan is usually one of them.
# 2. with an accuracy budget (cos >= 0.999, max error <= 1% of the output range, per output) and OpenVINO's
#    bf16 as a third backend: a measured mix of precisions within the budget, against the best fp32 backend.
# (Skipped, saying why, on a CPU without bf16.) Measurements are cached in ~/.cache/collage/costs.sqlite,
# so a second `make demo` is faster. Each report is also written as demo-out/*/report.html.
DEMO_MODEL ?= zoo:inception_v1
demo: $(STAMP)
	@echo "== 1/2: fp32, ONNX Runtime vs OpenVINO"
	$(BIN)/collage tune $(DEMO_MODEL) -o demo-out/fp32 --backends onnxruntime,openvino --budget 40s --max-nodes 4
	@if $(BIN)/collage backends --json | $(BIN)/python -c "import json,sys; sys.exit(0 if any(b['name'] == 'openvino-bf16' and b['available'] for b in json.load(sys.stdin)) else 1)"; then \
	  echo "== 2/2: + OpenVINO bf16 under an accuracy budget" && \
	  $(BIN)/collage tune $(DEMO_MODEL) -o demo-out/budgeted --backends onnxruntime,openvino,openvino-bf16 \
	    --accuracy cos=0.999,rel=0.01 --budget 90s --max-nodes 4 && \
	  echo && $(BIN)/collage report demo-out/fp32 | sed -n '1,3p' && echo && $(BIN)/collage report demo-out/budgeted; \
	else \
	  echo "== 2/2 skipped: openvino-bf16 is not available here (collage backends says why)"; \
	  echo && $(BIN)/collage report demo-out/fp32; \
	fi

clean:
	rm -rf $(VENV) build *.egg-info
