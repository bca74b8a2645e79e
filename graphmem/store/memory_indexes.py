"""The live memory's indexes saved beside its database, so that reopening a large memory loads them instead of
building them again.

``<memory>/indexes/`` holds what a writer saves at close:

* ``neighbours.safetensors``: the builder's neighbour index (the serialised FAISS index and its map from FAISS
  id to row) with the store's write count when it was saved (:meth:`graphmem.store.memory_store.SQLiteStore.
  writes`), sealed as the other index files are (:func:`graphmem.store.io.write_sealed`); read by the next
  writer's open only when the store has not been written since;
* ``<key>.safetensors``: the retrieval indexes the policies built in ``graph.indexes`` (BM25 and the dense
  entry index, :mod:`graphmem.store.indexes`), each with a fingerprint of the graph it was made for, read by
  any open (a reader's too) whose graph has that fingerprint.

An index holding a deleted slot is never saved, so that no forgotten record's vector stays in a file, and a
forget or a revise removes the folder. Any file that does not match, a damaged one included, is a cache miss:
the index is built from the records when first needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import BM25Index, LexicalIndexError
from graphmem.index.neighbours import RowIndex
from graphmem.index.vector_index import VectorIndex, VectorIndexError
from graphmem.store.indexes import load_bm25, load_vector_index, save_bm25, save_vector_index
from graphmem.store.io import read_sealed, write_sealed

INDEX_DIR = "indexes"
NEIGHBOURS_FILE = "neighbours.safetensors"
NEIGHBOURS_KEY = "graphmem_neighbours"


def save_indexes(folder: Path, graph: MemoryGraph, neighbours: RowIndex | None, writes: int) -> None:
    """Save the neighbour index stamped with the store's ``writes`` and the graph's retrieval indexes; an index
    with deleted slots is left out (and its old file removed)."""
    out = Path(folder) / INDEX_DIR
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for key, index in list(graph.indexes.items()):
        if isinstance(index, BM25Index):
            save_bm25(index, out / f"{key}.safetensors", graph)
        elif isinstance(index, VectorIndex):
            index.sync(graph)
            if index.num_dead == 0:
                save_vector_index(index, out / f"{key}.safetensors", graph)
    if neighbours is not None and not neighbours.dead:
        write_sealed(out / NEIGHBOURS_FILE, neighbours.to_arrays(), NEIGHBOURS_KEY, {"writes": writes})


def load_indexes(folder: Path, graph: MemoryGraph) -> int:
    """Put the saved retrieval indexes made for ``graph`` into ``graph.indexes``; returns how many."""
    loaded = 0
    for path in sorted((Path(folder) / INDEX_DIR).glob("*.safetensors")):
        try:
            index = load_bm25(path, graph) if path.stem.startswith("bm25") else load_vector_index(path, graph)
        except (LexicalIndexError, VectorIndexError, OSError, KeyError, ValueError):
            continue
        graph.indexes[path.stem] = index
        loaded += 1
    return loaded


def load_neighbours(folder: Path, writes: int, rows: int, dim: int) -> RowIndex | None:
    """The neighbour index saved in ``folder`` when it was saved at ``writes`` over ``rows`` rows of width
    ``dim``, else None."""
    path = Path(folder) / INDEX_DIR / NEIGHBOURS_FILE
    if not path.is_file():
        return None
    try:
        arrays, meta = read_sealed(path, NEIGHBOURS_KEY, {"faiss", "row_of"}, "neighbour index", ValueError)
        if meta.get("writes") != writes:
            return None
        index = RowIndex.from_arrays(arrays)
    except (ValueError, RuntimeError):  # damaged, or not a FAISS index: built from the records
        return None
    return index if len(index) == rows and index.index.d == dim else None


def forget_indexes(folder: Path) -> None:
    """Remove the saved indexes (they hold the vectors or words of records a forget or a revise has changed)."""
    shutil.rmtree(Path(folder) / INDEX_DIR, ignore_errors=True)
