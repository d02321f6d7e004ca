"""docs/ARCHITECTURE.md names real code (#39): every dotted ``collage.…`` name in it resolves (the longest
importable module prefix, then attributes: a module, class, function or constant that exists), and every
``collage/…``, ``tests/…`` or ``docs/…`` path in it exists. A rename that forgets the page fails here."""
from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"

#: ``collage.a.b.c``: at least one dot, identifiers only (a trailing full stop is not part of it)
DOTTED = re.compile(r"\bcollage(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
#: ``collage/a/b.py``, ``tests/x/test_y.py``, ``collage/report/report.schema.json``, ``collage/tuner/steps/``
PATH = re.compile(r"(?<![\w./-])(?:collage|tests|docs)/[A-Za-z0-9_./-]*")


def dotted_names(text: str) -> list[str]:
    return sorted(set(DOTTED.findall(text)))


def paths(text: str) -> list[str]:
    found = {m.rstrip(".") for m in PATH.findall(text)}
    return sorted(p for p in found if "/" in p)


def resolves(name: str) -> str | None:
    """None when ``name`` is an importable module or an attribute chain under one, else why not."""
    parts = name.split(".")
    module, rest = None, parts
    for i in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name is not None and not ".".join(parts[:i]).startswith(e.name):
                return f"{name}: importing {'.'.join(parts[:i])} needs {e.name}"  # a missing dependency
            continue
        rest = parts[i:]
        break
    if module is None:
        return f"{name}: no such module"
    obj = module
    for j, attr in enumerate(rest):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            where = ".".join(parts[: len(parts) - len(rest) + j])
            return f"{name}: {where} has no attribute {attr!r}"
    return None


def unresolved(text: str) -> list[str]:
    """Every name or path in ``text`` that does not resolve, with why."""
    bad = [why for n in dotted_names(text) if (why := resolves(n)) is not None]
    bad += [f"{p}: no such file or folder" for p in paths(text) if not (ROOT / p).exists()]
    return bad


def test_the_page_names_real_modules_attributes_and_files():
    text = DOC.read_text(encoding="utf-8")
    assert len(dotted_names(text)) > 50 and len(paths(text)) > 10  # the parsing still finds the names
    assert unresolved(text) == []


def test_the_check_catches_a_wrong_name():
    assert resolves("collage.tuner.steps.search.search") is None
    assert resolves("collage.tune") is None  # a lazy attribute of the package
    assert unresolved("`collage.tuner.steps.search.serch`") == [
        "collage.tuner.steps.search.serch: collage.tuner.steps.search has no attribute 'serch'"]
    assert unresolved("`collage.tuner.stepz.search`") == [
        "collage.tuner.stepz.search: collage.tuner has no attribute 'stepz'"]
    assert unresolved("see collage/tuner/steps/serch.py.") == [
        "collage/tuner/steps/serch.py: no such file or folder"]


def test_the_page_is_linked():
    assert "docs/ARCHITECTURE.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "ARCHITECTURE.md" in (ROOT / "docs/DESIGN.md").read_text(encoding="utf-8")
