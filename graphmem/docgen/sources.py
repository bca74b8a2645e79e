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


def check_spread(path: Path, name: str, values: list[float | None], stats: Any) -> None:
    """Refuse a stored ``{mean, std}`` (field ``name`` of ``path``) that its per-fold ``values`` do not
    give: the mean of the values and their standard deviation with ddof = 1 (``None`` below two
    values), to within 1e-6. A page shows both side by side, so a hand-edited fold or mean would show
    numbers that disagree; :class:`ResultsFileError` names the file, the field and both numbers."""
    if not isinstance(stats, dict):
        return
    real = [float(v) for v in values if v is not None]
    mean = sum(real) / len(real) if real else None
    std = math.sqrt(sum((v - mean) ** 2 for v in real) / (len(real) - 1)) if len(real) >= 2 else None
    for key, want in (("mean", mean), ("std", std)):
        got = stats.get(key)
        if key == "std" and got is None and len(real) < 2:
            continue
        if (got is None) != (want is None) or (want is not None and abs(float(got) - want) > 1e-6):
            shown = "none" if want is None else f"{want:.6f}"
            raise ResultsFileError(
                f"{path}: field '{name}.{key}' is {got!r}, but its {len(real)} per-fold values give {shown} "
                f"({key}{', ddof = 1' if key == 'std' else ''}): a fold or the {key} was edited by hand; "
                "regenerate the file from its runs"
            )


def p_value(p: float | None) -> str:
    """A p-value as the project's tables print it: ``<1e-4`` below 1e-4, else four decimals."""
    if p is None or math.isnan(p):
        return "–"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"
