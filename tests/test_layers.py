"""The module graph of collage/ and benchmarks/: no `_private` name imported across modules, no import cycle.

Imports are read with ast (every level: module top, functions, TYPE_CHECKING blocks), so a cycle hidden in
a function-level import or an annotation counts too. The layer contracts themselves are import-linter's job
(pyproject.toml, run by `make test`); this test checks what import-linter does not: private names and cycles at any
level.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("collage", "benchmarks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (resolving relative imports)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(modules: dict[str, Path]):
    """(importer, imported module, imported name or None, line) for every import of a project module, at any
    level (module top, functions, classes, ``if TYPE_CHECKING:`` blocks)."""
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in PACKAGES:
                        yield module, alias.name, None, node.lineno
            elif isinstance(node, ast.ImportFrom):
                target = _absolute(module, path, node)
                if target.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in modules:  # `from pkg import submodule`
                        yield module, sub, None, node.lineno
                    else:
                        yield module, target, alias.name, node.lineno


def test_no_private_name_crosses_a_module_boundary():
    modules = _modules()
    bad = [f"{m}:{line} imports {name} from {target}"
           for m, target, name, line in _imports(modules)
           if name and name.startswith("_") and not name.startswith("__") and target != m]
    assert not bad, "private names imported across modules (make them public or move them):\n" + "\n".join(bad)


def _import_graph() -> nx.DiGraph:
    modules = _modules()
    g = nx.DiGraph()
    g.add_nodes_from(modules)
    for m, target, _name, _line in _imports(modules):
        # importing a.b.c runs a/__init__ and a/b/__init__ too, but a package __init__ that lazily
        # re-exports is not a cycle of ideas: count the module named, not its parents.
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != m:
            g.add_edge(m, target)
    return g


def test_no_import_cycle():
    """No cycle in the graph of imports at any level, ``if TYPE_CHECKING:`` ones included: an annotation naming
    the module that imports this one is a dependency of ideas too (the compiled partitions name what they need
    of their backend as a Protocol beside them instead).

    A package ``__init__`` that lazily re-exports its own submodules (``collage.__getattr__`` -> tune) is an
    edge from the package into itself, not a dependency of the package's ideas on each other: those edges
    are left out, the rest of every ``__init__`` counts."""
    g = _import_graph()
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    cycles = sorted(sorted(c) for c in nx.simple_cycles(g))
    assert not cycles, "import cycles among modules:\n" + "\n".join(" <-> ".join(c) for c in cycles)
