"""Reading results files and writing markdown tables, shared by the renderers (not a page: no ``render``)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from graphmem.errors import InputError


class ResultsFileError(InputError, ValueError):
    """A results file under docs/results/ that cannot be read or lacks a field a renderer needs."""


def load_results(results_dir: Path, name: str) -> dict[str, Any] | None:
    """The JSON object in ``results_dir / name``; ``None`` when the file does not exist."""
    path = Path(results_dir) / name
    return read_json(path) if path.is_file() else None


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or an error naming the file."""
    path = Path(path)
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultsFileError(f"{path}: not a readable JSON file: {err}") from None
    if not isinstance(payload, dict):
        raise ResultsFileError(f"{path}: expected a JSON object, got {type(payload).__name__}")
    return payload


def field(payload: Any, path: Path, *keys: str | int) -> Any:
    """``payload[k1][k2]...``, or an error naming the file and the missing field (``a.b.c``)."""
    value = payload
    for i, key in enumerate(keys):
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            name = ".".join(str(k) for k in keys[: i + 1])
            raise ResultsFileError(f"{path}: missing field {name!r}") from None
    return value


def p_value(p: float | None) -> str:
    """A p-value as the project's tables print it: ``<1e-4`` below 1e-4, else four decimals."""
    if p is None or math.isnan(p):
        return "–"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"
