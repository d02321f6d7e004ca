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
    from collage.backends.onnxruntime.backend import make_session

    sess = make_session(model, optimize=optimize)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def pieces_ending_after(graph, ends) -> list[list[int]]:
    """Contiguous node-id pieces, each ending after one of ``ends`` (the last piece runs to the end)."""
    out, start = [], 0
    for e in [*sorted(set(ends)), len(graph) - 1]:
        if e >= start:
            out.append(list(range(start, e + 1)))
            start = e + 1
    return out


def residual_pieces(graph) -> list[list[int]]:
    """A ResNet cut after the stem's MaxPool and after every residual block's closing Relu."""
    ends = [i for i in range(len(graph)) if graph.op_type(i) == "MaxPool"][:1]
    ends += [i for i in range(len(graph)) if graph.op_type(i) == "Relu"
             and graph.op_type(graph.producer(graph.op(i).input[0]) or 0) in ("Sum", "Add")]
    return pieces_ending_after(graph, ends)


def layer_pieces(graph) -> list[list[int]]:
    """A BERT cut after each LayerNormalization."""
    return pieces_ending_after(graph, [i for i in range(len(graph)) if graph.op_type(i) == "LayerNormalization"])


def run_chain(graph, parts, compiled, feeds) -> dict:
    """Run compiled pieces (node-id lists ``parts`` of ``graph``) in order, handing tensors over by name;
    every tensor made, by name (copied: a backend may reuse its output buffers)."""
    env = dict(feeds)
    for ids, c in zip(parts, compiled):
        entering, _ = graph.boundary(ids)
        env.update({k: np.array(v, copy=True) for k, v in c.run({t: env[t] for t in entering}).items()})
    return env


def export_mixed_plan(out, spec: str = "zoo:tiny-resnet", backends=("onnxruntime", "openvino"), parts: int = 3,
                      report: dict | None = None):
    """Export a hand-made ``parts``-partition plan of a zoo model (contiguous node ranges, backends
    alternating, costs made up in proportion to the nodes) as an artifact at ``out``; return its path.
    Skips the calling test unless every backend is available."""
    from collage import zoo
    from collage.plan import Partition, Plan
    from collage.tuner.export import export

    need_backends(*backends)
    graph = zoo.load_graph(spec)
    n = len(graph)
    cuts = [round(n * k / parts) for k in range(parts + 1)]
    plan = Plan([Partition(tuple(range(cuts[k], cuts[k + 1])), backends[k % len(backends)],
                           0.01 * (cuts[k + 1] - cuts[k]) * (1 + k),
                           (backends[(k + 1) % len(backends)], 0.012 * (cuts[k + 1] - cuts[k]) * (1 + k)))
                 for k in range(parts)], predicted_ms=0.5)
    return export(graph, plan, out, report={"source": graph.source, **(report or {})})
