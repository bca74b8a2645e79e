"""Where the benchmark files live.

The data root is, in order of precedence: the config key ``data.root``, the environment
variable ``GRAPHMEM_DATA_ROOT``, or ``<repo root>/../shared/data`` when that folder exists
(the repo root is the folder holding the ``graphmem`` package).
"""

from __future__ import annotations

import os
from pathlib import Path

from graphmem.core.errors import InputError

ENV_VAR = "GRAPHMEM_DATA_ROOT"


class DataNotFoundError(FileNotFoundError, InputError):
    """A benchmark file or the data root is missing; the message says where it was expected."""


class DataEncodingError(ValueError, InputError):
    """A data file that is not UTF-8 text; the message names the file, the byte and the line."""


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of a data file; :class:`DataEncodingError` naming the file and position otherwise."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise DataEncodingError(
            f"{path}: not UTF-8 text at byte {err.start} (line {line}): {err.reason}; re-save the file as UTF-8"
        ) from None


def repo_root() -> Path:
    """The folder that holds the ``graphmem`` package."""
    return Path(__file__).resolve().parents[2]


def data_root(configured: str | os.PathLike | None = None) -> Path:
    """Resolve the data root (see module docstring); raises :class:`DataNotFoundError` if none exists."""
    if configured:
        root, origin = Path(configured).expanduser(), "config key data.root"
    elif os.environ.get(ENV_VAR):
        root, origin = Path(os.environ[ENV_VAR]).expanduser(), f"environment variable {ENV_VAR}"
    else:
        root, origin = repo_root().parent / "shared" / "data", "the default <repo>/../shared/data"
    if not root.is_dir():
        raise DataNotFoundError(
            f"data root {root} (from {origin}) is not a folder; set data.root=<dir> on the command line "
            f"or export {ENV_VAR}=<dir>"
        )
    return root.resolve()


def data_file(relative: str | os.PathLike, root: str | os.PathLike | None = None) -> Path:
    """``<data root>/<relative>``; an absolute ``relative`` is used as is. Raises if the file is missing."""
    rel = Path(relative).expanduser()
    path = rel if rel.is_absolute() else data_root(root) / rel
    if not path.is_file():
        raise DataNotFoundError(
            f"expected the data file {rel} at {path}; put it there, or point the data root elsewhere with "
            f"data.root=<dir> or {ENV_VAR}=<dir> (the file path is relative to that root)"
        )
    return path


DATA_SUFFIXES = (".json", ".jsonl")
"""The files a data folder holds for a loader (``data.file`` naming a folder); others (a README) are skipped."""


def data_files(spec: str | os.PathLike | list | tuple, root: str | os.PathLike | None = None) -> list[Path]:
    """The data files ``spec`` names, resolved as :func:`data_file` does: one file; a folder, for its
    :data:`DATA_SUFFIXES` files sorted by name; or a list of files and folders, in the given order. A missing
    file, a folder without data files, an empty list or a file named twice raises (naming it)."""
    specs = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if not specs:
        raise DataNotFoundError("data.file is an empty list: name a file, a folder or a list of them")
    out: list[Path] = []
    for item in specs:
        rel = Path(item).expanduser()
        path = rel if rel.is_absolute() else data_root(root) / rel
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES)
            if not found:
                raise DataNotFoundError(f"data folder {path} (from {item}) holds no {'/'.join(DATA_SUFFIXES)} file")
            out += found
        else:
            out.append(data_file(item, root))
    seen: set[Path] = set()
    for path in out:
        if path.resolve() in seen:
            raise DataNotFoundError(f"data file {path} is named twice in data.file={spec!r}")
        seen.add(path.resolve())
    return out
