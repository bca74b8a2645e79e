"""Imports point down: no import circle between the library's modules.

Every module of ``graphmem/`` is parsed (no import runs); every ``import`` and ``from ... import``
counts, at module level, inside functions and under ``TYPE_CHECKING``. ``from a.b import c`` is an
edge to the module ``a.b.c`` when that is a module of the library, else to ``a.b``; an edge to a
package is an edge to its ``__init__.py``, and a module's own package ``__init__`` is not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = "graphmem"


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the library (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for path in sorted((ROOT / LIBRARY).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The library modules ``name`` imports anywhere in its file (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name and not (name.startswith(m + ".") and m == package)}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_no_import_cycle_in_the_library(graph):
    found = cycles(graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_graph_set_imports_no_builder(graph):
    up = sorted(
        m for m in graph["graphmem.store.graphset"] if m == "graphmem.builders" or m.startswith("graphmem.builders.")
    )
    assert not up, f"graphmem/store/graphset.py imports {up}"


def test_policy_types_do_not_import_scope(graph):
    assert "graphmem.policies.scope" not in graph["graphmem.core.retrieval"]


def test_the_cycle_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
