"""Flat vector retrieval: nodes ranked by cosine to the query, loaded under the budget.

Nodes are ranked by ``cos(q, x_v)`` (ties by ascending string id) and loaded in that order with
:func:`load_under_budget`, which skips a node whose tokens would exceed ``max_tokens`` and
stops at ``max_nodes``. No edge is read; ``entries`` are the first ``max_entries`` loaded nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query, Retrieval, TraversalPolicy, load_under_budget, register_policy
from graphmem.policies.entries import cosine_matrix, node_id_rank, topk_by_score


@dataclass
class DenseTopKConfig:
    """Hydra config of :class:`DenseTopK` (``configs/policy/dense_topk.yaml``)."""

    name: str = "dense_topk"
    """registered policy name"""
    oversample: int = 4
    """candidates ranked per query, as a multiple of ``max_nodes`` (more are ranked if tokens skip many)"""


@register_policy("dense_topk")
class DenseTopK(TraversalPolicy):
    """Cosine top-nodes under the shared budget.

    Args:
        oversample: candidates ranked per query as a multiple of ``budget.max_nodes``; if token
            skips leave the node budget unfilled, the full ranking is used (default: 4).
    """

    def __init__(self, oversample: int = 4) -> None:
        if oversample < 1:
            raise ValueError(f"oversample must be >= 1, got {oversample}")
        self.oversample = oversample

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        return self.retrieve_batch(graph, [query], budget)[0]

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """One ``[B, N]`` matmul and one tie-aware top-k for all queries."""
        if not queries:
            return []
        t0 = time.perf_counter()
        if graph.num_nodes == 0:
            return [Retrieval(loaded=[], entries=[]) for _ in queries]
        scores = cosine_matrix(graph, queries)
        rank = node_id_rank(graph)
        k = min(graph.num_nodes, budget.max_nodes * self.oversample)
        ranked = topk_by_score(scores, k, rank).tolist()
        results = []
        for b, cand in enumerate(ranked):
            loaded, used = load_under_budget(graph, cand, budget)
            if len(loaded) < budget.max_nodes and k < graph.num_nodes:
                full = topk_by_score(scores[b:b + 1], graph.num_nodes, rank)[0].tolist()
                loaded, used = load_under_budget(graph, full, budget)
            results.append(Retrieval(loaded=loaded, entries=loaded[:budget.max_entries], loaded_tokens=used,
                                     scores=scores[b, loaded].tolist() if loaded else []))
        per_query = (time.perf_counter() - t0) / len(queries)
        for r in results:
            r.wall_time_s = per_query
        return results
