"""``docs/architecture.md``: the library's floors drawn from the code's own imports, what each folder may import,
and where new code goes.

The import graph is read from the source (``ast``, nothing runs): every ``import`` of ``graphmem/``,
``models/`` and ``rl/``, at module level, inside functions and under ``TYPE_CHECKING``. A module belongs to a
*unit*: a folder of ``graphmem/``, a loose module at the root of ``graphmem/``, ``models`` or ``rl``. A unit's
floor is one above the highest floor it imports (the ground floor imports no other unit), so the picture is the
code's, and ``tests/test_imports.py`` holds the order the code must keep.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from docgen.sources import fill

PAGE = "architecture"
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("graphmem", "models", "rl")
FACE = "graphmem"  # graphmem/__init__.py, the package's front door: it hands on names from any floor


# ---------------------------------------------------------------------------- the import graph
def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the project (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> list[tuple[str, int, bool]]:
    """``(imported module, line, inside a function)`` for every project module ``name`` imports: ``from a.b
    import c`` is the module ``a.b.c`` when there is one, else ``a.b``; a module's own package is not counted."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    inside = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for node in ast.walk(fn)
    }
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target not in known and "." in target:
                target = target.rpartition(".")[0]
            if target in known and target != name and not (name.startswith(target + ".") and target == package):
                found.append((target, node.lineno, id(node) in inside))
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    known = modules(root)
    return {name: {t for t, _, _ in imports(name, path, known)} for name, path in known.items()}


def unit(module: str) -> str:
    """The unit of a module: its folder under ``graphmem/``, a loose module of ``graphmem/``, ``models`` or ``rl``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "graphmem" else parts[0]


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Unit -> the other units its modules import (the front door left out)."""
    out: dict[str, set[str]] = {}
    for source, targets in graph.items():
        if source != FACE:
            out.setdefault(unit(source), set()).update(unit(t) for t in targets if unit(t) != unit(source))
    return out


def floors(units: dict[str, set[str]]) -> dict[str, int]:
    """Each unit's floor: 1 for a unit that imports no other, else one above the highest it imports."""
    out: dict[str, int] = {}

    def floor(u: str, seen: tuple[str, ...] = ()) -> int:
        if u not in out:
            if u in seen:
                raise ValueError(f"import circle between units: {' -> '.join((*seen, u))}")
            out[u] = 1 + max((floor(v, (*seen, u)) for v in units.get(u, ())), default=0)
        return out[u]

    for u in sorted(units):
        floor(u)
    return out


def direct(units: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows left once an arrow that another path already implies is dropped (transitive reduction)."""

    def reach(u: str) -> set[str]:
        seen, todo = set(), list(units.get(u, ()))
        while todo:
            v = todo.pop()
            if v not in seen:
                seen.add(v)
                todo.extend(units.get(v, ()))
        return seen

    return {u: {v for v in vs if not any(v in reach(w) for w in vs - {v})} for u, vs in units.items()}


# ---------------------------------------------------------------------------- the page
def _folder(u: str) -> str:
    path = ROOT / Path(*u.split("."))
    return f"{u.replace('.', '/')}/" if path.is_dir() else f"{u.replace('.', '/')}.py"


def _holds(u: str) -> str:
    """The first sentence of the unit's docstring (its ``__init__.py``, or the module itself)."""
    path = ROOT / Path(*u.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    doc = re.sub(r":\w+:`~?([^`]+)`", lambda m: f"`{m.group(1).rsplit('.', 1)[-1]}`", " ".join(doc.split()))
    return doc.split(". ")[0].rstrip(".").replace("|", "/")


def _picture(units: dict[str, set[str]], level: dict[str, int]) -> list[str]:
    name = {u: u.replace(".", "_") for u in units}
    lines = ["```mermaid", "flowchart BT"]
    for f in sorted(set(level.values())):
        lines.append(f'  subgraph floor{f}["floor {f}"]')
        lines += [f'    {name[u]}["{_folder(u)}"]' for u in sorted(units) if level[u] == f]
        lines.append("  end")
    arrows = direct(units)
    lines += [f"  {name[u]} --> {name[v]}" for u in sorted(arrows) for v in sorted(arrows[u])]
    return [*lines, "```"]


def _table(units: dict[str, set[str]], level: dict[str, int]) -> list[str]:
    lines = ["| floor | folder | holds | imports (every arrow of the code) |", "|---:|---|---|---|"]
    for u in sorted(units, key=lambda u: (-level[u], u)):
        below = ", ".join(f"`{_folder(v)}`" for v in sorted(units[u], key=lambda v: (-level[v], v))) or "—"
        lines.append(f"| {level[u]} | `{_folder(u)}` | {_holds(u)} | {below} |")
    return lines


def render(results_dir: Path) -> str:
    """The whole page (``results_dir`` is not read: the page is drawn from the source)."""
    units = unit_graph(import_graph())
    level = floors(units)
    return "\n".join(
        [fill(PAGE, "lead"), "", *_picture(units, level), "", fill(PAGE, "table"), "", *_table(units, level), ""]
        + [fill(PAGE, "rules")]
    )
