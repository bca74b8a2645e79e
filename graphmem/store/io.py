"""Saving and loading memory graphs: one safetensors file, no pickle, atomic, versioned, checksummed.

Tensors go in the safetensors body; text fields and metadata go in its JSON header under the
key ``graphmem``, with ``schema_version`` and a SHA-256 over the JSON payload and every tensor
byte, so a truncated or hand-edited file is refused rather than half-loaded. A graph saved under a
name (a graph set saves each graph under its name in the set) carries it in the header, inside
the checksum, so :func:`load_graph` can refuse a file that holds another graph.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from graphmem.core.errors import InputError
from graphmem.core.graph import GraphError, MemoryGraph

SCHEMA_VERSION = 1
_TENSORS = ("embeddings", "timestamps", "edge_index", "edge_type", "S", "F", "edge_attr", "edge_attr_init")


def _digest(payload: str, tensors: dict[str, torch.Tensor], name: str | None = None) -> str:
    h = hashlib.sha256(payload.encode())
    if name is not None:
        h.update(b"\x00name\x00" + name.encode())
    for key in sorted(tensors):
        t = tensors[key].contiguous()
        h.update(key.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def atomic_write(path: str | Path, write) -> Path:
    """Run ``write(tmp_path)`` then rename onto ``path``: a crash leaves the old file intact."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json(path: str | Path, payload: Any, indent: int | None = 1) -> Path:
    """Write ``payload`` to ``path`` as UTF-8 JSON (``indent`` spaces, non-ASCII kept, values JSON lacks as
    ``str``) with a trailing newline, atomically (:func:`atomic_write`): the one JSON writer of the project."""
    text = json.dumps(payload, indent=indent, ensure_ascii=False, default=str) + "\n"
    return atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_json(path: str | Path) -> Any:
    """The JSON value in ``path``; an :class:`~graphmem.core.errors.InputError` naming the file when it cannot be
    read: the one JSON reader beside :func:`write_json`."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise InputError(f"{path}: not a readable JSON file: {err or type(err).__name__}") from None


def save_graph(graph: MemoryGraph, path: str | Path, name: str | None = None) -> Path:
    """Validate and write ``graph`` to ``path`` (``.safetensors``) atomically, under ``name`` when given."""
    graph.validate()
    tensors = {field: getattr(graph, field).contiguous() for field in _TENSORS}
    payload = json.dumps(
        {
            "node_ids": graph.node_ids,
            "texts": graph.texts,
            "keys": graph.keys,
            "metadata": graph.metadata,
            "relations": list(graph.relations),
            "info": graph.info,
        },
        ensure_ascii=False,
    )
    header = {"schema_version": str(SCHEMA_VERSION), "graphmem": payload, "sha256": _digest(payload, tensors, name)}
    if name is not None:
        header["name"] = name
    return atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=header))


def load_graph(path: str | Path, name: str | None = None) -> MemoryGraph:
    """Read, verify and validate a graph written by :func:`save_graph`; with ``name``, it must be that graph."""
    path = Path(path)
    if not path.exists():
        raise GraphError(f"{path}: graph file not found (build it with scripts/build_graph.py)")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            header: dict[str, Any] = f.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise GraphError(f"{path}: not a readable graph file (truncated or corrupted?): {err}") from None
    version = header.get("schema_version")
    if version != str(SCHEMA_VERSION):
        raise GraphError(f"{path}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
    missing = [n for n in _TENSORS if n not in tensors]
    if missing or "graphmem" not in header:
        raise GraphError(f"{path}: missing fields {missing or ['graphmem header']}")
    if _digest(header["graphmem"], tensors, header.get("name")) != header.get("sha256"):
        raise GraphError(f"{path}: checksum mismatch: the file was modified after it was written")
    if name is not None and header.get("name") != name:
        raise GraphError(f"{path}: holds graph {header.get('name')!r}, expected {name!r} (a file of another graph?)")
    try:
        meta = json.loads(header["graphmem"])
        graph = MemoryGraph(
            node_ids=meta["node_ids"],
            texts=meta["texts"],
            keys=meta["keys"],
            metadata=meta["metadata"],
            relations=tuple(meta["relations"]),
            info=meta["info"],
            **{n: tensors[n] for n in _TENSORS},
        )
    except (KeyError, TypeError, json.JSONDecodeError) as err:
        raise GraphError(f"{path}: malformed header field: {err}") from None
    try:
        return graph.validate()
    except GraphError as err:
        raise GraphError(f"{path}: {err}") from None


# ---------------------------------------------------------------------------- sealed numpy files
def array_digest(payload: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over a JSON payload and every array's name and bytes (in name order)."""
    h = hashlib.sha256(payload.encode())
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]))  # its bytes, read in place
    return h.hexdigest()


def write_sealed(path: str | Path, arrays: dict[str, np.ndarray], key: str, meta: dict[str, Any]) -> Path:
    """Write ``arrays`` to one safetensors file, atomically, with ``meta`` as JSON under header ``key``
    and a SHA-256 over both (the form of the index files a graph set keeps beside its graphs)."""
    from safetensors.numpy import save_file as save_numpy

    payload = json.dumps(meta, sort_keys=True)
    header = {key: payload, "sha256": array_digest(payload, arrays)}
    return atomic_write(path, lambda tmp: save_numpy(arrays, str(tmp), metadata=header))


def read_sealed(
    path: str | Path, key: str, names: set[str], what: str, error: type[Exception], optional: frozenset = frozenset()
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and meta of a :func:`write_sealed` file; raises ``error`` naming the file when it is
    unreadable, not a ``what`` file (another header key, or arrays other than ``names`` and any of ``optional``)
    or fails its checksum."""
    from safetensors import safe_open
    from safetensors.numpy import load_file as load_numpy

    path = Path(path)
    try:
        arrays = load_numpy(str(path))
        with safe_open(str(path), framework="numpy") as f:
            header = f.metadata() or {}
    except (SafetensorError, OSError) as err:
        raise error(f"{path}: not a readable {what} file ({err})") from None
    payload = header.get(key)
    if payload is None or not names <= set(arrays) <= names | optional:
        raise error(f"{path}: not a graphmem {what} file")
    if header.get("sha256") != array_digest(payload, arrays):
        raise error(f"{path}: checksum mismatch (the file is damaged or was edited)")
    return arrays, json.loads(payload)
