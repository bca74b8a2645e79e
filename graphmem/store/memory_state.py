"""The live memory's derived state saved beside its database, so that reopening a memory reads a few arrays instead
of every row of the database.

``<memory>/indexes/state.npz`` (NumPy's uncompressed archive, as :func:`numpy.savez` writes it: one ``.npy``
member per array, each with its CRC-32; no pickle) holds what a reopen would otherwise read record by record and
edge by edge: the records' seqs, embeddings and times, every edge's rows, relation, counters and features, one
JSON document of the records' ids, texts, keys, metadata and entities, each record's token count (what every
retrieval's budget reads: counting them is a pass of Python over every text), and the store's version when it was saved
(:meth:`~graphmem.store.memory_store.MemoryStore.version`: the count of rows written to the derived tables, which
triggers in the database keep whoever writes, with the count of records, the next seq and the last edge's rowid).

A writer saves it at close when the store has changed since the state it opened. An open (a reader's too) whose
store is at the saved version loads it; at any other version (a write since, a writer killed before it closed,
an edit by another client), or from a damaged file or one of another format, the state is read from the
database. The file holds texts and vectors, so a forget or a revise removes it with the saved indexes
(:func:`graphmem.store.memory_indexes.forget_indexes`).

``<memory>/indexes/pairs.npz`` (the same archive form) holds, when the walk served the memory as a writer closed
it, the walk's pair table and the per-node codes its features were made from
(:class:`models.edge_encoder.SavedPairTable`), at the store's version without its count of feedback's writes
(:func:`pairs_version`: the table reads no Beta counter): an open at that version takes the codes at once and reads
the table when the walk first needs it (:func:`read_pairs`), instead of making both from every edge and record. The
walk's static tensors of that table (:data:`graphmem.policies.router.STATIC_NAMES`) are saved with it when the walk
that made them is still held, with the digest of its scorer (member ``static``), and read by a walk of that digest.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
import zlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from graphmem.store.io import atomic_write
from graphmem.store.memory_indexes import INDEX_DIR

STATE_FILE = "state.npz"
PAIRS_FILE = "pairs.npz"
FORMAT_VERSION = 2  # 2: with the records' token counts
log = logging.getLogger(__name__)


@dataclass
class MemoryState:
    """The derived state of a memory of ``N`` records and ``E`` edges, rows in seq order."""

    seq: np.ndarray  # [N] int64
    emb: np.ndarray  # [N, D] float32
    time: np.ndarray  # [N] float64 (NaN: none)
    edge_index: np.ndarray  # [2, E] int64 rows
    edge_type: np.ndarray  # [E] int64
    S: np.ndarray  # [E] float32
    F: np.ndarray  # [E] float32
    attr: np.ndarray  # [E, 4] float32
    attr_init: np.ndarray  # [E, 4] float32
    tokens: np.ndarray  # [N] int64 (graphmem.core.tokens.node_tokens)
    ids: list[str]
    texts: list[str]
    keys: list[str]
    metadata: list[dict[str, Any]]
    entities: list[list[str]]


_ARRAYS = {
    "seq": (np.int64, 1),
    "emb": (np.float32, 2),
    "time": (np.float64, 1),
    "edge_index": (np.int64, 2),
    "edge_type": (np.int64, 1),
    "S": (np.float32, 1),
    "F": (np.float32, 1),
    "attr": (np.float32, 2),
    "attr_init": (np.float32, 2),
    "tokens": (np.int64, 1),
}
_LISTS = ("ids", "texts", "keys", "metadata", "entities")


def state_path(folder: str | Path) -> Path:
    """Where the memory in ``folder`` keeps its saved state."""
    return Path(folder) / INDEX_DIR / STATE_FILE


def save_state(folder: str | Path, state: MemoryState, version: dict[str, int]) -> Path:
    """Write ``state`` made at the store's ``version``, atomically, each array into the archive from its own memory
    (a view that is not contiguous, the edges' rows of the buffers, is copied first). Metadata are written with
    sorted keys, as the store writes them."""
    arrays = {name: getattr(state, name) for name in _ARRAYS}
    arrays["records"] = _json_member({name: getattr(state, name) for name in _LISTS})
    arrays["version"] = _json_member(_header(version))
    return atomic_write(state_path(folder), lambda tmp: _write_archive(tmp, arrays))


_UNREADABLE = (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, zlib.error)
"""what reading a damaged or foreign archive raises"""


def _header(version: dict[str, int]) -> dict[str, int]:
    """The ``version`` member of a file saved at the store's ``version``."""
    return {"format_version": FORMAT_VERSION, **version}


def _json_member(document: Any) -> np.ndarray:
    """A JSON document (sorted keys, UTF-8) as a member's bytes."""
    return np.frombuffer(json.dumps(document, sort_keys=True, ensure_ascii=False).encode(), dtype=np.uint8)


def _write_archive(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            _write_member(archive, name, np.ascontiguousarray(array))


def pairs_path(folder: str | Path) -> Path:
    """Where the memory in ``folder`` keeps the walk's saved pair table."""
    return Path(folder) / INDEX_DIR / PAIRS_FILE


def pairs_version(version: dict[str, int] | None) -> dict[str, int] | None:
    """The store's ``version`` as the saved pair table is keyed by it: without the count of every change where it
    holds the count that leaves out the writes of Beta counters alone (feedback changes no pair's features)."""
    if version is None or "shape" not in version:
        return version
    return {k: v for k, v in version.items() if k != "changes"}


def save_pairs(
    folder: str | Path, arrays: dict[str, np.ndarray], codes: dict, version: dict[str, int], static: dict | None = None
) -> Path:
    """Write the walk's pair table and per-node codes (``arrays`` by name, ``codes`` a JSON document) made at the
    store's ``version``, atomically; ``static``: a JSON document of the walk's static tensors among ``arrays``."""
    members = {**arrays, "codes": _json_member(codes), "version": _json_member(_header(version))}
    if static is not None:
        members["static"] = _json_member(static)
    return atomic_write(pairs_path(folder), lambda tmp: _write_archive(tmp, members))


def read_pairs(
    folder: str | Path,
    version: dict[str, int] | None,
    names: tuple[str, ...],
    optional: tuple[str, ...] = (),
    room: float = 0.0,
) -> tuple[dict, dict, dict | None] | None:
    """``(codes, arrays, static)``: the JSON documents of the codes and of the static tensors (``None`` when none
    were saved) and the members ``names`` (writable arrays; those of ``optional`` only when saved; with ``room``, each
    the first rows of an array with ``room`` times as many rows again after them, see :func:`_member`) of the pair
    table saved in ``folder`` at ``version``; ``None`` when there is none at that version, or the file is damaged or
    lacks a member (logged, the caller makes them)."""
    path = pairs_path(folder)
    if version is None or not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            saved = json.loads(_member(archive, "version").tobytes())
            if saved != _header(version):
                log.info("%s: saved at %s, the store is at %s: the walk's tables are made", path, saved, version)
                return None
            codes = json.loads(_member(archive, "codes").tobytes())
            held = set(archive.namelist())
            static = json.loads(_member(archive, "static").tobytes()) if "static.npy" in held else None
            wanted = [name for name in names if name not in optional or f"{name}.npy" in held]
            arrays = {name: _member(archive, name, room) for name in wanted}
    except _UNREADABLE as err:
        log.warning("%s: not a usable pair table (%s): the walk's tables are made", path, err)
        return None
    return codes, arrays, static


def load_state(folder: str | Path, version: dict[str, int] | None, dim: int) -> MemoryState | None:
    """The state saved in ``folder`` at ``version`` (embeddings of width ``dim``); ``None`` when there is none at
    that version, or the file is damaged, of another format or inconsistent (logged): the caller reads the store
    instead."""
    path = state_path(folder)
    if version is None or not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive:
            if set(archive.namelist()) != {f"{name}.npy" for name in (*_ARRAYS, "records", "version")}:
                raise ValueError("not a memory state file")
            saved = json.loads(_member(archive, "version").tobytes())
            if saved != _header(version):
                log.info("%s: saved at %s, the store is at %s: reading the store", path, saved, version)
                return None
            arrays = {name: _member(archive, name) for name in _ARRAYS}
            records = json.loads(_member(archive, "records").tobytes())
        state = MemoryState(**arrays, **{name: records[name] for name in _LISTS})
        _check(state, version, dim)
    except _UNREADABLE as err:
        log.warning("%s: not a usable memory state (%s): reading the store", path, err)
        return None
    return state


def _write_member(archive: zipfile.ZipFile, name: str, array: np.ndarray) -> None:
    """Member ``name.npy`` of ``archive``: the ``.npy`` header and the C-ordered ``array``'s bytes, written from the
    array in place (the form :func:`numpy.load` reads)."""
    with archive.open(f"{name}.npy", "w", force_zip64=True) as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        f.write(memoryview(array).cast("B") if array.size else b"")


def _npy_header(head: io.BytesIO, name: str) -> tuple[tuple[int, ...], np.dtype, int]:
    """``(shape, dtype, bytes before the array)`` of the ``.npy`` member ``name`` whose first bytes ``head`` holds
    (``ValueError`` unless it is a C-ordered array of numbers)."""
    major, _ = np.lib.format.read_magic(head)
    read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read_header(head)
    if fortran or dtype.hasobject:
        raise ValueError(f"member {name!r} is not a C-ordered array of numbers")
    return shape, dtype, head.tell()


def _member(archive: zipfile.ZipFile, name: str, room: float = 0.0) -> np.ndarray:
    """The array of member ``name`` (``.npy``, stored, not compressed) read from the archive's file straight into a
    writable array of its own: one read of its bytes where they lie, and the member's CRC-32 checked over them
    (:func:`numpy.load` reads through :mod:`zipfile`, a few hundred kilobytes at a time, at a third of the speed).
    With ``room``, the array is the first rows of one with ``room`` times as many rows again after them (not
    written, so not resident): a table that grows after it is read grows within it
    (:func:`graphmem.core.csr.held_rows`)."""
    info = archive.getinfo(f"{name}.npy")
    if info.compress_type != zipfile.ZIP_STORED or archive.filename is None:
        raise ValueError(f"member {name!r} is not stored as it is")
    with open(archive.filename, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)  # the member's local header: its name and extra field come before its bytes
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise ValueError(f"member {name!r} has no local header")
        name_size, extra_size = (int.from_bytes(local[k : k + 2], "little") for k in (26, 28))
        start = info.header_offset + 30 + name_size + extra_size
        f.seek(start)
        head = io.BytesIO(f.read(min(info.file_size, 1 << 16)))
        shape, dtype, offset = _npy_header(head, name)
        spare = int(shape[0] * room) if shape else 0
        out = np.empty((shape[0] + spare, *shape[1:]), dtype=dtype)[: shape[0]] if spare else np.empty(shape, dtype)
        view = memoryview(out.reshape(-1)).cast("B")
        f.seek(start + offset)
        if offset + view.nbytes != info.file_size or f.readinto(view) != view.nbytes:
            raise ValueError(f"member {name!r} does not hold the array its header says")
    if zlib.crc32(view, zlib.crc32(head.getvalue()[:offset])) != info.CRC:
        raise ValueError(f"member {name!r} fails its CRC-32")
    return out


def _check(state: MemoryState, version: dict[str, int], dim: int) -> None:
    """Raise ``ValueError`` unless every field has its dtype and rank and the sizes agree with each other, with
    ``version``'s count of records and with ``dim``."""
    for f in fields(MemoryState):
        value = getattr(state, f.name)
        if f.name in _ARRAYS:
            dtype, ndim = _ARRAYS[f.name]
            if value.dtype != dtype or value.ndim != ndim:
                raise ValueError(f"field {f.name!r} is {value.dtype} of rank {value.ndim}")
        elif not isinstance(value, list):
            raise ValueError(f"field {f.name!r} is not a list")
    n, e = version["nodes"], state.edge_type.shape[0]
    node_sizes = {state.seq.shape[0], state.emb.shape[0], state.time.shape[0], state.tokens.shape[0]}
    node_sizes |= {len(getattr(state, k)) for k in _LISTS}
    edge_sizes = {state.edge_index.shape[1], state.S.shape[0], state.F.shape[0], state.attr.shape[0]}
    if node_sizes != {n} or edge_sizes | {state.attr_init.shape[0]} != {e} or state.edge_index.shape[0] != 2:
        raise ValueError(f"sizes {sorted(node_sizes)} records, {sorted(edge_sizes)} edges do not agree")
    if state.emb.shape[1] != dim or state.attr.shape[1:] != (4,) or state.attr_init.shape[1:] != (4,):
        raise ValueError(f"embeddings of width {state.emb.shape[1]}, not {dim}, or features not of width 4")
    if e and (state.edge_index.min() < 0 or state.edge_index.max() >= n):
        raise ValueError("an edge names a row past the records")
    if n and state.tokens.min() < 1:
        raise ValueError("a record's token count is not positive")
    if n and (version["next_seq"] != int(state.seq[-1]) + 1 or np.any(np.diff(state.seq) <= 0)):
        raise ValueError("the seqs are not ascending up to the store's next seq")
