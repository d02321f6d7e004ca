"""The tuner's shape, checked on its source (issue #39): no function over 80 lines or over 8 parameters, and
no attribute of a tuner class assigned outside ``__init__`` (a step's result is a record it returns, not an
attribute a later step reads back)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

TUNER = Path(__file__).resolve().parents[2] / "collage" / "tuner"
MAX_LINES, MAX_PARAMS = 80, 8


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> int:
    """Parameters, self/cls not counted; *args and **kwargs one each."""
    a = fn.args
    names = [*a.posonlyargs, *a.args]
    n = len(names) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - 1 if method and names and names[0].arg in ("self", "cls") else n


def oversized(source: str) -> list[str]:
    """'name: N lines' / 'name: N parameters' for each function of ``source`` over the limits."""
    tree = ast.parse(source)
    methods = {id(m) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for m in c.body}
    out = []
    for fn in _functions(tree):
        lines = fn.end_lineno - fn.lineno + 1
        if lines > MAX_LINES:
            out.append(f"{fn.name}: {lines} lines")
        n = params(fn, id(fn) in methods)
        if n > MAX_PARAMS:
            out.append(f"{fn.name}: {n} parameters")
    return out


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        found = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        found = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        found = [i.optional_vars for i in node.items if i.optional_vars is not None]
    elif isinstance(node, ast.NamedExpr):
        found = [node.target]
    else:
        return []
    flat = []
    while found:
        t = found.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            found.extend(t.elts)
        elif isinstance(t, ast.Starred):
            found.append(t.value)
        else:
            flat.append(t)
    return flat


def late_attributes(source: str) -> list[str]:
    """'Class.method sets self.x' for each attribute of ``self`` assigned in a method other than ``__init__``
    (an item or a field of an attribute, ``self.x[k] = v`` or ``self.x.y = v``, is not the attribute itself;
    setattr(self, ...) counts)."""
    out = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
                continue
            for node in ast.walk(fn):
                for t in _targets(node):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        out.append(f"{cls.name}.{fn.name} sets self.{t.attr}")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                        and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
                    out.append(f"{cls.name}.{fn.name} calls setattr(self, ...)")
    return out


SOURCES = sorted(TUNER.rglob("*.py"))


def test_the_checks_see_what_they_check():
    """Each check fails on a variant that breaks its rule (and passes on one that keeps it)."""
    long_fn = "def f():\n" + "    x = 1\n" * MAX_LINES
    assert oversized(long_fn) == [f"f: {MAX_LINES + 1} lines"]
    assert oversized("def f(a, b, c, d, e, f, g, h, *, i): pass") == ["f: 9 parameters"]
    assert oversized("class C:\n    def m(self, a, b, c, d, e, f, g, h): pass") == []
    assert oversized("def f(a, b, c, d, e, f, g, *args, **kw): pass") == ["f: 9 parameters"]
    late = "class C:\n    def __init__(self):\n        self.a = 1\n    def run(self):\n        self.b, self.c = 2, 3\n"
    assert late_attributes(late) == ["C.run sets self.c", "C.run sets self.b"]
    assert late_attributes("class C:\n    def run(self):\n        self.d[1] = 2\n        self.e.f = 3\n") == []
    assert late_attributes("class C:\n    def run(self):\n        setattr(self, 'g', 1)\n") == \
        ["C.run calls setattr(self, ...)"]
    assert late_attributes("class C:\n    def run(self):\n        self.h += 1\n") == ["C.run sets self.h"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(TUNER)))
def test_no_function_over_80_lines_or_8_parameters(path):
    assert oversized(path.read_text()) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(TUNER)))
def test_no_attribute_assigned_outside_init(path):
    assert late_attributes(path.read_text()) == []
