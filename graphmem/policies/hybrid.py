"""Hybrid retrieval: the dense and the BM25 rankings fused by reciprocal rank (Cormack et al., 2009).

Each ranking ``r`` (dense: cosine ``cos(q, x_v)``, ties by string id; BM25: :mod:`graphmem.index.lexical`,
only nodes sharing a term with the query, ties by string id) contributes its first ``candidates``
nodes of the query's own graph (default: ``budget.max_nodes``, as many as the budget loads; chosen on
the HotpotQA train sample, ``docs/lexical.md``), ``rank_r(v) = 1, 2, ...``. A node's fused score is

    RRF(v) = sum over rankings r that hold v of  w_r / (k + rank_r(v))

with ``k = 60`` and ``w_dense = w_bm25 = 1`` by default; nodes are ordered by (RRF desc, string id
asc). The ``hybrid`` policy loads that order under the budget
(:func:`~graphmem.policies.batched.load_under_budget`: a node over the token budget is skipped,
``max_nodes`` stops it; only fused candidates are loaded, at most ``2 * candidates``); its entries
are the first ``max_entries`` loaded nodes. ``entry_selector=hybrid`` gives any walk (``beta_bfs``,
``ppr``, ``uniform_bfs``, ``router``, ``gnn``) the first ``max_entries`` fused nodes, each query's
from its own graph, e.g. ``policy.entry_selector='{name: hybrid, k: 60, candidates: 24}'``.

Bounded per query on graphs of at least ``min_nodes`` nodes (default 16384, the ``ann`` selector's): the
dense ranking's top ``candidates`` come from the graph's FAISS index (:mod:`graphmem.index.vector_index`, as
``entry_selector=ann``: candidates re-scored by exact cosine, ties by string id as on the exact path, a tie at
the cut that runs past the fetched candidates resolved over every node; approximate only in what the index
misses) instead of a ``[Q, N]`` cosine matrix, and the BM25 ranking's from
:func:`~graphmem.policies.bm25.bm25_top` (the exact top ``candidates`` by the threshold algorithm over
impact-ordered postings). Smaller graphs rank exactly; ``min_nodes: 0`` forces the bounded path.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from graphmem.core.graph import MemoryGraph
from graphmem.core.retrieval import Query
from graphmem.index.vector_index import IndexSpec, index_for
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import load_rankings
from graphmem.policies.bm25 import BOUNDED_MIN_NODES, bm25_rows
from graphmem.policies.ranking import cosine_matrix, query_matrix, topk_by_score
from graphmem.policies.selectors import register_entry_selector
from graphmem.policies.tables import node_id_rank


def rrf(
    rankings: Sequence[Sequence[int]], weights: Sequence[float], k: float, id_rank: Sequence[int]
) -> list[tuple[int, float]]:
    """``[(row, RRF score)]`` by (score desc, ``id_rank`` asc) over the rows of ``rankings`` (module docstring)."""
    fused: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        for position, v in enumerate(ranking, start=1):
            fused[v] = fused.get(v, 0.0) + w / (k + position)
    rows = list(fused)
    ranks = id_rank[rows].tolist() if isinstance(id_rank, np.ndarray) else [id_rank[v] for v in rows]
    return [(v, fused[v]) for _, _, v in sorted(zip([-fused[v] for v in rows], ranks, rows))]


@register_entry_selector("hybrid")
class HybridEntrySelector:
    """The fused dense + BM25 ranking (module docstring); as a selector, its first ``budget.max_entries`` nodes.

    Args:
        k: RRF constant (default: 60).
        dense_weight: weight of the dense ranking (default: 1).
        bm25_weight: weight of the BM25 ranking (default: 1).
        candidates: nodes each ranking contributes before fusion, its top ``candidates``; ``None``:
            ``budget.max_nodes`` (default: ``None``).
        k1: BM25 term-frequency saturation (default: 1.5).
        b: BM25 length normalisation (default: 0.75).
        min_nodes: graphs of at least this many nodes rank both halves bounded (module docstring); 0: every
            graph (default: 16384).
        index: :class:`~graphmem.index.vector_index.IndexSpec` fields of the dense half's index there, or its kind
            alone (``"hnsw"``, ``"ivf"``) (default: HNSW, as ``entry_selector=ann``).
    """

    def __init__(
        self,
        k: float = 60.0,
        dense_weight: float = 1.0,
        bm25_weight: float = 1.0,
        candidates: int | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        min_nodes: int = BOUNDED_MIN_NODES,
        index: IndexSpec | str | Mapping[str, Any] | None = None,
    ) -> None:
        if not k >= 0 or not dense_weight >= 0 or not bm25_weight >= 0:
            raise ValueError(f"hybrid: k and the weights must be >= 0, got k={k}, {dense_weight}, {bm25_weight}")
        if candidates is not None and (
            not isinstance(candidates, int) or isinstance(candidates, bool) or candidates < 1
        ):
            raise ValueError(f"hybrid: candidates must be a positive integer or null, got {candidates!r}")
        if not isinstance(min_nodes, int) or isinstance(min_nodes, bool) or min_nodes < 0:
            raise ValueError(f"hybrid: min_nodes must be a non-negative integer, got {min_nodes!r}")
        self.k, self.weights, self.candidates, self.k1, self.b = k, (dense_weight, bm25_weight), candidates, k1, b
        self.min_nodes = min_nodes
        index = {"kind": index} if isinstance(index, str) else index
        self.spec = index if isinstance(index, IndexSpec) else IndexSpec.from_mapping(index)

    def bounded(self, graph: MemoryGraph) -> bool:
        """Whether ``graph`` is ranked by the bounded path (index and bounded BM25; else exactly)."""
        return graph.num_nodes >= max(self.min_nodes, 1)

    def dense(self, graph: MemoryGraph, queries: Sequence[Query], depth: int) -> list[list[int]]:
        """Per query, the top ``depth`` rows by (cosine desc, string id asc): from the index when bounded."""
        if self.bounded(graph):
            rows = index_for(graph, self.spec).search(graph, query_matrix(graph, queries), depth)
            return [[v for v in r if v >= 0] for r in rows.tolist()]
        return topk_by_score(cosine_matrix(graph, queries), depth, node_id_rank(graph)).tolist()

    def rank(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[tuple[int, float]]]:
        """Per query, its fused ``[(row, score)]`` over ``graph`` (best first)."""
        if graph.num_nodes == 0:
            return [[] for _ in queries]
        depth = self.candidates or budget.max_nodes
        ranks = node_id_rank(graph).numpy()  # read at the fused rows only (no per-query list of N)
        out = []
        for q, d in zip(queries, self.dense(graph, queries, depth)):
            lexical = bm25_rows(graph, q.text, depth, self.min_nodes, self.k1, self.b).tolist()
            out.append(rrf([d, lexical], self.weights, self.k, ranks))
        return out

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        return [[v for v, _ in fused[: budget.max_entries]] for fused in self.rank(graph, queries, budget)]


@register_policy("hybrid")
class HybridPolicy(TraversalPolicy):
    """Dense + BM25 reciprocal-rank fusion under the shared budget (see module docstring).

    Args:
        k, dense_weight, bm25_weight, candidates, k1, b, min_nodes, index: the fusion's
            (:class:`HybridEntrySelector`; defaults 60, 1, 1, ``budget.max_nodes``, 1.5, 0.75, 16384, HNSW).
        device: where the result tensors live (default: ``"cpu"``; the ranking runs on the CPU).
    """

    def __init__(
        self,
        k: float = 60.0,
        dense_weight: float = 1.0,
        bm25_weight: float = 1.0,
        candidates: int | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        device: str | torch.device = "cpu",
        min_nodes: int = BOUNDED_MIN_NODES,
        index: str | Mapping[str, Any] | None = None,
    ) -> None:
        self.device = resolve_device(device)
        self.fusion = HybridEntrySelector(k, dense_weight, bm25_weight, candidates, k1, b, min_nodes, index)

    def traverse(self, scope: Scope, entries: None, budget: Budget) -> RetrievalBatch:
        """Each query's fused ranking over its own graph, loaded under the budget."""
        rankings, start = [], 0
        for graph, count in zip(scope.batch.graphs, scope.counts):
            for fused in self.fusion.rank(graph, scope.queries[start : start + count], budget):
                rankings.append(([v for v, _ in fused], dict(fused)))
            start += count
        return load_rankings(scope, rankings, budget)
