PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,cluster]'
	touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

# A real tuning job on a built-in model: ONNX Runtime vs OpenVINO on MobileNetV2 (224x224), a few
# minutes on 2 cores the first time (measurements are cached in ~/.cache/collage/costs.sqlite).
demo: $(STAMP)
	$(BIN)/collage tune zoo:mobilenetv2 -o demo-out --backends onnxruntime,openvino --budget 6m
	$(BIN)/collage report demo-out

clean:
	rm -rf $(VENV) build *.egg-info
