"""The live memory's neighbour index saved beside its database, so that reopening a large memory loads it
instead of building it again.

``neighbours.npz`` holds the serialised FAISS index, its map from FAISS id to row and the store's write count
(:meth:`graphmem.store.memory_store.SQLiteStore.writes`) when it was saved. It is written at close (atomically)
only when it holds no deleted slot, so that no forgotten record's vector is kept in it, and it is read at open
only when the store has not been written since: any other file, a damaged one included, is a cache miss and the
index is built from the records.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from graphmem.index.neighbours import RowIndex
from graphmem.store.io import atomic_write

NEIGHBOURS_FILE = "neighbours.npz"


def save_neighbours(folder: Path, index: RowIndex, writes: int) -> None:
    """Save ``index`` (without deleted slots) stamped with the store's ``writes``; otherwise remove the file."""
    if index.dead:
        forget_neighbours(folder)
        return
    arrays = {**index.to_arrays(), "writes": np.asarray([writes], dtype=np.int64)}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(Path(folder) / NEIGHBOURS_FILE, write)


def load_neighbours(folder: Path, writes: int, rows: int, dim: int) -> RowIndex | None:
    """The index saved in ``folder`` when it was saved at ``writes`` over ``rows`` rows of width ``dim``, else None."""
    path = Path(folder) / NEIGHBOURS_FILE
    if not path.is_file():
        return None
    try:
        with np.load(io.BytesIO(path.read_bytes()), allow_pickle=False) as saved:
            arrays = {k: saved[k] for k in saved.files}
        if int(arrays.pop("writes")[0]) != writes:
            return None
        index = RowIndex.from_arrays(arrays)
    except (OSError, ValueError, KeyError, IndexError, RuntimeError, zipfile.BadZipFile):
        return None
    return index if len(index) == rows and index.index.d == dim else None


def forget_neighbours(folder: Path) -> None:
    """Remove the saved index (it holds the vectors of records a forget or a revise has just changed)."""
    (Path(folder) / NEIGHBOURS_FILE).unlink(missing_ok=True)
