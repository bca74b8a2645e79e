"""Flat vector retrieval: nodes ranked by cosine to the query, loaded under the budget.

Nodes are ranked by ``cos(q, x_v)`` (ties by ascending string id) and loaded in that order with
:func:`~graphmem.policies.batched.load_under_budget`, which skips a node whose tokens would exceed
``max_tokens`` and stops at ``max_nodes``. No edge is read; ``entries`` are the first
``max_entries`` loaded nodes.
"""

from __future__ import annotations

import torch

from graphmem.core.retrieval import group_by_query
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import greedy_admit, load_under_budget
from graphmem.policies.ranking import topk_by_score
from graphmem.policies.tables import node_id_rank, token_counts


@register_policy("dense_topk")
class DenseTopK(TraversalPolicy):
    """Cosine top-nodes under the shared budget.

    Args:
        oversample: candidates ranked per query as a multiple of ``budget.max_nodes``; if token
            skips leave the node budget unfilled, the full ranking is used (default: 4).
        device: where the ranking runs (default: ``"cpu"``).
    """

    def __init__(self, oversample: int = 4, device: str | torch.device = "cpu") -> None:
        if oversample < 1:
            raise ValueError(f"oversample must be >= 1, got {oversample}")
        self.device = resolve_device(device)
        self.oversample = oversample

    def traverse(self, scope: Scope, entries: None, budget: Budget) -> RetrievalBatch:
        """One tie-aware top-k of ``oversample * max_nodes`` columns of the scope's cosines and one
        :func:`greedy_admit` over the ``[B, k]`` candidates; a query whose candidates leave the node
        budget unfilled (token skips) is ranked again over all its graph's nodes."""
        scores, graph, dev = scope.cosine(), scope.graph, scope.device
        b, offset, size = scores.shape[0], scope.node_offset, scope.sizes
        rank = node_id_rank(graph, dev)
        k = min(scores.shape[1], budget.max_nodes * self.oversample)
        ranked = topk_by_score(scores, k, rank, offset)
        valid = ranked < size[:, None]
        zero = torch.zeros(b, dtype=torch.long, device=dev)
        tokens = token_counts(graph, dev)
        admit, used, count = greedy_admit(
            tokens[torch.where(valid, ranked + offset[:, None], 0)], valid, zero, zero, budget
        )
        query, cols = admit.nonzero(as_tuple=True)
        local = ranked[query, cols]
        redo = ((count < budget.max_nodes) & (size > k)).nonzero().flatten().tolist()
        if redo:  # token skips: load from the full ranking of the query's own graph
            keep = ~torch.isin(query, torch.tensor(redo, device=dev))
            query, local = query[keep], local[keep]
            for i in redo:
                own = scope.batch.graphs[int(scope.comp[i])]
                full = topk_by_score(scores[i : i + 1], own.num_nodes, rank, offset[i : i + 1])[0].tolist()
                loaded, used[i] = load_under_budget(own, full, budget)
                picked = torch.tensor(loaded, dtype=torch.long, device=dev)
                query, local = torch.cat([query, torch.full_like(picked, i)]), torch.cat([local, picked])
            query, local = group_by_query(query, local)
        return RetrievalBatch(budget.max_entries, used, query, local + offset[query], scores=scores[query, local])
