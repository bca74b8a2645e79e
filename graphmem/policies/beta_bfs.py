"""Posterior-mean-prioritised BFS: GraphMemory Algorithm 1 (Appendix B.2).

Entries start at depth 0 in a FIFO queue. Pop ``(v, d)``; if ``v`` is not visited, mark it
visited; if ``tokens(L || [v]) <= max_tokens`` append ``v`` to the loaded list ``L`` and, when
``d < max_hops``, push the ``top_k_neighbors`` out-neighbors ``u`` of ``v`` with the largest
posterior mean

    w(v, u) = (S + 1) / (S + F + 2)        (GraphMemory eq. 19)

(ties by ascending target string id) at depth ``d + 1``. Stop when ``|L| = max_nodes`` or the
queue is empty. Parallel edges ``v -> u`` of several relations count as one neighbor with the
largest of their weights. No fallback: no entries means nothing is loaded.

The neighbor choice does not depend on the query, so the top-k neighbors of every node are one
cached table and the queue runs for all queries at once as tensor levels
(:func:`~graphmem.policies.batched.level_bfs`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import level_bfs
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import dense_rows, distinct_neighbors, token_counts


@register_policy("beta_bfs")
class BetaBFS(TraversalPolicy):
    """GraphMemory's bounded posterior-mean BFS (Algorithm 1; see module docstring).

    Args:
        entry_selector: entry selector name or instance (default: ``"embedding"``).
        device: where the traversal runs (default: ``"cpu"``).
    """

    def __init__(self, entry_selector: SelectorSpec = "embedding", device: str | torch.device = "cpu") -> None:
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        target, edge = top_neighbors(scope.graph, budget.top_k_neighbors, scope.device)
        bfs = level_bfs(entries, token_counts(scope.graph, scope.device), budget, lambda _, v: (target[v], edge[v]))
        return bfs.result(scope.graph, entries, budget)


def top_neighbors(graph: MemoryGraph, k: int, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``([N, k] target, [N, k] edge)``: each node's first ``k`` distinct out-neighbors by posterior
    mean (:func:`~graphmem.policies.tables.distinct_neighbors`), ``-1`` where it has fewer. Cached
    until the edges or counters change (on ``device`` too, when given)."""

    def build() -> tuple[Tensor, Tensor]:
        rowptr, target, edge = distinct_neighbors(graph, by_weight=True)
        return dense_rows(rowptr, target, k, -1), dense_rows(rowptr, edge, k, -1)

    return graph.cached(f"policies.beta_bfs_top{k}", build, (graph.edge_index, graph.S, graph.F), device)
