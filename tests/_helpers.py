"""Helpers shared by the test files (importable because pytest puts tests/ on sys.path)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper


def need_backends(*names: str) -> None:
    """Skip the calling test, with the backend's own reason, unless every named backend can run here."""
    from collage.backends import get_backend

    for name in names:
        reason = get_backend(name).available()
        if reason:
            pytest.skip(f"backend {name} unavailable: {reason}")


def model_feeds(model: onnx.ModelProto, seed: int = 0, int_high: int = 8) -> dict[str, np.ndarray]:
    """Seeded inputs for every non-initializer graph input: floats standard normal, bools 0/1,
    other integers in [0, int_high)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value for d in tt.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        if dtype.kind == "f":
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            out[vi.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            out[vi.name] = rng.integers(0, int_high, size=shape).astype(dtype)
    return out


def ort_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray], *, optimize: bool = True) -> dict[str, np.ndarray]:
    """The ONNX Runtime CPU outputs of ``model`` on ``feeds``, by output name."""
    from collage.backends.onnxruntime import make_session

    sess = make_session(model, optimize=optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))
