"""The worked example of docs/policies.md: a new traversal policy is its algorithm, nothing else.

``cosine_bfs`` is GraphMemory's Algorithm 1 with the neighbors of a loaded node ranked by cosine
to the query instead of by the Beta posterior mean, an ablation of the learned evidence. It is
registered with the decorator; the base class selects its entries, batches it over graphs, and
builds and times its results. ``conftest.py`` imports this module, so every registry-driven test
(batched == reference, graph batches, the ``meta`` device, gold leakage) covers it;
``test_example_policy.py`` runs it through ``evaluate.py``, ``train.py`` and ``benchmark.py``.
"""

import torch
from policy_references import bounded_bfs, distinct_targets, entries_of, reference
from torch import Tensor

from graphmem.core import Budget, RetrievalBatch
from graphmem.core.device import resolve_device
from graphmem.policies import Scope, TraversalPolicy, make_entry_selector, register_policy
from graphmem.policies.batched import csr_positions, level_bfs, rank_in_group, segment_topk
from graphmem.policies.ranking import cosine_matrix
from graphmem.policies.tables import distinct_neighbors, token_counts


# ---------------------------------------------------------------------------- the policy
@register_policy("cosine_bfs")
class CosineBFS(TraversalPolicy):
    """Algorithm 1; a loaded node pushes its ``top_k_neighbors`` distinct out-neighbors with the
    highest cosine to the query (ties by string id, parallel edges once: the lowest edge id)."""

    def __init__(self, entry_selector="embedding", device="cpu"):
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        graph, dev, k = scope.graph, scope.device, budget.top_k_neighbors
        rowptr, target, edge = distinct_neighbors(graph, device=dev)  # neighbors by string id
        cos = scope.cosine()  # [B, W]: query b against node node_offset[b] + j of its own graph

        def expand(rows: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:  # the k to push per node
            seg, pos = csr_positions(rowptr, nodes)
            q = rows[seg]
            best = segment_topk(cos[q, target[pos] - scope.node_offset[q]], seg, k)
            owner = seg[best]
            rank, _ = rank_in_group(owner, nodes.numel())
            push = torch.full((nodes.numel(), k), -1, dtype=torch.long, device=dev)
            via = push.clone()
            push[owner, rank], via[owner, rank] = target[pos[best]], edge[pos[best]]
            return push, via

        return level_bfs(entries, token_counts(graph, dev), budget, expand).result(graph, entries, budget)


# ---------------------------------------------------------------------------- its test oracle
@reference("cosine_bfs")
def cosine_bfs(policy, graph, query, budget):
    """One query in plain Python: rank each node's distinct out-neighbors by ``(-cos, id)``."""
    cos, ids = cosine_matrix(graph, [query])[0].tolist(), graph.node_ids

    def expand(v: int):
        first = {u: es[0] for u, es in distinct_targets(graph, v).items()}
        ranked = sorted(first, key=lambda u: (-cos[u], ids[u]))[: budget.top_k_neighbors]
        return graph.out_edges(v).tolist(), [(u, first[u]) for u in ranked]

    return bounded_bfs(graph, entries_of(policy, graph, query, budget), budget, expand)
