"""A saved graph set as one unit: every file listed with its checksum in the manifest, which commits them.

On disk::

    <dir>/manifest.json          the commit record, written last: the set's own fields plus
                                 ``files`` = {relative path: {"sha256": ..., "bytes": ...}}
    <dir>/gen-<time>-<token>/    the files of one commit (graphs, queries, any index files)
    <dir>/.write.lock            held while a writer builds or commits (graphmem.store.lockfile)
    <dir>/replaced-<hash>[-N]/   a set the folder held before a forced build from another source
                                 (:func:`keep_aside`): a set of its own, never read from here

Writing is a two-phase commit (:class:`SetWriter`). Phase 1 puts every file of the new
generation in a fresh folder, fsyncs it and records its size and SHA-256 as written on disk.
Phase 2 replaces ``manifest.json`` with one ``os.replace`` (the commit point), then removes the
files of earlier generations. A crash in phase 1 leaves the previous manifest and every file it
lists untouched (the unreferenced folder is removed by the next commit); a crash after the commit
leaves the new set whole. Files the manifest does not list are never read and never removed.

The manifest carries ``content_sha256``, the SHA-256 of its own canonical content (every other
field, keys sorted, :func:`content_sha256`), so an edited question, evidence list or graph entry
is caught as surely as a changed file.

Reading (:func:`read_manifest`, :func:`verify_files`, :func:`verify_content`) refuses, naming the
file, a manifest that is not UTF-8 JSON or whose content differs from its checksum, and any
listed file that is missing, of another size or another checksum.

Other parts of a set (a vector index per graph, ...) go through :meth:`SetWriter.write` at save
time, or :func:`add_files` later: either way they are listed, checksummed and committed like the
graphs, and :attr:`graphmem.store.graphset.GraphSet.files` gives their verified paths after loading.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from graphmem.core.errors import InputError
from graphmem.store.io import write_json
from graphmem.store.lockfile import FileLock, describe
from graphmem.store.paths import fresh_folder

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
CONTENT = "content_sha256"
LOCK = ".write.lock"
GENERATION_PREFIX = "gen-"


class GraphSetError(ValueError, InputError):
    """A saved graph set that cannot be used as it is; the message names the folder and file."""


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _no_space(err: BaseException) -> bool:
    """A full disk or quota, as an ``OSError`` or as a writer's own error carrying the OS message."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT)
    return "No space left on device" in str(err) or "os error 28" in str(err)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(directory: str | Path) -> dict[str, Any] | None:
    """The manifest of the set in ``directory``, ``None`` when there is none; refuses an unreadable one."""
    path = Path(directory) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise GraphSetError(f"{path}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except json.JSONDecodeError as err:
        raise GraphSetError(
            f"{path}: not valid JSON, truncated or corrupted? ({err.msg} at line {err.lineno} column {err.colno}); "
            "rebuild the set with scripts/build_graph.py force=true"
        ) from None
    if not isinstance(manifest, dict):
        raise GraphSetError(f"{path}: must hold a JSON object, got {type(manifest).__name__}")
    return manifest


def content_sha256(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the manifest's canonical JSON (sorted keys, no spaces), its own ``content_sha256`` left out."""
    body = {k: v for k, v in manifest.items() if k != CONTENT}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verify_content(directory: str | Path, manifest: Mapping[str, Any]) -> None:
    """Refuse a manifest whose content differs from its ``content_sha256`` (edited or corrupted)."""
    if manifest.get(CONTENT) != content_sha256(manifest):
        raise GraphSetError(
            f"{Path(directory) / MANIFEST}: content differs from its checksum (field '{CONTENT}'): edited or "
            "corrupted after the set was saved; rebuild the set with scripts/build_graph.py force=true"
        )


def verify_files(directory: str | Path, manifest: Mapping[str, Any]) -> dict[str, Path]:
    """Check every file the manifest lists (existence, size, SHA-256); returns relative -> absolute path."""
    directory = Path(directory)
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise GraphSetError(f"{directory / MANIFEST}: field 'files' must list every file of the set with its checksum")
    out = {}
    for rel, entry in files.items():
        path = directory / rel
        if not isinstance(entry, dict) or not {"sha256", "bytes"} <= set(entry):
            raise GraphSetError(f"{directory / MANIFEST}: field 'files.{rel}' must hold sha256 and bytes")
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise GraphSetError(f"{directory / MANIFEST}: field 'files.{rel}' points outside the set")
        if not path.is_file():
            raise GraphSetError(f"{path}: listed in {MANIFEST} but missing (the set is incomplete)")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise GraphSetError(f"{path}: {size} bytes, {MANIFEST} lists {entry['bytes']} (truncated or replaced?)")
        if file_sha256(path) != entry["sha256"]:
            raise GraphSetError(
                f"{path}: checksum differs from {MANIFEST} (modified or replaced after the set was saved)"
            )
        out[rel] = path
    return out


def set_lock(directory: str | Path) -> FileLock:
    """The writers' lock of a set folder (take it with ``blocking=True`` around a build and its commit)."""
    return FileLock(Path(directory) / LOCK)


def _waiting(directory: Path):
    return lambda holder: log.info("waiting for %s, which is writing the graph set in %s", describe(holder), directory)


class SetWriter:
    """Writes one generation of a set and commits it (module docstring).

    Use as a context manager: leaving it by an exception removes the half-written generation,
    and the previous set stays as it was.

        with SetWriter(directory) as w:
            rel = w.write("graphs/a.safetensors", lambda path: save_graph(graph, path))
            w.commit({"graphs": {"a": rel}, ...})
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.generation = f"{GENERATION_PREFIX}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(4)}"
        self.files: dict[str, dict[str, Any]] = {}
        self._lock = set_lock(self.directory)
        self._committed = False

    def __enter__(self) -> SetWriter:
        self._lock.acquire(blocking=True, on_wait=_waiting(self.directory))
        (self.directory / self.generation).mkdir(parents=True)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        try:
            if not self._committed:
                shutil.rmtree(self.directory / self.generation, ignore_errors=True)
        finally:
            self._lock.release()

    def _record(self, rel: str) -> str:
        stored = f"{self.generation}/{rel}"
        path = self.directory / stored
        self.files[stored] = {"sha256": file_sha256(path), "bytes": path.stat().st_size}
        return stored

    def write(self, rel: str, write: Callable[[Path], None]) -> str:
        """Run ``write(path)`` for the file ``rel`` of this generation; returns its path relative to the set."""
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"SetWriter.write: {rel!r} must be a relative path inside the set")
        stored = f"{self.generation}/{rel}"
        if stored in self.files:
            raise ValueError(f"SetWriter.write: {rel!r} is written twice")
        path = self.directory / stored
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        except Exception as err:
            if not _no_space(err):
                raise
            raise GraphSetError(f"{path}: {self._full_disk()}") from None
        return self._record(rel)

    def _full_disk(self) -> str:
        before = "the previous set is intact" if (self.directory / MANIFEST).is_file() else "nothing was committed"
        return f"no space left on device while writing the set; {before} (free space and build again)"

    def keep(self, stored: str) -> str:
        """Carry the committed file ``stored`` (a path the current manifest lists) into this generation."""
        rel = stored.split("/", 1)[1] if stored.startswith(GENERATION_PREFIX) else stored
        _link_or_copy(self.directory / stored, self.directory / self.generation / rel)
        return self._record(rel)

    def commit(self, manifest: Mapping[str, Any]) -> Path:
        """Phase 2: write ``manifest`` (plus ``files``) as the set's manifest, then drop older generations."""
        try:
            previous = read_manifest(self.directory)
        except GraphSetError:  # a damaged manifest is replaced, and what it listed cannot be known
            previous = None
        for folder in {Path(rel).parent for rel in self.files} | {Path(self.generation)}:
            _fsync_dir(self.directory / folder)
        record = {k: v for k, v in manifest.items() if k != CONTENT}
        record["files"] = dict(sorted(self.files.items()))
        record = json.loads(json.dumps(record, ensure_ascii=False))  # as a reader will see it (str keys, lists)
        record[CONTENT] = content_sha256(record)
        try:
            write_json(self.directory / MANIFEST, record)
        except OSError as err:
            if not _no_space(err):
                raise
            raise GraphSetError(f"{self.directory / MANIFEST}: {self._full_disk()}") from None
        _fsync_dir(self.directory)
        self._committed = True
        self._drop_old(previous)
        return self.directory / MANIFEST

    def _drop_old(self, previous: Mapping[str, Any] | None) -> None:
        """Remove earlier generations and the files an earlier (flat-layout) manifest listed."""
        drop_unreferenced(self.directory, self.generation)
        if previous is None:
            return
        listed = list(previous.get("files") or {})
        if "files" not in previous:  # manifest_version 1: graphs/<name>.safetensors and queries.safetensors
            graphs = previous.get("graphs") or {}
            listed = [v for v in graphs.values() if isinstance(v, str)] + ["queries.safetensors"]
        for rel in listed:
            path = self.directory / rel
            if not rel.startswith(GENERATION_PREFIX) and path.is_file() and ".." not in Path(rel).parts:
                path.unlink()
                if path.parent != self.directory and not any(path.parent.iterdir()):
                    path.parent.rmdir()


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)  # same bytes, no copy
    except OSError:
        shutil.copy2(source, target)


def keep_aside(directory: str | Path, manifest: Mapping[str, Any], name: str) -> Path:
    """Keep the committed set of ``directory`` in a new folder ``<directory>/<name>`` (``-2``, ``-3``, ...
    appended when that exists, :func:`graphmem.store.paths.fresh_folder`); returns that folder.

    The manifest and every file it lists are hard-linked (copied where links fail) there, the
    manifest last, so the kept copy loads as a set of its own; ``directory`` itself is not changed,
    so the commit that replaces it stays the one atomic step and a build killed before it leaves
    the folder as it was. A folder ``<name>[-N]`` that already holds this very set (the same manifest
    ``content_sha256``: a forced build killed after keeping it) is returned instead, so repeated
    killed rebuilds keep one copy. Call with the set's write lock held.
    """
    directory = Path(directory)
    for earlier in sorted(directory.glob(f"{name}*")):  # a killed build kept this very set already: not again
        if earlier.name == name or earlier.name.removeprefix(name + "-").isdigit():
            try:
                kept = read_manifest(earlier)
            except GraphSetError:
                continue
            if kept is not None and kept.get(CONTENT) and kept.get(CONTENT) == manifest.get(CONTENT):
                return earlier
    aside = fresh_folder(directory / name)
    for rel in manifest.get("files") or {}:
        if not Path(rel).is_absolute() and ".." not in Path(rel).parts and (directory / rel).is_file():
            _link_or_copy(directory / rel, aside / rel)
    _link_or_copy(directory / MANIFEST, aside / MANIFEST)
    return aside


def drop_unreferenced(directory: str | Path, keep: str) -> None:
    """Remove every generation folder but ``keep`` (call with the set's write lock held)."""
    for child in Path(directory).iterdir():
        if child.is_dir() and child.name.startswith(GENERATION_PREFIX) and child.name != keep:
            shutil.rmtree(child, ignore_errors=True)


def generation_of(manifest: Mapping[str, Any]) -> str | None:
    """The generation folder a manifest's files lie in (``None`` for a flat, older layout)."""
    folders = sorted({rel.split("/", 1)[0] for rel in manifest.get("files") or {}})
    return folders[0] if len(folders) == 1 and folders[0].startswith(GENERATION_PREFIX) else None


def add_files(directory: str | Path, files: Mapping[str, Callable[[Path], None]], **fields: Any) -> dict[str, str]:
    """Add (or replace) files in a saved set as a new committed generation; returns name -> stored path.

    Every file the set already lists is carried over unchanged (hard-linked), each ``files[rel]``
    is written with its ``write(path)`` function, and the manifest is committed with the new
    files under ``extra_files`` (and ``fields`` merged into it). The set is verified first, so a
    damaged set is refused rather than extended.
    """
    directory = Path(directory)
    lock = set_lock(directory)
    lock.acquire(blocking=True, on_wait=_waiting(directory))
    try:
        manifest = read_manifest(directory)
        if manifest is None:
            raise GraphSetError(f"{directory}: no {MANIFEST}; save the set before adding files to it")
        verify_content(directory, manifest)
        verify_files(directory, manifest)
        old_extra = dict(manifest.get("extra_files") or {})
        replaced = {old_extra[rel] for rel in files if rel in old_extra}
        with SetWriter(directory) as w:
            moved = {stored: w.keep(stored) for stored in manifest["files"] if stored not in replaced}
            extra = {name: moved[stored] for name, stored in old_extra.items() if name not in files}
            extra.update({rel: w.write(rel, write) for rel, write in files.items()})
            graphs = {n: {**e, "file": moved[e["file"]]} for n, e in (manifest.get("graphs") or {}).items()}
            queries = moved[manifest["queries"]]
            w.commit({**manifest, **fields, "graphs": graphs, "queries": queries, "extra_files": extra})
        return extra
    finally:
        lock.release()
