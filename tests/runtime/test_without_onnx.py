"""The runtime alone, as `pip install collage` installs it (numpy and onnxruntime, no onnx, no extras): an
artifact whose partitions all run on ONNX Runtime, plain and linked (NCHWc hand-over), loads and runs in a
fresh process where ``import onnx`` fails, and computes what the whole model does.

(tests/commands/test_cli.py blocks the extras the same way for `collage run`; here onnx itself is blocked.)"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np

from collage.plan import Partition, Plan
from tests.helpers import export_mixed_plan, need_backends, ort_reference, residual_pieces

#: imported first in the child: ``import onnx`` (and any onnx.* module) fails, as does every extra
_NO_ONNX = textwrap.dedent("""
    import sys

    class _NoOnnx:  # a meta-path finder consulted before the real ones
        def find_spec(self, name, path=None, target=None):
            if name == "onnx" or name.startswith("onnx."):
                raise ImportError(f"onnx is not installed here (blocked by the test): {name}", name=name)
            return None

    sys.meta_path.insert(0, _NoOnnx())
    for m in ("networkx", "pandas", "optuna", "tqdm", "tvm", *sys.argv[4:]):
        sys.modules[m] = None
""")

_CHILD = _NO_ONNX + textwrap.dedent("""
    import json
    import numpy as np
    import collage
    from collage.cli import main

    arts, feeds_file, out_file = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    feeds = dict(np.load(feeds_file))
    got = {}
    for key, path in arts.items():
        assert main(["run", path, "--random", "--repeat", "3"]) == 0, path
        art = collage.load(path)
        for name, value in art.run(feeds).items():
            got[f"{key}/{name}"] = np.array(value)
    np.savez(out_file, **got)
    print(json.dumps({"onnx": sorted(m for m in sys.modules if m == "onnx" or m.startswith("onnx."))}))
""")


def test_an_ort_only_artifact_loads_and_runs_without_onnx(tmp_path):
    """plain 3-partition and linked 5-partition ONNX Runtime artifacts (directories and .tar.gz), `collage run`
    and collage.load(): same outputs as the whole model, and no onnx module ever imported."""
    from collage import zoo
    from collage.tuner.export import export, write_archive

    need_backends("onnxruntime")
    graph = zoo.load_graph("zoo:tiny-resnet")
    plain = export_mixed_plan(tmp_path / "plain", backends=("onnxruntime",), parts=3)
    linked = export(graph, Plan([Partition(tuple(p), "onnxruntime") for p in residual_pieces(graph)]),
                    tmp_path / "linked")
    entries = {k: [p["entry"] for p in json.loads((a / "manifest.json").read_text())["partitions"]]
               for k, a in (("plain", plain), ("linked", linked))}
    # the artifacts really are what the test says: all ONNX Runtime, one unlinked, one handing over in NCHWc
    assert {e["backend"] for es in entries.values() for e in es} == {"onnxruntime"}
    assert len(entries["plain"]) == 3 and not any(e.get("linked") for e in entries["plain"])
    assert len(entries["linked"]) > 2 and all(e.get("linked") for e in entries["linked"])
    arts = {"plain": str(plain), "linked": str(linked), "plain.tar.gz": str(write_archive(plain)),
            "linked.tar.gz": str(write_archive(linked))}
    rng = np.random.default_rng(0)
    feeds = {t: rng.standard_normal(graph.tensor(t).shape).astype(np.float32) for t in graph.inputs}
    np.savez(tmp_path / "feeds.npz", **feeds)
    _run_without_onnx(tmp_path, graph, arts, "openvino")


def _run_without_onnx(tmp_path, graph, arts: dict[str, str], *blocked: str) -> None:
    """Run ``arts`` (name -> artifact path) with `collage run` and collage.load() in a child where onnx and
    ``blocked`` cannot be imported; their outputs must be the whole model's, and no onnx module imported."""
    rng = np.random.default_rng(0)
    feeds = {t: rng.standard_normal(graph.tensor(t).shape).astype(np.float32) for t in graph.inputs}
    np.savez(tmp_path / "feeds.npz", **feeds)
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(arts), str(tmp_path / "feeds.npz"),
                           str(tmp_path / "got.npz"), *blocked], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"onnx": []}
    assert proc.stdout.count("p50") == len(arts)  # `collage run --repeat 3` of each
    want = ort_reference(graph.model, feeds)
    got = dict(np.load(tmp_path / "got.npz"))
    for key in arts:
        for name in graph.outputs:
            np.testing.assert_allclose(got[f"{key}/{name}"], want[name], rtol=1e-4, atol=1e-5, err_msg=f"{key}: {name}")


def test_an_openvino_artifact_loads_and_runs_without_onnx(tmp_path):
    """`pip install 'collage[openvino]'` without onnx (issue 40: "module onnx is missing" was the answer): a mixed
    ONNX Runtime / OpenVINO artifact and an all-OpenVINO linked one (channels-last hand-over) load and run where
    ``import onnx`` fails, and compute what the whole model does."""
    from collage import zoo
    from collage.tuner.export import export

    need_backends("onnxruntime", "openvino")
    graph = zoo.load_graph("zoo:tiny-resnet")
    mixed = export_mixed_plan(tmp_path / "mixed", parts=3)
    linked = export(graph, Plan([Partition(tuple(p), "openvino") for p in residual_pieces(graph)]),
                    tmp_path / "linked")
    entries = {k: [p["entry"] for p in json.loads((a / "manifest.json").read_text())["partitions"]]
               for k, a in (("mixed", mixed), ("linked", linked))}
    assert {e["backend"] for e in entries["mixed"]} == {"onnxruntime", "openvino"}
    assert len(entries["linked"]) > 2 and sum(bool(e.get("linked")) for e in entries["linked"]) >= 2
    _run_without_onnx(tmp_path, graph, {"mixed": str(mixed), "linked": str(linked)})


def test_an_artifact_names_the_extra_it_needs(tmp_path):
    """manifest.json lists the extras beyond `pip install collage`; where one is missing, `collage run` says in one
    line which `pip install` brings it (exit 2), and `collage report` says what to install."""
    mixed = export_mixed_plan(tmp_path / "mixed", parts=3)
    ort_only = export_mixed_plan(tmp_path / "ort", backends=("onnxruntime",), parts=2)
    assert json.loads((mixed / "manifest.json").read_text())["extras"] == ["openvino"]
    assert json.loads((ort_only / "manifest.json").read_text())["extras"] == []
    child = _NO_ONNX + "from collage.cli import main\nsys.exit(main(['run', sys.argv[1], '--random']))\n"
    proc = subprocess.run([sys.executable, "-c", child, str(mixed), "", "", "openvino"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'collage[openvino]'" in lines[0] and "Traceback" not in proc.stderr, lines
    report = subprocess.run([sys.executable, "-m", "collage.cli", "report", str(mixed)], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    assert "To run it elsewhere: pip install 'collage[openvino]'" in report.stdout
