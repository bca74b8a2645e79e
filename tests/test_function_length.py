"""No function over 80 lines (ast: ``end_lineno - lineno + 1``) anywhere in the tree: the library (graphmem/, rl/,
models/), every script, study, benchmark and runner of scripts/, and the tests. Long functions are cut into named
steps that read top to bottom."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 80
SKIPPED = {"outputs", "runs", "multirun", "wandb", "__pycache__"}
"""Folders of run outputs (as ruff's ``extend-exclude``) and caches; hidden folders (``.venv``) are skipped too."""


def checked_files(root: Path = ROOT) -> list[Path]:
    """Every Python file of the tree below ``root``, outside hidden folders and run outputs."""
    return [
        f
        for f in sorted(root.rglob("*.py"))
        if not any(part.startswith(".") or part in SKIPPED for part in f.relative_to(root).parts[:-1])
    ]


def long_functions(path: Path, root: Path = ROOT, limit: int = LIMIT) -> list[str]:
    """``path:line name (n lines)`` for every function or method in ``path`` longer than ``limit`` lines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_check_finds_a_function_one_line_too_long(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT - 1))
    source = f"class A:\n    def long(self):\n{body}\n        return 0\n\n\ndef short():\n    return 1\n"
    (tmp_path / "long.py").write_text(source)
    assert long_functions(tmp_path / "long.py", root=tmp_path) == [f"long.py:2 long ({LIMIT + 1} lines)"]


def test_no_function_is_over_80_lines():
    files = checked_files()
    seen = ("scripts/train.py", "graphmem/policies/walk.py", "scripts/studies/multihop/run.py", "tests/conftest.py")
    assert all(ROOT / path in files for path in seen)
    assert not any(".venv" in f.parts for f in files)
    long = [entry for f in files for entry in long_functions(f)]
    assert not long, f"functions over {LIMIT} lines (cut them into named steps):\n" + "\n".join(long)
