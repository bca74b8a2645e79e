"""Flat vector retrieval: nodes ranked by cosine to the query, loaded under the budget.

Nodes are ranked by ``cos(q, x_v)`` (ties by ascending string id) and loaded in that order with
:func:`load_under_budget`, which skips a node whose tokens would exceed ``max_tokens`` and
stops at ``max_nodes``. No edge is read; ``entries`` are the first ``max_entries`` loaded nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import (
    Budget,
    Query,
    Retrieval,
    TraversalPolicy,
    load_under_budget,
    register_policy,
    resolve_device,
    share_wall_time,
)
from graphmem.policies.batched import Scope, greedy_admit, query_spans, retrieve_union, split_list
from graphmem.policies.entries import cosine_matrix, graph_tables, node_id_rank, scoped_cosine, topk_by_score


@dataclass
class DenseTopKConfig:
    """Hydra config of :class:`DenseTopK` (``configs/policy/dense_topk.yaml``)."""

    name: str = "dense_topk"
    """registered policy name"""
    oversample: int = 4
    """candidates ranked per query, as a multiple of ``max_nodes`` (more are ranked if tokens skip many)"""
    device: str = "cpu"
    """where the batched path runs (``cpu``, ``cuda``, ...)"""


@register_policy("dense_topk")
class DenseTopK(TraversalPolicy):
    """Cosine top-nodes under the shared budget.

    Args:
        oversample: candidates ranked per query as a multiple of ``budget.max_nodes``; if token
            skips leave the node budget unfilled, the full ranking is used (default: 4).
        device: where the batched path runs; the per-query reference stays on the CPU (default: ``"cpu"``).
    """

    def __init__(self, oversample: int = 4, device: str | torch.device = "cpu") -> None:
        if oversample < 1:
            raise ValueError(f"oversample must be >= 1, got {oversample}")
        self.oversample = oversample
        self.device = resolve_device(device)

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """Per-query reference: rank every node by cosine (ties by id), load under the budget."""
        t0 = time.perf_counter()
        if graph.num_nodes == 0:
            return Retrieval(loaded=[], entries=[])
        scores = cosine_matrix(graph, [query])
        ranked = topk_by_score(scores, graph.num_nodes, node_id_rank(graph))[0].tolist()
        loaded, used = load_under_budget(graph, ranked, budget)
        return Retrieval(
            loaded=loaded,
            entries=loaded[: budget.max_entries],
            loaded_tokens=used,
            scores=scores[0, loaded].tolist(),
            wall_time_s=time.perf_counter() - t0,
        )

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """One ``[B, D] x [D, N]`` matmul, one tie-aware top-k of ``oversample * max_nodes`` columns and
        one :func:`greedy_admit` over the ``[B, k]`` candidates; a row whose candidates leave the node
        budget unfilled (token skips) is re-ranked over all nodes."""
        if not queries:
            return []
        t0 = time.perf_counter()
        return share_wall_time(self._load(graph, cosine_matrix(graph, queries, self.device), budget), t0)

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """All queries of all ``graphs`` at once: each query ranks the nodes of its own graph only
        (:func:`~graphmem.policies.entries.scoped_cosine` over the graphs' disjoint union)."""
        return retrieve_union(
            self,
            graphs,
            queries,
            budget,
            lambda batch, flat, scope: self._load(
                batch.graph, scoped_cosine(batch, flat, scope.comp, self.device), budget, scope
            ),
        )

    def _load(self, graph: MemoryGraph, scores: Tensor, budget: Budget, scope: Scope | None = None) -> list[Retrieval]:
        """Rank and admit from ``[B, W]`` scores; with a ``scope``, column ``j`` of row ``b`` is node
        ``j`` of the query's component (rows are reported relative to it)."""
        b, dev = scores.shape[0], scores.device
        offset, _, size = query_spans(graph, b, scope, dev)
        rank = node_id_rank(graph, dev)
        k = min(scores.shape[1], budget.max_nodes * self.oversample)
        ranked = topk_by_score(scores, k, rank, None if scope is None else offset)
        valid = ranked < size[:, None]
        zero = torch.zeros(b, dtype=torch.long, device=dev)
        tokens, _ = graph_tables(graph, dev)
        admit, used, count = greedy_admit(
            tokens[torch.where(valid, ranked + offset[:, None], 0)], valid, zero, zero, budget
        )
        rows, cols = admit.nonzero(as_tuple=True)
        local = ranked[rows, cols]
        counts = torch.bincount(rows, minlength=b).tolist()
        loaded = split_list(local.tolist(), counts)
        picked = split_list(scores[rows, local].tolist(), counts)
        used = used.tolist()
        for i in ((count < budget.max_nodes) & (size > k)).nonzero().flatten().tolist():  # token skips: rank all
            own = graph if scope is None else scope.batch.graphs[int(scope.comp[i])]
            full = topk_by_score(scores[i : i + 1], own.num_nodes, rank, offset[i : i + 1])[0].tolist()
            loaded[i], used[i] = load_under_budget(own, full, budget)
            picked[i] = scores[i, loaded[i]].tolist()
        return [
            Retrieval(
                loaded=loaded[i], entries=loaded[i][: budget.max_entries], loaded_tokens=used[i], scores=picked[i]
            )
            for i in range(b)
        ]
