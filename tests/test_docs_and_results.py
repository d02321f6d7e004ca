"""The documents and tables the repository cites are in it: results/ by topic, every table in a topic folder whose
README names it and makes it from a clean clone, every results/ path the code, benchmarks, docs and tests cite
exists (or is a table a benchmark writes there), and design documents are cited from docs/. Reads files only."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
#: what a clean clone does not have: a path on the machine a table was made on
MACHINE_LOCAL = re.compile(r"(/work/|/tmp/|~/\.cache|\$HOME|/home/)")
#: a results/ path as cited in prose or code: results/TOPIC/NAME.md (a name may hold <...> or [...] parts)
CITED = re.compile(r"results/([A-Za-z0-9_<>\[\]./-]+?\.(?:md|csv|json))")


def topics() -> list[Path]:
    return sorted(p for p in RESULTS.iterdir() if p.is_dir())


def test_every_table_sits_in_a_topic_folder_with_a_readme():
    loose = sorted(p.name for p in RESULTS.iterdir() if p.is_file() and p.name != "README.md")
    assert not loose, f"results/ holds tables outside a topic folder: {loose}"
    index = (RESULTS / "README.md").read_text()
    for topic in topics():
        assert (topic / "README.md").is_file(), f"results/{topic.name}/ has no README.md"
        assert f"{topic.name}/" in index, f"results/README.md does not list results/{topic.name}/"


@pytest.mark.parametrize("topic", [p.name for p in topics()])
def test_a_topic_readme_names_every_file_and_its_commands_read_nothing_machine_local(topic):
    readme = (RESULTS / topic / "README.md").read_text()
    for f in sorted((RESULTS / topic).iterdir()):
        if f.name == "README.md" or "-quick." in f.name:  # a --quick smoke run's table is never committed
            continue
        # a .csv or .json beside its table goes with the table's name
        named = f.with_suffix(".md").name if f.suffix in (".csv", ".json") and f.with_suffix(".md").exists() else f.name
        assert named in readme, f"results/{topic}/README.md does not name {f.name}"
    assert "| commit |" in readme, f"results/{topic}/README.md has no commit column"
    commands = [line for line in readme.splitlines() if line.startswith("    ")]
    assert commands, f"results/{topic}/README.md gives no command"
    local = [line.strip() for line in commands if MACHINE_LOCAL.search(line)]
    assert not local, f"results/{topic}/README.md: commands read machine-local paths: {local}"


def cited_paths() -> dict[str, list[str]]:
    """results/... paths cited in the tracked files outside results/ -> the files citing them."""
    files = subprocess.run(["git", "ls-files", "collage", "benchmarks", "tests", "docs", "scripts", "README.md",
                            "Makefile", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    cited: dict[str, list[str]] = {}
    for name in files.stdout.split():
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".toml", ".sh", "") or not path.is_file() or path == Path(__file__):
            continue
        for m in CITED.finditer(path.read_text(errors="replace")):
            cited.setdefault(m.group(1), []).append(name)
    return cited


def test_every_cited_results_path_is_in_a_topic_folder_and_exists():
    cited = cited_paths()
    assert cited, "no results/ path cited anywhere: the pattern is wrong"
    for rel, where in sorted(cited.items()):
        if rel == "README.md":  # the index of topics
            continue
        topic, _, name = rel.partition("/")
        assert name, f"{where[0]} cites results/{rel}: a table outside a topic folder"
        if re.search(r"[<\[]", rel) or "-quick." in name:  # a name pattern, or a smoke run's table
            assert topic == "<topic>" or (RESULTS / topic).is_dir(), \
                f"{where[0]} cites results/{rel}: no results/{topic}/"
            continue
        assert (RESULTS / rel).is_file(), f"{where[0]} cites results/{rel}, which does not exist"


#: a design or runtime document cited by name: it lives in docs/, never outside the repository
DOC = re.compile(r"(?<![\w/])((?:docs/)?(?:DESIGN|RUNTIME-FACTS|CLUSTER|GPU)\.md)")


def test_every_cited_design_document_is_in_docs():
    files = subprocess.run(["git", "ls-files", "collage", "benchmarks", "tests", "docs", "scripts", "README.md",
                            "Makefile", "pyproject.toml"], cwd=ROOT, capture_output=True, text=True, check=True)
    seen = 0
    for name in files.stdout.split():
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".toml", ".sh", "") or not path.is_file() or path == Path(__file__):
            continue
        text = path.read_text(errors="replace")
        assert "shared folder" not in text and "/work/shared" not in text, \
            f"{name} cites a folder outside the repository"
        for m in DOC.finditer(text):
            seen += 1
            cited = m.group(1)
            if name.startswith("docs/") and not cited.startswith("docs/"):
                cited = "docs/" + cited  # a docs page citing its neighbour by name
            assert cited.startswith("docs/"), f"{name} cites {cited}: write docs/{cited}"
            assert (ROOT / cited).is_file(), f"{name} cites {cited}, which does not exist"
    assert seen, "no design document cited anywhere: the pattern is wrong"
