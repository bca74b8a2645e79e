"""A run owns its output folder: one live run at a time, and one run id on everything it writes.

    <out>/.run.lock    held by the live run (graphmem.store.lockfile: a dead run's lock is stale and taken over)
    <out>/run.json     run id, start time, the config its results depend on, the graph set's config hash

:func:`open_run_folder` refuses (:class:`RunFolderError`, one line):

* a folder held by another live run, naming it (run id, pid, host, since);
* ``resume`` when the stored config differs from this one in any key but the run-length and
  bookkeeping keys (:data:`IGNORED`: epochs, resume, checkpoint period, logger, paths, ...),
  naming each differing key with both values; also ``resume`` over results or checkpoints that
  no ``run.json`` describes.

* a folder recorded (``run.json`` field ``kind``) by another kind of run (a training run's
  folder for an evaluation, an evaluation's for a training run, ...), naming the folder, that
  run's id and its script: one folder never holds the checkpoints, results and plots of two runs
  of different scripts. A folder of a run recorded without a kind counts as a training run's
  when it holds ``fold*/*/best.pt`` or ``last.pt``;
* a folder inside another run's folder (a folder above it holds a ``run.json``), or one holding a
  ``best.pt`` or ``last.pt`` itself (a training run's ``fold0/router/``).

A fresh run (no ``resume``) into a folder holding an earlier run of its kind gets a new id and moves
that run's files (the ``artifacts`` patterns) into ``<out>/replaced-<old id>/`` (``-2``, ``-3``, ...
appended when that folder exists: a move never lands on an earlier one), so nothing of the old
run is mixed with or reported as the new one. A resumed run keeps its id. The trainer writes the
id into ``last.pt`` and ``best.pt`` (and refuses checkpoints of another run), the script into its
results.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.core.closing import Closing
from graphmem.core.errors import InputError
from graphmem.store.io import write_json
from graphmem.store.lockfile import FileLock, LockBusyError, describe
from graphmem.store.paths import fresh_folder, inside

log = logging.getLogger(__name__)

LOCK, RECORD = ".run.lock", "run.json"
IGNORED = (
    "*.epochs",
    "*_epochs",
    "*.resume",
    "*.checkpoint_every",
    "*.checkpoint_dir",
    "*.run_id",
    "logger",
    "logger.*",
    "progress",
    "out_dir",
    "graphset",
    "graphset_dir",
    "checkpoint",
    "threads",
    "data.root",
    "graph.cache_dir",
    "hydra",
    "hydra.*",
)
"""Keys (``fnmatch`` patterns over dotted paths) a resumed run may change: run length and bookkeeping.
The graph set is compared by its config hash (:meth:`RunFolder.check_graphset`), not its path."""
KINDS = {
    "train": "a training run (scripts/train.py)",
    "train_gnn": "a training run (scripts/train_gnn.py)",
    "evaluate": "an evaluation (scripts/evaluate.py)",
    "memory_loop": "a memory loop run (scripts/studies/memory_loop/run.py)",
}
"""What each script's runs are called in a refusal (``run.json`` field ``kind``); another kind is "a <kind> run"."""
CHECKPOINTS = ("fold*/*/best.pt", "fold*/*/last.pt")
"""A training run's checkpoints: a folder holding them without a recorded kind is a training run's."""


class RunFolderError(RuntimeError, InputError):
    """The run may not use this folder (held by a live run, or resumed with another config)."""


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b": leaf}`` for every leaf of nested mappings (lists are leaves)."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    out: dict[str, Any] = {}
    for k, v in value.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def differing_keys(stored: Mapping[str, Any], given: Mapping[str, Any], ignore: Sequence[str] = IGNORED) -> list[str]:
    """``"key: stored X, given Y"`` for every leaf that differs, keys matching ``ignore`` left out."""
    a, b = flatten(stored), flatten(given)
    keys = sorted(k for k in set(a) | set(b) if not any(fnmatch.fnmatchcase(k, p) for p in ignore))
    missing = object()
    return [
        f"{k}: stored {a.get(k, '(absent)')!r}, given {b.get(k, '(absent)')!r}"
        for k in keys
        if a.get(k, missing) != b.get(k, missing)
    ]


def new_run_id() -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


@dataclass
class RunFolder(Closing):
    """An open run folder: its path, the run id, whether it resumed, and the held lock."""

    path: Path
    run_id: str
    resumed: bool
    record: dict[str, Any] = field(default_factory=dict)
    lock: FileLock | None = None

    def _write(self) -> None:
        write_json(self.path / RECORD, self.record)

    def check_graphset(self, config_hash: str) -> None:
        """A resumed run must train on the graph set it started on; a fresh run records it (rank 0 only)."""
        if self.lock is None:
            return
        stored = self.record.get("graphset_config_hash")
        if self.resumed and stored and stored != config_hash:
            raise RunFolderError(
                f"{self.path}: resume refused: run {self.run_id} trained on the graph set with config hash "
                f"{stored[:12]}..., this one has {config_hash[:12]}..."
            )
        self.record["graphset_config_hash"] = config_hash
        self._write()

    def close(self) -> None:
        """Release the folder (the record stays)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def open_run_folder(
    path: str | Path,
    config: Mapping[str, Any],
    resume: bool,
    artifacts: Sequence[str] = ("results.json", "results.md"),
    ignore: Sequence[str] = IGNORED,
    resume_hint: str | None = "trainer.resume=true continues a run instead",
    kind: str = "run",
) -> RunFolder:
    """Take ``path`` for a run of ``config`` (module docstring); close the returned folder when done.

    Args:
        config: the run's resolved config (plain mappings).
        resume: continue the run recorded in the folder.
        artifacts: glob patterns (relative to ``path``) of the files a run writes: an earlier run's
            are moved aside on a fresh start, and their presence without a record refuses a resume.
        ignore: keys a resumed run may change (default: :data:`IGNORED`).
        resume_hint: how to resume instead, said when an earlier run's files are moved aside
            (``None`` for a run that cannot resume).
        kind: what writes the folder (a :data:`KINDS` key, recorded in ``run.json``): a folder
            recorded by another kind is refused (default: ``"run"``).
    """
    path = Path(path)
    _check_inside_run(path)  # before the lock file is made there
    run_id = new_run_id()
    lock = FileLock(path / LOCK, {"run_id": run_id})
    try:
        lock.acquire()
    except LockBusyError as err:
        raise RunFolderError(
            f"out_dir {path} is in use by {describe(err.holder)}; wait for it to finish or choose another out_dir"
        ) from None
    try:
        if lock.stale:
            log.warning("%s: took over the stale lock of %s, which is no longer running", path, describe(lock.stale))
        previous = _read_record(path)
        found = sorted({str(inside(path, p).relative_to(path)) for pattern in artifacts for p in path.glob(pattern)})
        _check_kind(path, previous, kind)
        if resume and previous is not None:
            differ = differing_keys(previous.get("config") or {}, config, ignore)
            if differ:
                raise RunFolderError(
                    f"{path}: resume refused: the config differs from run {previous.get('run_id')}'s in "
                    + "; ".join(differ)
                )
            run_id = previous["run_id"]
            lock.note(run_id=run_id)
            record = {**previous, "kind": kind, "resumed_at": [*previous.get("resumed_at", []), time.time()]}
            folder = RunFolder(path, run_id, True, record, lock)
        elif resume and found:
            raise RunFolderError(
                f"{path}: resume refused: {', '.join(found[:3])} belong to no recorded run (no {RECORD}); "
                "start a fresh run there or choose another out_dir"
            )
        else:
            found += [RECORD] if previous is not None else []
            if found:
                aside = _move_aside(path, found, (previous or {}).get("run_id", "unrecorded"))
                hint = f" ({resume_hint})" if resume_hint else ""
                log.warning("%s: an earlier run's files moved to %s%s", path, aside, hint)
            record = {"run_id": run_id, "kind": kind, "started": time.time(), "config": dict(config)}
            folder = RunFolder(path, run_id, False, record, lock)
        folder._write()
        return folder
    except BaseException:
        lock.release()
        raise


def _move_aside(path: Path, found: Sequence[str], old_id: str) -> Path:
    """Move ``found`` (paths relative to ``path``) into a new ``replaced-<old id>[-N]/``; returns it."""
    aside = fresh_folder(path / f"replaced-{old_id}")
    for rel in found:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path / rel), str(aside / rel))
    return aside


def _check_inside_run(path: Path) -> None:
    """Refuse a folder that lies inside another run's folder (a folder above it holds that run's ``run.json``), or
    that holds a checkpoint itself (a training run's ``fold<k>/<variant>/``): its files would mix with that run's."""
    own = [p.name for p in (path / "best.pt", path / "last.pt") if p.is_file()]
    if own:
        raise RunFolderError(
            f"out_dir {path} holds {', '.join(own)}, the checkpoint folder of a training run; a run never writes "
            "beside a checkpoint (their files would be mixed): choose another out_dir"
        )
    for folder in path.resolve().parents:
        if (folder / RECORD).is_file():
            held = _read_record(folder) or {}
            that = KINDS.get(str(held.get("kind")), f"a {held.get('kind') or 'recorded'} run")
            raise RunFolderError(
                f"out_dir {path} lies inside {folder}, the folder of run {held.get('run_id')}, {that}; a run never "
                "writes into another run's folder (their files would be mixed): choose another out_dir"
            )


def _check_kind(path: Path, previous: Mapping[str, Any] | None, kind: str) -> None:
    """Refuse a folder recorded by another kind of run (module docstring)."""
    held = (previous or {}).get("kind")
    if held is None and any(p.is_file() for pattern in CHECKPOINTS for p in path.glob(pattern)):
        held = "train"  # a training run recorded before run.json carried the kind, or not recorded
    if held is None or held == kind:
        return
    run = f"run {previous['run_id']}" if previous else f"an unrecorded run ({', '.join(CHECKPOINTS)})"
    this, that = (KINDS.get(k, f"a {k} run") for k in (kind, held))
    raise RunFolderError(
        f"out_dir {path} holds {run}, {that}; {this} never writes into another kind of run's folder "
        "(their files would be mixed): choose another out_dir"
    )


def _read_record(path: Path) -> dict[str, Any] | None:
    file = path / RECORD
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RunFolderError(f"{file}: not readable JSON ({err}); move it away to start a fresh run") from None
    if not isinstance(record, dict) or not record.get("run_id"):
        raise RunFolderError(f"{file}: no field 'run_id'; move it away to start a fresh run")
    return record


def open_run_folder_on_main(world, path: str | Path, config: Mapping[str, Any], resume: bool, device=None, **kw):
    """:func:`open_run_folder` on rank 0 of ``world``; every rank gets its run id or its refusal."""
    folder, refusal = None, None
    if world.is_main:
        try:
            folder = open_run_folder(path, config, resume, **kw)
        except RunFolderError as err:
            refusal = str(err)
    refusal, run_id, resumed = world.broadcast_object(
        (refusal, folder and folder.run_id, folder is not None and folder.resumed), device
    )
    if refusal:
        raise RunFolderError(refusal)
    return folder or RunFolder(Path(path), run_id, resumed)
