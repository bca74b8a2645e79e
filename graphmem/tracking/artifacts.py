"""Artifacts: what a run read and wrote, named and content-addressed so lineage can be followed.

An :class:`ArtifactRef` names a file or directory, its kind (W&B artifact ``type``) and a
content digest::

    digest = sha256( for each file, in sorted relative-path order: path NUL sha256(file bytes) NUL )

so a run's input matches the output it came from by name *and* digest. The kinds and names:

* ``dataset`` — a saved graph set (:func:`graphset_artifact`): ``<dataset>-<config hash[:12]>``,
  over its manifest, query embeddings and graph files (not plots written beside them);
* ``model`` — a checkpoint (:func:`checkpoint_artifact`): the name its producer gave it, read
  back from the sidecar ``<file>.artifact.json`` written when it was logged, else
  ``<kind>-<parent folder>-<file stem>``;
* ``results`` and others — named per run by the tracker (``run-<run id>-<label>``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.store.graphset import file_sha256
from graphmem.store.io import write_json

SIDECAR_SUFFIX = ".artifact.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def artifact_name(text: str) -> str:
    """``text`` as a valid W&B artifact name: letters, digits, ``_ . -``; at most 128 characters."""
    return _UNSAFE.sub("_", str(text)).strip("._")[:128] or "artifact"


@dataclass(frozen=True)
class ArtifactRef:
    """A named, typed, content-addressed file or directory.

    Args:
        name: artifact name (stable across versions; :func:`artifact_name` characters).
        type: kind, e.g. ``dataset``, ``model``, ``results``.
        path: absolute path of the file or directory.
        digest: sha256 over the contents (module docstring).
        files: the files covered, relative to ``path`` (a file: its own name).
        aliases: version aliases (``best``, ``latest``) when logged.
        metadata: JSON-serialisable facts about the contents (dataset, config hash, epoch, ...).
    """

    name: str
    type: str
    path: str
    digest: str
    files: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        """(name, digest): the identity an input and its producing output share."""
        return self.name, self.digest

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["files"], out["aliases"] = list(self.files), list(self.aliases)
        return out

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> ArtifactRef:
        v = dict(values)
        return cls(
            name=v["name"],
            type=v["type"],
            path=v["path"],
            digest=v["digest"],
            files=tuple(v.get("files", ())),
            aliases=tuple(v.get("aliases", ())),
            metadata=dict(v.get("metadata") or {}),
        )


def content_digest(root: Path, files: Sequence[str]) -> str:
    """sha256 over ``files`` (relative to ``root``; for a single file, ``root`` is the file itself)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        target = root if root.is_file() else root / rel
        h.update(rel.encode() + b"\0" + file_sha256(target).encode() + b"\0")
    return h.hexdigest()


def _files_of(path: Path) -> list[str]:
    if path.is_file():
        return [path.name]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or directory to record as an artifact")
    return sorted(
        str(p.relative_to(path))
        for p in path.rglob("*")
        if p.is_file() and not p.name.endswith(SIDECAR_SUFFIX) and not p.name.startswith(".")
    )


def describe_artifact(
    path: str | Path,
    type: str,
    name: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    files: Sequence[str] | None = None,
    aliases: Sequence[str] = (),
) -> ArtifactRef:
    """An :class:`ArtifactRef` for ``path`` (hashes its contents).

    Args:
        path: file or directory.
        type: artifact kind.
        name: artifact name (default: the sidecar's name for a file that has one, else
            ``<type>-<parent folder>-<stem>``).
        metadata: facts stored with the artifact (default: none).
        files: for a directory, the files that make up the artifact (default: every file but
            hidden files and sidecars).
        aliases: version aliases (default: none).
    """
    path = Path(path).resolve()
    rel = list(files) if files is not None and path.is_dir() else _files_of(path)
    missing = [f for f in rel if path.is_dir() and not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: artifact files missing: {missing[:3]}")
    if name is None:
        sidecar = read_sidecar(path) if path.is_file() else None
        name = sidecar["name"] if sidecar else f"{type}-{path.parent.name}-{path.stem}"
    return ArtifactRef(
        name=artifact_name(name),
        type=type,
        path=str(path),
        digest=content_digest(path, rel),
        files=tuple(rel),
        aliases=tuple(aliases),
        metadata=dict(metadata or {}),
    )


def graphset_artifact(directory: str | Path) -> ArtifactRef:
    """The ``dataset`` artifact of a saved graph set: named ``<dataset>-<config hash[:12]>``.

    Covers ``manifest.json`` and every file it lists (graphs, query embeddings, added files); the
    metadata holds the dataset, the full config hash and the graph and question counts.
    """
    directory = Path(directory).resolve()
    path = directory / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        dataset, chash, graphs, listed = (manifest[k] for k in ("dataset", "config_hash", "graphs", "files"))
        files = ["manifest.json", *sorted(listed)]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a graph-set manifest ({err})") from None
    metadata = {
        "dataset": dataset,
        "config_hash": chash,
        "graphs": len(graphs),
        "questions": len(manifest.get("questions", [])),
    }
    return describe_artifact(directory, "dataset", f"{dataset}-{chash[:12]}", metadata, files)


def checkpoint_artifact(path: str | Path, metadata: Mapping[str, Any] | None = None) -> ArtifactRef:
    """The ``model`` artifact of a checkpoint file, under the name its producer logged it with."""
    return describe_artifact(path, "model", metadata=metadata)


def sidecar_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + SIDECAR_SUFFIX)


def write_sidecar(ref: ArtifactRef, run: Mapping[str, Any]) -> Path:
    """Record beside a logged file which artifact (name, digest) and which run it belongs to."""
    payload = {"name": ref.name, "type": ref.type, "digest": ref.digest, "aliases": list(ref.aliases), "run": dict(run)}
    return write_json(sidecar_path(ref.path), payload)


def read_sidecar(path: str | Path) -> dict[str, Any] | None:
    """The sidecar of ``path``, or ``None`` when there is none; a corrupt sidecar is an error naming it."""
    p = sidecar_path(path)
    if not p.is_file():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data.get("name"), str):
            raise ValueError("no 'name'")
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{p}: unreadable artifact sidecar ({err})") from None
    return data
