"""Index files: a graph's BM25 and vector indexes saved beside it, and those of a graph set.

Each index is one safetensors file written atomically without pickle (:func:`graphmem.store.io.write_sealed`):

* BM25 (:class:`~graphmem.index.lexical.BM25Index`): the CSR arrays, the vocabulary (UTF-8, newline
  separated) and the postings' impact order (:meth:`~graphmem.index.lexical.BM25Index.impact_order`: sorting every
  entry by its weight is most of what a first query would otherwise pay; files without it are read too), a header
  with ``k1``, ``b``, the tokenizer name and a fingerprint of the graph's node ids and texts
  (:func:`~graphmem.index.lexical.text_fingerprint`);
* vector (:class:`~graphmem.index.vector_index.VectorIndex`): FAISS's own serialised bytes and
  ``slot_row``, a header with the spec and a fingerprint of the graph's node ids and embeddings
  (:func:`~graphmem.index.vector_index.graph_fingerprint`).

Both headers carry a SHA-256 over header and arrays; a damaged file, one of another format or
tokenizer, or one made for another graph is refused with an error naming the file.

Inside a graph set the files are ``lexical/<safe name>/<key>.safetensors`` (every build writes them) and
``indexes/<safe name>/<spec key>.safetensors`` (``scripts/build_index.py``); :func:`lexical_files` and
:func:`index_files` give them in the form a set takes further files in, :func:`attach_indexes` and
:func:`attach_lexical` load them into their graphs' ``graph.indexes``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from graphmem.core.graph import MemoryGraph
from graphmem.index import lexical, vector_index
from graphmem.index.lexical import BM25Index, LexicalIndexError, bm25_for, index_key, text_fingerprint
from graphmem.index.vector_index import IndexSpec, VectorIndex, VectorIndexError, graph_fingerprint, index_for
from graphmem.store.io import read_sealed, write_sealed
from graphmem.store.setformat import graph_files, safe_name

LEXICAL_DIR = "lexical"
INDEX_DIR = "indexes"


# ---------------------------------------------------------------------------- BM25
def save_bm25(index: BM25Index, path: str | Path, graph: MemoryGraph) -> Path:
    """Write the BM25 index of ``graph`` (synced first) to one safetensors file, atomically."""
    index.sync(graph)
    tensors = {
        "indptr": index.indptr,
        "terms": index.terms,
        "tf": index.tf,
        "vocab": np.frombuffer("\n".join(index.tokens).encode(), dtype=np.uint8).copy(),
        "order": index.impact_order(),
    }
    meta = {
        "format_version": lexical.FORMAT_VERSION,
        "tokenizer": lexical.TOKENIZER_NAME,
        "k1": index.k1,
        "b": index.b,
        "graph_fingerprint": text_fingerprint(graph),
    }
    return write_sealed(path, tensors, "graphmem_bm25", meta)


def load_bm25(path: str | Path, graph: MemoryGraph) -> BM25Index:
    """Read a BM25 index written by :func:`save_bm25` for ``graph``; a damaged file, another tokenizer's
    or one made for another graph is refused with a :class:`LexicalIndexError` naming the file."""
    path = Path(path)
    names = {"indptr", "terms", "tf", "vocab"}
    tensors, meta = read_sealed(path, "graphmem_bm25", names, "BM25 index", LexicalIndexError, frozenset({"order"}))
    for key, want in (("format_version", lexical.FORMAT_VERSION), ("tokenizer", lexical.TOKENIZER_NAME)):
        if meta.get(key) != want:
            raise LexicalIndexError(f"{path}: {key} {meta.get(key)!r} is not {want!r}; rebuild the graph set")
    if meta.get("graph_fingerprint") != text_fingerprint(graph):
        raise LexicalIndexError(f"{path}: the index was built for another graph (node ids or texts differ)")
    vocab = tensors["vocab"].tobytes().decode().split("\n") if tensors["vocab"].size else []
    out = BM25Index(vocab, tensors["indptr"], tensors["terms"], tensors["tf"], meta["k1"], meta["b"])
    if out.num_rows != graph.num_nodes or (out.terms.size and int(out.terms.max()) >= len(vocab)):
        raise LexicalIndexError(f"{path}: arrays do not match the graph ({graph.num_nodes} nodes)")
    if "order" in tensors:
        try:
            out.take_order(tensors["order"])
        except LexicalIndexError as err:
            raise LexicalIndexError(f"{path}: {err}") from None
    out.mark_synced(graph)
    return out


# ---------------------------------------------------------------------------- vector indexes
def save_vector_index(index: VectorIndex, path: str | Path, graph: MemoryGraph) -> Path:
    """Write the vector index of ``graph`` (synced first) to one safetensors file, atomically."""
    index.sync(graph)
    tensors = {"faiss": index.to_bytes(), "slot_row": index.slot_row}
    meta = {
        "format_version": vector_index.FORMAT_VERSION,
        "spec": dataclasses.asdict(index.spec),
        "dim": index.dim,
        "graph_fingerprint": graph_fingerprint(graph),
    }
    return write_sealed(path, tensors, "graphmem_index", meta)


def load_vector_index(path: str | Path, graph: MemoryGraph) -> VectorIndex:
    """Read a vector index written by :func:`save_vector_index` for ``graph``; a damaged file or one made
    for another graph is refused with a :class:`VectorIndexError` naming the file."""
    path = Path(path)
    tensors, meta = read_sealed(path, "graphmem_index", {"faiss", "slot_row"}, "vector index", VectorIndexError)
    version = vector_index.FORMAT_VERSION
    if meta.get("format_version") != version:
        raise VectorIndexError(f"{path}: format_version {meta.get('format_version')!r} is not {version}")
    if meta["graph_fingerprint"] != graph_fingerprint(graph):
        raise VectorIndexError(f"{path}: the index was built for another graph (node ids or embeddings differ)")
    spec = IndexSpec.from_mapping(meta["spec"])
    out = VectorIndex.from_bytes(spec, tensors["faiss"], tensors["slot_row"], int(meta["dim"]))
    if out.index.ntotal != out.num_slots or int((out.slot_row >= 0).sum()) != graph.num_nodes:
        raise VectorIndexError(f"{path}: field 'slot_row' does not match the index ({out.index.ntotal} vectors)")
    out.mark_synced(graph)
    return out


# ---------------------------------------------------------------------------- with a graph set
def lexical_files(graphs: Mapping[str, MemoryGraph], k1: float = 1.5, b: float = 0.75) -> dict[str, Any]:
    """``{lexical/<safe name>/<key>.safetensors: write(path)}`` for every graph: the form in which a
    graph set takes further files to list, checksum and commit with its graphs."""
    return {
        f"{LEXICAL_DIR}/{safe_name(name)}/{index_key(k1, b)}.safetensors": (
            lambda path, g=g: save_bm25(bm25_for(g, k1, b), path, g)
        )
        for name, g in graphs.items()
    }


def index_file(graph_name: str, spec: IndexSpec) -> str:
    """Relative path of a graph's index file inside a graph set: ``indexes/<safe name>/<spec key>.safetensors``."""
    return f"{INDEX_DIR}/{safe_name(graph_name)}/{spec.key}.safetensors"


def index_files(graphs: Mapping[str, MemoryGraph], spec: IndexSpec | None = None) -> dict[str, Any]:
    """``{relative path: write(path)}`` for the index of every graph (built or taken from ``graph.indexes``),
    the form in which a graph set takes further files to list, checksum and commit with its graphs."""
    spec = spec or IndexSpec()
    return {
        index_file(name, spec): (lambda path, g=g: save_vector_index(index_for(g, spec), path, g))
        for name, g in graphs.items()
    }


def attach_lexical(graphs: Mapping[str, MemoryGraph], files: Mapping[str, str | Path]) -> int:
    """Load the BM25 files among a graph set's ``files`` into their graphs' ``graph.indexes``; returns how many."""
    pairs = graph_files(graphs, files, LEXICAL_DIR)
    for graph, path in pairs:
        index = load_bm25(path, graph)
        graph.indexes[index_key(index.k1, index.b)] = index
    return len(pairs)


def attach_indexes(graphs: Mapping[str, MemoryGraph], files: Mapping[str, str | Path]) -> int:
    """Load the index files among a graph set's ``files`` (relative path -> path) into their graphs'
    ``graph.indexes``; returns how many. Each is checked against its graph (:func:`load_vector_index`)."""
    pairs = graph_files(graphs, files, INDEX_DIR)
    for graph, path in pairs:
        index = load_vector_index(path, graph)
        graph.indexes[index.spec.key] = index
    return len(pairs)
