"""collage.util: the one duration parser (tune's and measure's --budget) and the progress line."""
from __future__ import annotations

import argparse
import math

import pytest

from collage.util import parse_duration, say


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("30s", 30), ("10m", 600), ("1h30m", 5400), ("1.5h", 5400), ("2.5m", 150), (" 1h 30m ", 5400),
    ("45sec", 45), ("2min", 120), ("0", 0), (120, 120), (0.5, 0.5)])
def test_parse_duration_reads(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "  ", "-5", "-1m", "nan", "inf", "10x", "1h-3m", "abc", "m", ".", "1..5s",
                                  "1.5.5", "1.5.5m", "1m1m", "30s1m", "1h30", "1m30s5",
                                  float("nan"), math.inf, -1])
def test_parse_duration_refuses_naming_the_text(text):
    with pytest.raises(ValueError, match="bad duration") as e:
        parse_duration(text)
    assert repr(text) in str(e.value)


def test_budget_flags_use_it(capsys):
    from collage.commands import measure, tune

    for module in (tune, measure):
        p = argparse.ArgumentParser()
        module.add_arguments(p)
        base = ["m.onnx", "-o", "out"] if module is tune else ["m.onnx"]
        assert p.parse_args([*base, "--budget", "1h30m"]).budget == 5400
        with pytest.raises(SystemExit):
            p.parse_args([*base, "--budget=-3m"])
        assert "bad duration '-3m'" in capsys.readouterr().err


def test_count_flags_refuse_what_they_would_ignore(capsys):
    """--max-nodes 0 once meant the default silently, --seed -1 ended in numpy's traceback, --repeat -2 was
    ignored: each is a usage error naming the text."""
    from collage.commands import measure, run, tune

    for module, base, flag, bad in ((tune, ["m.onnx", "-o", "out"], "--max-nodes", "0"),
                                    (tune, ["m.onnx", "-o", "out"], "--refine-trials", "-1"),
                                    (measure, ["m.onnx"], "--max-nodes", "-3"),
                                    (run, ["art"], "--seed", "-1"), (run, ["art"], "--repeat", "-2"),
                                    (run, ["art"], "--repeat", "two")):
        p = argparse.ArgumentParser()
        module.add_arguments(p)
        with pytest.raises(SystemExit):
            p.parse_args([*base, f"{flag}={bad}"])
        assert repr(bad) in capsys.readouterr().err
    p = argparse.ArgumentParser()
    tune.add_arguments(p)
    assert p.parse_args(["m.onnx", "-o", "out", "--max-nodes", "1"]).max_nodes == 1


def test_thread_count():
    from collage.util import physical_cores, thread_count

    assert thread_count(None) == thread_count(0) == physical_cores() and thread_count(3) == 3
    for bad in (-4, 2.5, "2", True):
        with pytest.raises(ValueError, match="threads must be a whole number"):
            thread_count(bad)


def test_say_logs_and_prints(capsys, caplog):
    caplog.set_level("INFO")
    say(True, "%d nodes", 3)
    say(False, "quiet")
    assert capsys.readouterr().err == "collage: 3 nodes\n"
    assert [r.getMessage() for r in caplog.records] == ["3 nodes", "quiet"]


def test_source_commit_names_the_checkout_it_runs_from():
    """Benchmark headers name the code that wrote a table: the checkout's HEAD, short."""
    import shutil
    import subprocess
    from pathlib import Path

    from collage.util import source_commit

    root = Path(__file__).resolve().parent.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert source_commit().removesuffix("+dirty") == head


def test_source_commit_of_an_installed_copy_is_unknown(tmp_path):
    """An installed copy (here util.py alone under a venv's site-packages, the venv inside another git repo,
    as a project's .venv is) says so instead of naming the repo around it."""
    import importlib.util
    import shutil
    import subprocess
    from pathlib import Path

    import collage.util

    if shutil.which("git") is None:
        pytest.skip("no git")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "other project"], check=True)
    site = tmp_path / ".venv" / "lib" / "site-packages"
    (site / "collage").mkdir(parents=True)
    shutil.copy(Path(collage.util.__file__), site / "collage" / "util.py")
    spec = importlib.util.spec_from_file_location("copied_util", site / "collage" / "util.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.source_commit() == "unknown"


def test_cpu_flags_and_the_machine_classes_they_decide(monkeypatch, tmp_path):
    """One reader of /proc/cpuinfo (issue 40's clean-up): the first processor's flags decide the shipped model's
    machine class and whether bf16 is native; an unreadable file is None, not "no features"."""
    from collage import util
    from collage.backends.openvino.lowp import cpu_bf16_reason
    from collage.cost_models.shipped import machine_class

    fake = tmp_path / "cpuinfo"
    fake.write_text("processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    monkeypatch.setattr(util, "CPUINFO", str(fake))
    assert util.cpu_flags() == {"fpu", "avx2", "avx512f", "avx512_bf16", "amx_tile"}
    assert machine_class() == "amx"
    assert cpu_bf16_reason() is None
    monkeypatch.setattr(util, "CPUINFO", str(tmp_path / "missing"))
    assert util.cpu_flags() is None
    assert machine_class() == "avx2"


@pytest.mark.parametrize("flags, cls, int8", [
    ("fpu sse avx", "", None),                                              # no AVX2: no int8 kernels offered
    ("fpu avx avx2 fma", "avx2", "avx2"),                                   # Zen 2/3, Haswell..Coffee Lake
    ("fpu avx2 avx_vnni", "avx2-vnni", "vnni"),                             # Alder Lake
    ("fpu avx2 avx512f", "avx512", "avx2"),                                 # Skylake-SP: no VNNI
    ("fpu avx2 avx512f avx512_vnni avx512_bf16", "avx512-vnni", "vnni"),    # Zen 4/5, Cooper Lake
    ("fpu avx2 avx512f avx512_vnni amx_tile amx_int8 amx_bf16", "amx", "vnni"),  # Sapphire Rapids
])
def test_cpu_class_and_int8_kernels(flags, cls, int8, monkeypatch, tmp_path):
    """The CPU class is in every cost key (machine_id): VMs call Zen 3 and Zen 5 alike "AMD EPYC", whose costs
    are ~3x apart and whose int8 kernels round differently (results/demo/avx2-emulated.md)."""
    from collage import util

    fake = tmp_path / "cpuinfo"
    fake.write_text(f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\n")
    monkeypatch.setattr(util, "CPUINFO", str(fake))
    util.machine_id.cache_clear()
    try:
        assert util.cpu_class() == cls and util.int8_kernels() == int8
        assert util.machine_id().split("|")[1:3] == ["AMD EPYC", f"{util.physical_cores()}c"]
        assert util.machine_id().endswith(f"|{cls}") if cls else util.machine_id().count("|") == 2
    finally:
        util.machine_id.cache_clear()
