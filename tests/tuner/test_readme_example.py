"""The README's Python example runs as it is written (issue 40: it used an ``x`` it never defined, and
``result.speedup`` did not exist though ``to_json()`` has "speedup"), in a fresh directory."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import need_backends

README = Path(__file__).resolve().parents[2] / "README.md"


def _python_example() -> str:
    text = README.read_text()
    section = text[text.index("## Python API"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    need_backends("onnxruntime", "openvino")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_python_example(), str(README), "exec"), scope)  # noqa: S102 - the README's own code
    result, outputs, times = scope["result"], scope["outputs"], scope["times"]
    assert (tmp_path / "out" / "manifest.json").is_file()
    assert set(outputs) == {"output"} or outputs  # the model's outputs, by name
    assert len(times) == len(result.plan.partitions)
    # every key of to_json() is an attribute (best_single and partitions in their richer forms)
    summary = json.loads(result.to_json())
    for key, value in summary.items():
        if key in ("best_single", "partitions"):
            continue
        got = getattr(result, key)
        assert got == value or (key == "artifact" and str(got) == value), key
    assert result.speedup == pytest.approx(summary["best_single"]["ms"] / result.plan_ms)
