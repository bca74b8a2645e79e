"""Hybrid retrieval: the dense and the BM25 rankings fused by reciprocal rank (Cormack et al., 2009).

Each ranking ``r`` (dense: cosine ``cos(q, x_v)``, ties by string id; BM25: :mod:`graphmem.lexical`,
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
"""

from __future__ import annotations

from typing import Sequence

import torch

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import load_rankings
from graphmem.policies.bm25 import bm25_ranking
from graphmem.policies.ranking import cosine_matrix, topk_by_score
from graphmem.policies.selectors import register_entry_selector
from graphmem.policies.tables import node_id_rank
from graphmem.policies.types import Query


def rrf(
    rankings: Sequence[Sequence[int]], weights: Sequence[float], k: float, id_rank: Sequence[int]
) -> list[tuple[int, float]]:
    """``[(row, RRF score)]`` by (score desc, ``id_rank`` asc) over the rows of ``rankings`` (module docstring)."""
    fused: dict[int, float] = {}
    for ranking, w in zip(rankings, weights):
        for position, v in enumerate(ranking, start=1):
            fused[v] = fused.get(v, 0.0) + w / (k + position)
    return sorted(fused.items(), key=lambda item: (-item[1], id_rank[item[0]]))


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
    """

    def __init__(
        self,
        k: float = 60.0,
        dense_weight: float = 1.0,
        bm25_weight: float = 1.0,
        candidates: int | None = None,
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        if not k >= 0 or not dense_weight >= 0 or not bm25_weight >= 0:
            raise ValueError(f"hybrid: k and the weights must be >= 0, got k={k}, {dense_weight}, {bm25_weight}")
        if candidates is not None and (
            not isinstance(candidates, int) or isinstance(candidates, bool) or candidates < 1
        ):
            raise ValueError(f"hybrid: candidates must be a positive integer or null, got {candidates!r}")
        self.k, self.weights, self.candidates, self.k1, self.b = k, (dense_weight, bm25_weight), candidates, k1, b

    def rank(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[tuple[int, float]]]:
        """Per query, its fused ``[(row, score)]`` over ``graph`` (best first)."""
        if graph.num_nodes == 0:
            return [[] for _ in queries]
        depth = self.candidates or budget.max_nodes
        id_rank = node_id_rank(graph)
        dense = topk_by_score(cosine_matrix(graph, queries), depth, id_rank).tolist()
        ranks = id_rank.tolist()
        out = []
        for q, d in zip(queries, dense):
            lexical = bm25_ranking(graph, q.text, self.k1, self.b)[0][:depth].tolist()
            out.append(rrf([d, lexical], self.weights, self.k, ranks))
        return out

    def select(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[list[int]]:
        return [[v for v, _ in fused[: budget.max_entries]] for fused in self.rank(graph, queries, budget)]


@register_policy("hybrid")
class HybridPolicy(TraversalPolicy):
    """Dense + BM25 reciprocal-rank fusion under the shared budget (see module docstring).

    Args:
        k, dense_weight, bm25_weight, candidates, k1, b: the fusion's (:class:`HybridEntrySelector`;
            defaults 60, 1, 1, ``budget.max_nodes``, 1.5, 0.75).
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
    ) -> None:
        self.device = resolve_device(device)
        self.fusion = HybridEntrySelector(k, dense_weight, bm25_weight, candidates, k1, b)

    def traverse(self, scope: Scope, entries: None, budget: Budget) -> RetrievalBatch:
        """Each query's fused ranking over its own graph, loaded under the budget."""
        rankings, start = [], 0
        for graph, count in zip(scope.batch.graphs, scope.counts):
            for fused in self.fusion.rank(graph, scope.queries[start : start + count], budget):
                rankings.append(([v for v, _ in fused], dict(fused)))
            start += count
        return load_rankings(scope, rankings, budget)
