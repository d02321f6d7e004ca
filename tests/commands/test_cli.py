"""The command line as a CI job or a script sees it: flags, --help, --version, a tune's log when stderr is
not a terminal, the --json outputs (keys documented in the README), .tar.gz artifacts, annotate."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from collage.cli import COMMANDS, _all_parsers, build_parser, main
from tests.helpers import export_mixed_plan, need_backends


def _cli(*argv: str, timeout: int = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collage.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, **kw)


# ---------------------------------------------------------------------- flags and help
def test_version(capsys):
    from collage import __version__
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"collage {__version__}"


@pytest.mark.parametrize("argv",
                         [["-v", "-q", "zoo", "list"], ["zoo", "-v", "-q", "list"], ["zoo", "list", "-v", "-q"]])
def test_global_flags_before_or_after_the_subcommand(argv):
    args = build_parser("zoo").parse_args(argv)
    assert args.verbose == 1 and args.quiet is True


def test_tune_candidate_flags_reach_the_limits():
    from collage.commands.tune import limits_from
    from collage.search.candidates import Limits

    def parse(*flags: str, command: str = "tune"):
        first = ["tune", "m.onnx", "-o", "out"] if command == "tune" else ["bench", "--models", "zoo:a"]
        return limits_from(build_parser(command).parse_args([*first, *flags]))

    assert parse() is None and parse(command="bench") is None
    assert parse("--max-nodes", "2", "--no-ranges", command="bench") == Limits(max_nodes=2, ranges=False)
    assert parse("--max-nodes", "3") == Limits(max_nodes=3)
    assert parse("--no-ranges") == Limits(ranges=False)
    assert parse("--max-nodes", "1", "--no-ranges") == Limits(max_nodes=1, ranges=False)


def test_global_flags_default_when_not_given():
    args = build_parser("report").parse_args(["report", "out"])
    assert args.verbose == 0 and args.quiet is False


def test_every_option_has_help_and_shows_its_default():
    parser = build_parser()
    for p in _all_parsers(parser):
        for action in p._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)):
                continue
            assert action.help, f"{p.prog} {action.option_strings or action.dest}: no help"
    text = {name: " ".join(next(p for p in _all_parsers(parser) if p.prog == f"collage {name}").format_help().split())
            for name in COMMANDS}
    assert "(default: cpu)" in text["tune"] and "(default: 0.0001)" in text["tune"]
    assert "(default: onnxruntime,openvino)" in text["tune"] and "absolute tolerance" in text["tune"]
    assert "(default: md)" in text["report"]


def test_top_level_help_is_plain_text():
    out = build_parser().format_help()
    assert "``" not in out and ":mod:" not in out and "Measure which backend" in out
    assert "--version" in out and "--quiet" in out


# ---------------------------------------------------------------------- a tune in a CI log
@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """One short tune of the smallest zoo model with stderr to a file (not a terminal), --json on stdout,
    a budget far too short for all its candidates, and refinement asked for."""
    need_backends("onnxruntime", "openvino")
    d = tmp_path_factory.mktemp("tune")
    with open(d / "log", "w") as log:
        proc = subprocess.run([sys.executable, "-m", "collage.cli", "tune", "zoo:tiny-resnet", "-o", str(d / "out"),
                               "--budget", "8s", "--db", str(d / "costs.sqlite"), "--refine-trials", "2", "--archive",
                               "--json"], stdout=subprocess.PIPE, stderr=log, text=True, timeout=900)
    assert proc.returncode == 0, (d / "log").read_text()[-3000:]
    return d, json.loads(proc.stdout), (d / "log").read_text()


def test_tune_log_without_a_terminal_is_short(tuned):
    _, _, log = tuned
    lines = log.replace("\r", "\n").splitlines()
    assert len(lines) < 35, log  # under --budget each step's share is a line (issue 40): 12 of them
    assert "\r" not in log and "it/s" not in log and "cand/s" not in log  # no progress bar updates


def test_a_budget_cut_is_said_on_the_terminal_and_in_the_report(tuned):
    d, res, log = tuned
    cov = res["coverage"]
    assert cov["budget_cut"] is True and cov["unmeasured"] > 0 and cov["with_cost"] < cov["distinct"]
    said = f"measured {cov['with_cost']} of {cov['distinct']} distinct candidates"
    assert said in log and "the 8 s budget cut the other" in log
    assert "refinement: " in log and (cov["refinement"]["ran"] > 0 or cov["refinement"]["why_none"])
    md = _cli("report", str(d / "out"))
    assert md.returncode == 0, md.stderr
    html = (d / "out" / "report.html").read_text()
    for text in (md.stdout, html):
        assert said.capitalize() in text and "budget cut the other" in text and "Refinement: " in text


def test_tune_json_keys(tuned):
    d, res, _ = tuned
    assert {"artifact", "model", "target", "backends", "plan_ms", "predicted_ms", "baselines", "best_single",
            "speedup", "partitions", "coverage", "numerics", "notes"} <= set(res)
    assert Path(res["artifact"]) == (d / "out").resolve() and res["model"] == "tiny-resnet"
    assert set(res["baselines"]) == {"onnxruntime", "openvino"} and res["plan_ms"] > 0
    assert {"index", "backend", "nodes", "ms"} <= set(res["partitions"][0])
    assert sum(p["nodes"] for p in res["partitions"]) == 40


def test_quiet_tune_says_nothing_on_stderr(tmp_path):
    need_backends("onnxruntime")
    proc = _cli("tune", "zoo:tiny-resnet", "-o", str(tmp_path / "out"), "--backends", "onnxruntime", "--budget",
                "8s", "--db", str(tmp_path / "c.sqlite"), "--max-nodes", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "collage:" not in proc.stderr, proc.stderr


# ---------------------------------------------------------------------- the other --json outputs
def test_report_json_and_archive(tuned):
    d, res, _ = tuned
    archive = d / "out.tar.gz"
    assert archive.is_file()
    proc = _cli("report", str(archive), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"summary", "partitions", "baselines", "coverage", "precision"} <= set(data)
    assert {"model", "target", "partitions", "backends", "plan_ms", "best_baseline", "best_baseline_ms", "speedup",
            "max_abs_err", "numerics_ok", "notes"} <= set(data["summary"])
    assert {"partition", "backend", "ops", "op_types", "ms", "runner_up", "runner_up_ms", "share_pct"} <= \
        set(data["partitions"][0])
    assert data["coverage"] == res["coverage"]
    assert (d / "out.report.html").is_file()  # beside the archive
    md = _cli("report", str(archive))
    assert md.returncode == 0 and "corrupted" not in md.stderr and "# collage report: tiny-resnet" in md.stdout


def test_run_repeat_json(tuned):
    d, _, _ = tuned
    proc = _cli("run", str(d / "out.tar.gz"), "--random", "--repeat", "20", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    lat = data["latency_ms"]
    assert set(lat) == {"runs", "p50", "p90", "p99", "mean", "min", "max"} and lat["runs"] == 20
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    assert data["throughput_per_s"] == pytest.approx(1000.0 / lat["mean"])
    assert list(data["outputs"]) and {"shape", "dtype", "file"} <= set(next(iter(data["outputs"].values())))
    text = _cli("run", str(d / "out"), "--random", "--repeat", "5")
    assert "p50" in text.stdout and "p99" in text.stdout and "throughput" in text.stdout


def test_run_partitions(tuned):
    d, res, _ = tuned
    proc = _cli("run", str(d / "out"), "--random", "--partitions", "--repeat", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["partitions"]
    assert [r["index"] for r in rows] == list(range(len(res["partitions"])))
    assert [r["backend"] for r in rows] == [p["backend"] for p in res["partitions"]]
    assert sum(r["nodes"] for r in rows) == 40 and all(r["in_chain_ms"] > 0 and r["alone_ms"] > 0 for r in rows)
    assert [r["switch"] for r in rows] == [k > 0 and rows[k]["backend"] != rows[k - 1]["backend"]
                                           for k in range(len(rows))]
    text = _cli("run", str(d / "out"), "--random", "--partitions", "--repeat", "3")
    assert "in chain" in text.stdout and "predicted" in text.stdout, text.stdout


def test_inspect_json(capsys):
    assert main(["inspect", "zoo:tiny-resnet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"name", "source", "nodes", "opset", "params", "param_bytes", "flops", "mac_flops", "inputs", "outputs",
            "ops"} <= set(data)
    assert data["nodes"] == 40 and data["inputs"][0] == {"name": "data", "dtype": "float32", "shape": [1, 3, 64, 64]}
    assert sum(v["count"] for v in data["ops"].values()) == 40


def test_zoo_list_json(capsys):
    assert main(["zoo", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    tiny = next(r for r in rows if r["name"] == "tiny-resnet")
    assert {"name", "family", "source", "built", "bytes", "nodes", "inputs", "approx_mb"} <= set(tiny)
    assert tiny["built"] is True and tiny["nodes"] == 40 and tiny["inputs"] == {"data": [1, 3, 64, 64]}


# ---------------------------------------------------------------------- annotate
def test_annotate_writes_every_nodes_backend(tmp_path):
    art = export_mixed_plan(tmp_path / "art", parts=3)
    out = tmp_path / "model.annotated.onnx"
    proc = _cli("annotate", str(art), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    manifest = json.loads((art / "manifest.json").read_text())
    want = {int(i): p["backend"] for p in manifest["partitions"] for i in p["nodes"]}
    seen = set()
    for node in model.graph.node:
        props = {e.key: e.value for e in node.metadata_props}
        assert props.get("collage.backend") in ("onnxruntime", "openvino"), (node.name, props)
        assert props["collage.precision"] == "fp32" and "collage: partition" in node.doc_string
        assert want[int(props["collage.node"])] == props["collage.backend"]
        seen.add(int(props["collage.node"]))
    assert seen == set(want)
    meta = {e.key: e.value for e in model.metadata_props}
    assert meta["collage.plan"] == "3 partition(s): onnxruntime[13], openvino[14], onnxruntime[13]"
    assert [p["backend"] for p in json.loads(meta["collage.summary"])["partitions"]] == \
        ["onnxruntime", "openvino", "onnxruntime"]


def test_annotate_refuses_another_model(tmp_path, capsys):
    from collage import zoo
    art = export_mixed_plan(tmp_path / "art", parts=2)
    rc = main(["annotate", str(art), "-o", str(tmp_path / "x.onnx"), "--model",
               str(zoo.model_path("tiny-mobilenetv2"))])
    assert rc == 2 and "not the model" in capsys.readouterr().err


# ---------------------------------------------------------------------- the runtime alone (pip install collage)
BLOCK = "import sys\nfor m in ('networkx', 'pandas', 'optuna', 'tqdm', 'openvino', 'tvm'): sys.modules[m] = None\n"


def test_runtime_runs_an_ort_artifact_without_the_extras(tmp_path):
    from collage.tuner.export import write_archive
    art = export_mixed_plan(tmp_path / "art", backends=("onnxruntime",), parts=2)
    archive = write_archive(art)
    code = BLOCK + (f"from collage.cli import main\nassert main(['run', {str(archive)!r}, '--random', '--repeat', "
                    "'3']) == 0\nimport collage\na = "
                    f"collage.load({str(art)!r})\nprint(sorted(a.run(a.random_inputs(0))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "p50" in proc.stdout and "['softmax']" in proc.stdout


def test_a_missing_extra_is_named(tmp_path):
    code = BLOCK + ("from collage.cli import main\nimport sys\nsys.exit(main(['tune', 'zoo:tiny-resnet', '-o', "
                    f"{str(tmp_path / 'o')!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "pip install 'collage[tune]'" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    api = subprocess.run([sys.executable, "-c", BLOCK + "import collage\ncollage.tune\n"], capture_output=True,
                         text=True,
                         timeout=300)
    assert api.returncode == 1 and "MissingExtra" in api.stderr and "collage[tune]" in api.stderr


#: onnx comes with the extras (tune, openvino, tvm), not with `pip install collage`: make `import onnx` fail
NO_ONNX = ("import sys\nclass _NoOnnx:\n    def find_spec(self, name, path=None, target=None):\n"
           "        if name == 'onnx' or name.startswith('onnx.'):\n"
           "            raise ImportError('no onnx here (blocked by the test)', name=name)\n"
           "sys.meta_path.insert(0, _NoOnnx())\n")


def test_tune_without_onnx_names_the_tune_extra(tmp_path):
    """Only onnx missing (every other package of the tune extra installed): `collage tune` still says which extra."""
    code = NO_ONNX + ("from collage.cli import main\nsys.exit(main(['tune', 'zoo:tiny-resnet', '-o', "
                      f"{str(tmp_path / 'o')!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "needs onnx" in proc.stderr and "pip install 'collage[tune]'" in proc.stderr
