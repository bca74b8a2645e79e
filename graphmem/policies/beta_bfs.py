"""Posterior-mean-prioritised BFS: GraphMemory Algorithm 1 (Appendix B.2), with exploring rankings.

Entries start at depth 0 in a FIFO queue. Pop ``(v, d)``; if ``v`` is not visited, mark it
visited; if ``tokens(L || [v]) <= max_tokens`` append ``v`` to the loaded list ``L`` and, when
``d < max_hops``, push the ``top_k_neighbors`` out-neighbors ``u`` of ``v`` with the largest
edge score at depth ``d + 1``. Stop when ``|L| = max_nodes`` or the queue is empty. Parallel
edges ``v -> u`` of several relations count as one neighbor with the largest of their scores;
ties by ascending target string id. No fallback: no entries means nothing is loaded.

An edge's counters ``(S, F)`` are the Beta posterior ``Beta(α, β)`` with ``α = S + 1``,
``β = F + 1`` (a uniform prior). The score (``ranking``) is one of

    mean       w = α / (α + β) = (S + 1) / (S + F + 2)                 (GraphMemory eq. 19)
    ucb        w = α / (α + β) + c · sqrt(α β / ((α + β)² (α + β + 1)))  (mean + c · posterior std)
    thompson   w = θ,  θ ~ Beta(α, β)  (θ = X / (X + Y), X ~ Gamma(α), Y ~ Gamma(β))

``mean`` is GraphMemory's ranking and the default. The posterior mean does not reward
uncertainty: an edge never traversed keeps ``w = 1/2`` however many well-known edges sit just
above it (GraphMemory §5). ``ucb`` adds ``c`` posterior standard deviations, so a rarely observed
edge outranks a slightly better-known one; ``thompson`` ranks by one posterior draw per edge and
query, drawn from the policy's seeded generator (same seed and same calls: same retrievals).
Both are meant for collecting feedback; evaluation ranks by the mean.

With ``mean`` the neighbor choice does not depend on the query, so the top-k neighbors of every
node are one cached table; ``ucb`` and ``thompson`` score the out-edges of the expanded nodes
level by level (a Thompson draw per query). The queue runs for all queries at once as tensor
levels (:func:`~graphmem.policies.batched.level_bfs`).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.policies.base import Budget, RetrievalBatch, Scope, TraversalPolicy, register_policy, resolve_device
from graphmem.policies.batched import csr_values, level_bfs, rank_in_group
from graphmem.policies.selectors import SelectorSpec, make_entry_selector
from graphmem.policies.tables import (
    csr,
    dense_rows,
    distinct_neighbors,
    edge_targets,
    first_occurrence,
    kept,
    node_id_rank,
    token_counts,
)

RANKINGS = ("mean", "ucb", "thompson")


@register_policy("beta_bfs")
class BetaBFS(TraversalPolicy):
    """GraphMemory's bounded Beta BFS (Algorithm 1; see module docstring for the rankings).

    Args:
        entry_selector: entry selector name or instance (default: ``"embedding"``).
        device: where the traversal runs (default: ``"cpu"``).
        ranking: neighbor score: ``mean`` (GraphMemory), ``ucb`` or ``thompson`` (default: ``"mean"``).
        ucb_c: ``c``, posterior standard deviations added by ``ucb`` (default: 1.0).
        seed: seed of the generator of ``thompson``'s draws (default: 0).
    """

    def __init__(
        self,
        entry_selector: SelectorSpec = "embedding",
        device: str | torch.device = "cpu",
        ranking: str = "mean",
        ucb_c: float = 1.0,
        seed: int = 0,
    ) -> None:
        if ranking not in RANKINGS:
            raise ValueError(f"BetaBFS.ranking must be one of {RANKINGS}, got {ranking!r}")
        if not ucb_c >= 0:
            raise ValueError(f"BetaBFS.ucb_c must be >= 0, got {ucb_c!r}")
        self.device = resolve_device(device)
        self.entry_selector = make_entry_selector(entry_selector)
        self.ranking, self.ucb_c, self.seed = ranking, float(ucb_c), int(seed)
        self._generators: dict[str, torch.Generator] = {}

    def traverse(self, scope: Scope, entries: Tensor, budget: Budget) -> RetrievalBatch:
        graph, k = scope.graph, budget.top_k_neighbors
        if self.ranking == "mean":
            target, edge = top_neighbors(graph, k, scope.device)
            expand = lambda _, v: (target[v], edge[v])  # noqa: E731
        else:
            expand = lambda _, v: top_children(graph, v, lambda e: self.edge_scores(graph, e), k)  # noqa: E731
        bfs = level_bfs(entries, token_counts(graph, scope.device), budget, expand)
        return bfs.result(graph, entries, budget)

    def edge_scores(self, graph: MemoryGraph, edges: Tensor) -> Tensor:
        """``[C]`` score of each edge of ``edges`` under :attr:`ranking` (module docstring); each
        call makes new Thompson draws."""
        deps = (graph.S, graph.F)
        counters = kept(graph, "policies.beta_counters", lambda: torch.stack(deps).double(), deps, edges.device)
        alpha, beta = counters[0, edges] + 1.0, counters[1, edges] + 1.0
        total = alpha + beta
        if self.ranking == "thompson":
            gen = self.generator(edges.device)
            x = torch._standard_gamma(alpha, generator=gen)
            y = torch._standard_gamma(beta, generator=gen)
            return x / (x + y)
        mean = alpha / total
        if self.ranking == "ucb":
            return mean + self.ucb_c * torch.sqrt(alpha * beta / (total * total * (total + 1.0)))
        return mean

    def generator(self, device: torch.device) -> torch.Generator:
        """The seeded generator of the Thompson draws on ``device`` (made on first use)."""
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.seed)
        return self._generators[key]


def top_children(graph: MemoryGraph, nodes: Tensor, score: Callable[[Tensor], Tensor], k: int) -> tuple[Tensor, Tensor]:
    """``([M, k] target, [M, k] edge)``: the first ``k`` distinct out-neighbors of each of ``nodes``
    ``[M]`` by decreasing ``score(edges)`` of the pair's best edge, ties by target string id;
    ``edge`` is that best edge (lowest id among equals); ``-1`` where a node has fewer. With the
    posterior mean as ``score`` this is :func:`top_neighbors` restricted to ``nodes``."""
    dev = nodes.device
    rowptr, perm = csr(graph, dev)
    seg, edge = csr_values(rowptr, perm, nodes)
    score = score(edge)
    dst = edge_targets(graph, dev)[edge]
    order = torch.argsort(edge, stable=True)  # sort keys from the last to the first: (seg, -score, id, edge)
    order = order[torch.argsort(node_id_rank(graph, dev)[dst[order]], stable=True)]
    order = order[torch.argsort(-score[order], stable=True)]
    order = order[torch.argsort(seg[order], stable=True)]
    rep = order[first_occurrence(seg[order] * max(graph.num_nodes, 1) + dst[order])]
    rank, _ = rank_in_group(seg[rep], nodes.numel())
    keep = rep[rank < k]
    target = torch.full((nodes.numel(), k), -1, dtype=torch.long, device=dev)
    best = torch.full_like(target, -1)
    target[seg[keep], rank[rank < k]] = dst[keep]
    best[seg[keep], rank[rank < k]] = edge[keep]
    return target, best


def top_neighbors(graph: MemoryGraph, k: int, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``([N, k] target, [N, k] edge)``: each node's first ``k`` distinct out-neighbors by posterior
    mean (:func:`~graphmem.policies.tables.distinct_neighbors`), ``-1`` where it has fewer. Cached
    until the edges or counters change (on ``device`` too, when given)."""

    def build() -> tuple[Tensor, Tensor]:
        rowptr, target, edge = distinct_neighbors(graph, by_weight=True)
        return dense_rows(rowptr, target, k, -1), dense_rows(rowptr, edge, k, -1)

    return kept(graph, f"policies.beta_bfs_top{k}", build, (graph.edge_index, graph.S, graph.F), device)
