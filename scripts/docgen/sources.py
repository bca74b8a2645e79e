"""Reading results files and writing markdown tables, shared by the renderers (not a page: no ``render``)."""

from __future__ import annotations

import math
import string
from pathlib import Path
from typing import Any

from graphmem.core.errors import InputError
from graphmem.eval.provenance import check_merged
from graphmem.store import io


class ResultsFileError(InputError, ValueError):
    """A results file under docs/results/ that cannot be read or lacks a field a renderer needs."""


def load_results(results_dir: Path, name: str) -> dict[str, Any] | None:
    """The JSON object in ``results_dir / name``; ``None`` when the file does not exist."""
    path = Path(results_dir) / name
    return read_json(path) if path.is_file() else None


def results_at(results_dir: Path, name: str) -> tuple[Path, dict[str, Any] | None]:
    """The path of ``results_dir / name`` and its JSON object (:func:`load_results`; ``None`` when absent)."""
    return Path(results_dir) / name, load_results(results_dir, name)


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, or an error naming the file; refused too when a paired comparison in it
    disagrees with its own means (:func:`check_paired_means`) or its runs' provenance does not hold
    (:func:`graphmem.eval.provenance.check_merged`)."""
    path = Path(path)
    try:
        payload = io.read_json(path)
    except InputError as err:
        raise ResultsFileError(str(err)) from None
    if not isinstance(payload, dict):
        raise ResultsFileError(f"{path}: expected a JSON object, got {type(payload).__name__}")
    check_paired_means(path, payload)
    try:
        check_merged(path, payload)
    except InputError as err:
        raise ResultsFileError(str(err)) from None
    return payload


def check_paired_means(path: Path, value: Any, where: str = "") -> None:
    """Refuse a paired comparison anywhere in ``value`` (a mapping with ``mean``, ``reference_mean`` and
    ``mean_diff``) whose ``mean_diff`` is not ``mean - reference_mean`` to within 1e-6: every rendered paired
    difference is then the one its entry's own means give, and a hand-edited one is named with both numbers."""
    if isinstance(value, dict):
        a, b, diff = (value.get(k) for k in ("mean", "reference_mean", "mean_diff"))
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b, diff)):
            if abs(diff - (a - b)) > 1e-6:
                raise ResultsFileError(
                    f"{path}: field '{where.lstrip('.')}.mean_diff' is {diff!r}, but the entry's own means give "
                    f"{a - b:+.6f} ({a:.6f} - {b:.6f}): the difference was edited by hand; regenerate the file"
                )
        for key, item in value.items():
            check_paired_means(path, item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_paired_means(path, item, f"{where}[{i}]")


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


TEMPLATES = Path(__file__).resolve().parent / "templates"
_BLOCK = "<!-- block: "


class TemplateError(InputError, ValueError):
    """A page template under scripts/docgen/templates/ whose block is absent or whose fields and values differ."""


def blocks(template_name: str) -> dict[str, str]:
    """The named blocks of ``templates/<template_name>.md``: a line ``<!-- block: NAME -->`` opens block
    NAME, which holds every line up to the next such line, less the blank lines ending it."""
    path = TEMPLATES / f"{template_name}.md"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise TemplateError(f"{path}: not a readable template: {err}") from None
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith(_BLOCK) and line.endswith(" -->"):
            current = found.setdefault(line[len(_BLOCK) : -4], [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).rstrip("\n") for name, lines in found.items()}


def fill(template_name: str, block: str, **values: Any) -> str:
    """Block ``block`` of ``templates/<template_name>.md`` with its ``string.Template`` fields (``${name}``;
    ``$$`` is a literal ``$``) replaced by ``str(values[name])``. The fields named in the block and the
    keys of ``values`` must be the same set: a field without a value or a value without a field is one
    :class:`TemplateError` naming the template, the block and the names."""
    text = blocks(template_name).get(block)
    where = f"{TEMPLATES / template_name}.md, block {block!r}"
    if text is None:
        raise TemplateError(f"{where}: no such block")
    template = string.Template(text)
    if not template.is_valid():
        raise TemplateError(f"{where}: a '$' that starts no field (write '$$' for a literal '$')")
    names = set(template.get_identifiers())
    missing, unused = sorted(names - set(values)), sorted(set(values) - names)
    if missing or unused:
        raise TemplateError(f"{where}: fields without a value {missing}, values without a field {unused}")
    return template.substitute(values)


def measuring_processes(payload: dict) -> int:
    """How many processes measured each size of a ``memory_scale.json`` (``bench_memory.py --repeats``; 1 when its
    rows hold no ``runs``): its figures are then their medians."""
    return max((len(s.get("runs", ())) for s in payload["sizes"]), default=0) or 1


def after_add_cpu_s(row: dict, stat: str = "p50") -> float | None:
    """CPU seconds of a retrieval right after an add in a row of ``memory_scale.json``: the ``stat`` (``p50`` or
    ``mean``) of its samples, or the one sample of a file that took one."""
    after = row.get("retrieve_after_add_router") or {}
    if "cpu_s" in after:
        return after["cpu_s"]
    return after["cpu"][f"{stat}_ms"] / 1e3 if "cpu" in after else None
