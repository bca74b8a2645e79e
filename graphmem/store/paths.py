"""Names that become file names, and files that must stay inside their run's folder.

A variant, policy, graph or question name from a config or a data file ends up in a path
(``<out>/fold0/<variant>/best.pt``, ``<out>/questions_<policy>.jsonl``). :func:`check_name`
refuses, before any work, a name that could leave its folder or is no portable file name;
:func:`run_path` joins checked names under a run's ``out_dir`` and refuses a result outside it
(a symlink pointing elsewhere included); :func:`fresh_folder` gives a folder to move files aside
into that never is an existing one. Names that are data rather than config (graph names,
question ids) are encoded instead (:func:`graphmem.store.setformat.safe_name`,
:func:`graphmem.tracking.artifacts.artifact_name`).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from graphmem.core.errors import InputError

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=-]{0,119}")


class PathNameError(ValueError, InputError):
    """A name that would put a file outside its folder, or a path outside the run's ``out_dir``."""


def check_name(key: str, value: object) -> str:
    """``value`` when it is a safe file-name part, else :class:`PathNameError` naming ``key`` and the value.

    Safe: 1 to 120 of letters, digits and ``_ . + = -``, not starting with ``.``, ``+``, ``=`` or
    ``-``, and no ``..`` (so no separator, no parent folder, no hidden file).
    """
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        raise PathNameError(
            f"{key}={value!r} cannot be used: it becomes a file name, so it must be 1-120 letters, digits "
            "or _ . + = - (not starting with . + = -, no '..', no '/')"
        )
    return value


def inside(root: str | Path, path: str | Path, key: str = "out_dir") -> Path:
    """``path`` when it resolves (symlinks followed) to ``root`` or below it, else :class:`PathNameError`."""
    base, target = Path(root).resolve(), Path(path).resolve()
    if target != base and base not in target.parents:
        raise PathNameError(f"{path}: resolves to {target}, outside {key} {base}; refusing to write there")
    return Path(path)


def run_path(root: str | Path, *parts: str, key: str = "out_dir") -> Path:
    """``root / parts...`` for parts that are names (:func:`check_name`), checked to lie inside ``root``.

    A part may carry a fixed prefix or suffix around a name (``questions_<name>.jsonl``): pass the
    name through :func:`check_name` where it comes from the config, and the whole part here.
    """
    for part in parts:
        if not part or Path(part).name != part or part in (".", ".."):
            raise PathNameError(f"{part!r} is not one file or folder name under {key} {root}")
    return inside(root, Path(root).joinpath(*parts), key)


def fresh_folder(path: str | Path) -> Path:
    """A new, empty folder at ``path``, or at ``<path>-2``, ``<path>-3``, ... when that name is taken.

    Each is made with ``mkdir`` without ``exist_ok``, so an existing folder is never returned and
    what is moved into the result never lands on an earlier move's files.
    """
    path = Path(path)
    for n in itertools.count(1):
        target = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            target.mkdir(parents=True)
            return target
        except FileExistsError:
            continue
    raise AssertionError("unreachable")  # pragma: no cover
