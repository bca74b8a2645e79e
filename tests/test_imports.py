"""Imports point down: the library's folders stand in a declared order, and no import runs back up or in a circle.

Every module of ``graphmem/``, ``models/`` and ``rl/`` is parsed (no import runs; the reader is the one that
draws docs/architecture.md, ``scripts/docgen/architecture.py``); every ``import`` and ``from ... import`` counts,
at module level, inside functions and under ``TYPE_CHECKING``.

A module belongs to a *unit*: a folder of ``graphmem/`` (``graphmem/store/`` is ``graphmem.store``), a loose
module at the root of ``graphmem/`` (``graphmem.memory``), ``models`` or ``rl``. :data:`LAYERS` lists the units
from the ground floor up; a module may import its own unit and the units of lower floors, never a unit of its
own floor or above.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docgen.architecture import FACE, import_graph, imports, modules, unit

ROOT = Path(__file__).resolve().parents[1]

LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"graphmem.core"}),  # the contracts: imports nothing else of the project
    frozenset({"graphmem.index", "graphmem.datasets"}),  # in-memory indexes; dataset loaders
    frozenset({"graphmem.store"}),  # every file the project reads or writes
    frozenset({"graphmem.builders", "models"}),  # graphs from records; PyTorch modules
    frozenset({"graphmem.policies", "graphmem.feedback"}),  # the readers; the feedback labels
    frozenset({"graphmem.config", "graphmem.tracking"}),  # configs and entry checks; experiment tracking
    frozenset({"graphmem.eval", "graphmem.llm", "graphmem.memory"}),  # evaluation; LLM access; the live memory
    frozenset({"graphmem.qa", "graphmem.serve"}),  # answer quality; the live memory over HTTP
    frozenset({"graphmem.streaming"}),  # the streaming protocol: the live memory fed turn by turn, judged
    frozenset({"rl"}),  # the trainers, above the library
)


def floor(name: str) -> int:
    """The floor of a unit in :data:`LAYERS` (0 is the ground)."""
    for i, layer in enumerate(LAYERS):
        if name in layer:
            return i
    raise KeyError(name)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import between units that does not point to a lower floor."""
    bad = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            if source == FACE or unit(source) == unit(target):
                continue
            if floor(unit(target)) >= floor(unit(source)):
                bad.append(f"{source} -> {target} ({unit(source)} may not import {unit(target)})")
    return bad


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
        for w in sorted(graph.get(v, ())):
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


def test_every_unit_stands_on_a_declared_floor(graph):
    missing = sorted({unit(m) for m in graph if m != FACE} - set().union(*LAYERS))
    assert not missing, f"units on no floor of LAYERS (place them, and draw them in docs/architecture.md): {missing}"


def test_every_import_points_down(graph):
    bad = upward(graph)
    assert not bad, "imports that run up or sideways:\n" + "\n".join(bad)


def test_core_imports_nothing_else_of_the_project(graph):
    out = sorted(
        f"{m} -> {t}" for m, ts in graph.items() if unit(m) == "graphmem.core" for t in ts if unit(t) != unit(m)
    )
    assert not out, out


def test_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_an_import_inside_a_function_says_why():
    """An import of the project's own modules inside a function (a heavy dependency loaded on first use, a
    registry filled on demand) carries its reason as a comment on its line."""
    known = modules(ROOT)
    silent = []
    for name, path in known.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        for _, line, inside in imports(name, path, known):
            if inside and "#" not in lines[line - 1]:
                silent.append(f"{path.relative_to(ROOT)}:{line}")
    assert not silent, "imports inside functions without a reason: " + ", ".join(sorted(set(silent)))


def test_the_checks_see_an_upward_import_and_a_circle():
    assert upward({"graphmem.core.graph": {"graphmem.policies.base"}, "graphmem.policies.base": set()}) == [
        "graphmem.core.graph -> graphmem.policies.base (graphmem.core may not import graphmem.policies)"
    ]
    assert upward({"graphmem.eval.x": {"graphmem.llm.y"}})  # a unit of the same floor is sideways
    assert not upward({"rl.walk.data": {"graphmem.core.graph", "rl.common.seeding"}})
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_graph_set_imports_no_builder(graph):
    up = sorted(m for m in graph["graphmem.store.graphset"] if unit(m) == "graphmem.builders")
    assert not up, f"graphmem/store/graphset.py imports {up}"
