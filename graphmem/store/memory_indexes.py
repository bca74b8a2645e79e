"""The live memory's indexes saved beside its database, so that reopening a large memory loads them instead of
building them again.

``<memory>/indexes/`` holds what a writer saves at close: the memory's derived state (:mod:`graphmem.store.
memory_state`) and the retrieval indexes in ``graph.indexes`` (BM25, and
the dense HNSW index that both the semantic-neighbour search of new records and the ``ann`` entry selector use,
:mod:`graphmem.store.indexes`), each with a fingerprint of the graph it was made for, read by any open (a reader's
too) whose graph has that fingerprint: a memory written since (by a writer that did not close) builds them again.

An index holding a deleted slot is never saved, so that no forgotten record's vector stays in a file, and a
forget or a revise removes the folder. Any file that does not match, a damaged one included, is a cache miss:
the index is built from the records when first needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import BM25Index, LexicalIndexError
from graphmem.index.vector_index import VectorIndex, VectorIndexError
from graphmem.store.indexes import load_bm25, load_vector_index, save_bm25, save_vector_index

INDEX_DIR = "indexes"


def save_indexes(folder: Path, graph: MemoryGraph) -> None:
    """Save the graph's retrieval indexes; a vector index with deleted slots is left out (and its old file
    removed)."""
    out = Path(folder) / INDEX_DIR
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.safetensors"):
        old.unlink()
    for key, index in list(graph.indexes.items()):
        if isinstance(index, BM25Index):
            save_bm25(index, out / f"{key}.safetensors", graph)
        elif isinstance(index, VectorIndex):
            index.sync(graph)
            if index.num_dead == 0:
                save_vector_index(index, out / f"{key}.safetensors", graph)


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


def forget_indexes(folder: Path) -> None:
    """Remove the saved indexes and state (they hold the texts, vectors or words of records a forget or a revise has
    changed)."""
    shutil.rmtree(Path(folder) / INDEX_DIR, ignore_errors=True)
