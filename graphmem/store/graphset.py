"""GraphSet: the graphs, questions and query embeddings every trainer and evaluator consumes.

On disk (no pickle), one unit committed by its manifest (:mod:`graphmem.store.setstore`)::

    <dir>/manifest.json                    dataset, config hash, provenance, questions, load report,
                                           graphs (name -> file, info), every file's SHA-256 and
                                           the SHA-256 of its own content
    <dir>/gen-<id>/queries.safetensors     query_embeddings [Q, D], bound to the manifest's ordered questions
    <dir>/gen-<id>/graphs/<safe name>.safetensors   one MemoryGraph each, saved under its name

:meth:`GraphSet.load` checks every listed file against its checksum, each graph's name and info
against its manifest entry, the manifest's own checksum, and the query embeddings for shape,
dimension, finiteness, non-zero rows and their binding to the questions before anything is
used. It imports neither the encoder nor sentence-transformers, so saved sets load on machines
without the text stack. Building a set is :mod:`graphmem.builders.pipeline`'s; this module imports
nothing from :mod:`graphmem.builders`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor

from graphmem.core import Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import LoadReport, Question
from graphmem.index.lexical import LexicalIndexError
from graphmem.index.vector_index import VectorIndexError
from graphmem.store.indexes import attach_indexes, attach_lexical
from graphmem.store.setformat import MANIFEST_VERSION, read_set, safe_name, write_set
from graphmem.store.setstore import GraphSetError, file_sha256, read_manifest

__all__ = ["GraphSet", "GraphSetError", "MANIFEST_VERSION", "file_sha256", "safe_name", "union"]


@dataclass
class GraphSet:
    """Graphs by name, questions (each names its graph), ``[Q, D]`` query embeddings and the load report.

    ``provenance`` says where the set comes from (data file and its SHA-256, data and graph
    settings, config hash, build time; once saved or loaded, also the folder and the manifest's
    SHA-256). ``files`` holds the verified paths of the set's other files (:mod:`graphmem.store.setstore`).
    """

    dataset: str
    graphs: dict[str, MemoryGraph]
    questions: list[Question]
    query_embeddings: Tensor
    report: LoadReport
    config_hash: str = ""
    stats: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.query_embeddings.shape[0] != len(self.questions):
            raise ValueError(
                f"GraphSet: {self.query_embeddings.shape[0]} query embeddings for {len(self.questions)} questions"
            )
        missing = sorted({q.graph for q in self.questions} - set(self.graphs))
        if missing:
            raise ValueError(f"GraphSet: questions refer to unknown graphs {missing[:5]}")

    def queries(self) -> list[Query]:
        """What policies may see: qid, text and embedding of each question (no gold fields)."""
        return [Query(qid=q.qid, text=q.text, embedding=self.query_embeddings[i]) for i, q in enumerate(self.questions)]

    def check(self, where: str = "GraphSet") -> GraphSet:
        """Refuse an empty set, a repeated question id, and query rows not finite non-zero ``[Q, D]`` floats."""
        if not self.graphs or not self.questions:
            raise GraphSetError(f"{where}: {len(self.graphs)} graphs and {len(self.questions)} questions (empty set)")
        emb = self.query_embeddings
        dims = sorted({int(g.embeddings.shape[1]) for g in self.graphs.values()})
        if emb.ndim != 2 or not emb.is_floating_point() or len(dims) != 1 or emb.shape[1] != dims[0]:
            raise GraphSetError(
                f"{where}: query embeddings are {emb.dtype} of shape {tuple(emb.shape)}, "
                f"expected floats [{len(self.questions)}, D] with D = the graphs' embedding size {dims}"
            )
        bad = (~torch.isfinite(emb)).any(dim=1).nonzero().flatten().tolist()
        if bad:
            raise GraphSetError(
                f"{where}: {len(bad)} query embedding rows hold inf or NaN, first row {bad[0]} "
                f"(question {self.questions[bad[0]].qid!r})"
            )
        zero = (emb == 0).all(dim=1).nonzero().flatten().tolist()
        if zero:
            raise GraphSetError(
                f"{where}: {len(zero)} query embedding rows are all zero (no direction to rank by), first row "
                f"{zero[0]} (question {self.questions[zero[0]].qid!r})"
            )
        seen: set[str] = set()
        for q in self.questions:
            if q.qid in seen:
                raise GraphSetError(f"{where}: question id {q.qid!r} occurs more than once")
            seen.add(q.qid)
        return self

    def save(self, directory: str | Path, extra_files: Mapping[str, Any] | None = None) -> Path:
        """Write the set under ``directory`` as one committed unit (:func:`graphmem.store.setformat.write_set`).

        Args:
            extra_files: more files of the set, relative path -> ``write(path)`` function; they are
                listed, checksummed and committed with the graphs (default: none).
        """
        return write_set(self, directory, extra_files)

    @staticmethod
    def read_manifest(directory: str | Path) -> dict | None:
        """The manifest of a saved set, or ``None`` when there is none (refused, naming it, when unreadable)."""
        return read_manifest(directory)

    @classmethod
    def load(cls, directory: str | Path) -> GraphSet:
        """Read and verify a set written by :meth:`save` (:func:`graphmem.store.setformat.read_set`; no encoder needed).

        Vector indexes saved with the set (``indexes/``, ``scripts/build_index.py``) and BM25 indexes
        (``lexical/``, written by every build) are attached to their graphs
        (:func:`graphmem.store.indexes.attach_indexes`, :func:`graphmem.store.indexes.attach_lexical`); one
        built for other node ids, embeddings or texts than its graph's, or damaged, refuses the set.
        """
        graphset = read_set(cls, directory)
        try:
            attach_indexes(graphset.graphs, graphset.files)
            attach_lexical(graphset.graphs, graphset.files)
        except (VectorIndexError, LexicalIndexError) as err:
            raise GraphSetError(str(err)) from None
        return graphset


def union(first: GraphSet, second: GraphSet) -> GraphSet:
    """The graphs and questions of both sets (graph names and question ids must not repeat)."""
    shared = sorted(set(first.graphs) & set(second.graphs))
    repeated = sorted({q.qid for q in first.questions} & {q.qid for q in second.questions})
    if shared or repeated:
        raise ValueError(f"union: graphs {shared[:3]} / questions {repeated[:3]} are in both graph sets")
    return GraphSet(
        dataset=first.dataset,
        graphs={**first.graphs, **second.graphs},
        questions=first.questions + second.questions,
        query_embeddings=torch.cat([first.query_embeddings, second.query_embeddings]),
        report=first.report,
        config_hash=first.config_hash,
        stats=first.stats,
    )
