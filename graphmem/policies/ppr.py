"""Personalized PageRank from the entry nodes over the typed, evidence-weighted graph.

Edge strength ``a_e = rho_{type(e)} * w_e`` with relation weight ``rho`` and posterior mean
``w_e = (S_e + 1) / (S_e + F_e + 2)`` (GraphMemory eq. 19; ``w_e = 1`` if ``use_posterior`` is
off). The row-stochastic transition is

    P[u, v] = sum_{e: u->v} a_e / sum_{e: u->*} a_e,

and a node with no positive out-strength is dangling (set ``D``). With restart vector ``r``
uniform over the query's entry nodes and restart probability ``alpha``, power iteration runs

    p <- (1 - alpha) P^T p + ((1 - alpha) * sum_{u in D} p_u + alpha) r,     p_0 = r,

i.e. dangling mass returns to the restart vector, so every iterate sums to one and the fixed
point solves ``(I - (1 - alpha)(P^T + r 1_D^T)) p = alpha r``. Each query column stops when
``||p_{t+1} - p_t||_1 < tol`` (or after ``max_iter``). Nodes within ``max_hops`` of an entry and
with ``p > 0`` are then loaded by decreasing ``p`` (ties by string id) under the budget;
``top_k_neighbors`` does not apply. Queries are batched as an ``[N, B]`` matrix and one sparse
``P^T`` product (``torch.sparse.mm`` on COO) per iteration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query, Retrieval, TraversalPolicy, load_under_budget, register_policy
from graphmem.policies.batched import segments
from graphmem.policies.entries import EntrySelector, graph_cached, make_entry_selector, node_id_rank, validate_entries


@dataclass
class PPRConfig:
    """Hydra config of :class:`PersonalizedPageRank` (``configs/policy/ppr.yaml``)."""

    name: str = "ppr"
    """registered policy name"""
    alpha: float = 0.15
    """restart probability (damping 1 - alpha = 0.85)"""
    tol: float = 1e-8
    """L1 change per query column below which power iteration stops"""
    max_iter: int = 200
    """most power-iteration steps"""
    relation_weights: dict[str, float] | None = None
    """multiplier per relation name (missing relations: 1.0)"""
    use_posterior: bool = True
    """scale edge strength by the Beta posterior mean"""
    chunk_size: int = 16
    """query columns iterated together (bounds memory on large graphs)"""
    entries: str = "embedding"
    """entry selector registered in ``ENTRY_SELECTORS``"""


def transition_matrix(graph: MemoryGraph, relation_weights: dict[str, float] | None = None,
                      use_posterior: bool = True) -> tuple[Tensor, Tensor]:
    """``(P^T as coalesced sparse COO [N, N] float64, dangling mask [N])`` (see module docstring).

    COO (not CSR) keeps each query column's product bit-identical whatever the batch size.
    """
    rho = torch.ones(len(graph.relations), dtype=torch.float64)
    for name, value in (relation_weights or {}).items():
        if name not in graph.relations:
            raise ValueError(f"relation_weights: unknown relation {name!r}; graph relations: {list(graph.relations)}")
        if value < 0:
            raise ValueError(f"relation_weights[{name!r}] = {value} must be >= 0")
        rho[graph.relations.index(name)] = float(value)
    n, (src, dst) = graph.num_nodes, graph.edge_index
    a = rho[graph.edge_type]
    if use_posterior:
        a = a * graph.posterior_mean.double()
    out_strength = torch.zeros(n, dtype=torch.float64).index_add_(0, src, a)
    dangling = out_strength <= 0
    keep = a > 0
    values = a[keep] / out_strength[src[keep]]
    pt = torch.sparse_coo_tensor(torch.stack([dst[keep], src[keep]]), values, (n, n), check_invariants=False)
    return pt.coalesce(), dangling


def hop_distance(adjacency_t: Tensor, restart: Tensor, max_hops: int) -> Tensor:
    """``[N, B]`` int: BFS hops from the support of each restart column (``max_hops + 1`` = farther)."""
    dist = torch.full(restart.shape, max_hops + 1, dtype=torch.long)
    frontier = restart > 0
    dist[frontier] = 0
    for h in range(1, max_hops + 1):
        reached = (adjacency_t @ frontier.double()) > 0
        frontier = reached & (dist > h)
        dist[frontier] = h
    return dist


@register_policy("ppr")
class PersonalizedPageRank(TraversalPolicy):
    """Personalized PageRank from the entries, best nodes loaded under the budget.

    Args:
        alpha: restart probability (default: ``0.15``).
        tol: per-column L1 stopping tolerance (default: ``1e-8``).
        max_iter: most iterations (default: ``200``).
        relation_weights: multiplier per relation name (default: ``None``, all 1).
        use_posterior: multiply edge strength by the posterior mean (default: ``True``).
        chunk_size: query columns iterated together (default: ``16``).
        entries: entry selector name or instance (default: ``"embedding"``).
    """

    def __init__(self, alpha: float = 0.15, tol: float = 1e-8, max_iter: int = 200,
                 relation_weights: dict[str, float] | None = None, use_posterior: bool = True,
                 chunk_size: int = 16, entries: str | EntrySelector = "embedding") -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if chunk_size < 1 or max_iter < 1:
            raise ValueError("chunk_size and max_iter must be >= 1")
        self.alpha, self.tol, self.max_iter = float(alpha), float(tol), int(max_iter)
        self.relation_weights = dict(relation_weights or {})
        self.use_posterior, self.chunk_size = bool(use_posterior), int(chunk_size)
        self.entries = make_entry_selector(entries)

    def _matrix(self, graph: MemoryGraph) -> tuple[Tensor, Tensor]:
        name = f"policies.ppr_matrix:{sorted(self.relation_weights.items())}:{self.use_posterior}"
        return graph_cached(graph, name, (graph.edge_index, graph.edge_type, graph.S, graph.F),
                            lambda: transition_matrix(graph, self.relation_weights, self.use_posterior))

    def scores(self, graph: MemoryGraph, restart: Tensor) -> Tensor:
        """``[N, B]`` float64 PPR vectors for restart columns ``restart`` (each summing to 1)."""
        pt, dangling = self._matrix(graph)
        p = restart.clone()
        active = torch.arange(restart.shape[1])
        for _ in range(self.max_iter):
            if active.numel() == 0:
                break
            cur, r = p[:, active], restart[:, active]
            lost = cur[dangling].sum(0) if bool(dangling.any()) else torch.zeros(active.numel(), dtype=torch.float64)
            nxt = (1.0 - self.alpha) * (pt @ cur) + ((1.0 - self.alpha) * lost + self.alpha) * r
            p[:, active] = nxt
            active = active[(nxt - cur).abs().sum(0) >= self.tol]
        return p

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        return self.retrieve_batch(graph, [query], budget)[0]

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        if not queries:
            return []
        t0 = time.perf_counter()
        entries = [validate_entries(graph, e, budget) for e in self.entries.select(graph, queries, budget)]
        results: list[Retrieval] = []
        for start in range(0, len(entries), self.chunk_size):
            results += self._chunk(graph, entries[start:start + self.chunk_size], budget)
        per_query = (time.perf_counter() - t0) / len(queries)
        for r in results:
            r.wall_time_s = per_query
        return results

    def _chunk(self, graph: MemoryGraph, entries: list[list[int]], budget: Budget) -> list[Retrieval]:
        n, b = graph.num_nodes, len(entries)
        restart = torch.zeros(n, b, dtype=torch.float64)
        for j, ent in enumerate(entries):
            if ent:
                restart[torch.tensor(ent), j] = 1.0 / len(ent)
        p = self.scores(graph, restart)
        pt, _ = self._matrix(graph)
        dist = hop_distance(pt, restart, budget.max_hops)
        candidate = (p > 0) & (dist <= budget.max_hops)
        rank = node_id_rank(graph)
        out = []
        for j, ent in enumerate(entries):
            idx = candidate[:, j].nonzero().flatten()  # few nodes: those within max_hops of an entry
            order = torch.argsort(rank[idx], stable=True)
            order = order[torch.argsort(-p[idx[order], j], stable=True)]
            loaded, used = load_under_budget(graph, idx[order].tolist(), budget)
            out.append(self._trace(graph, ent, loaded, used, dist[:, j], p[:, j]))
        return out

    @staticmethod
    def _trace(graph: MemoryGraph, entries: list[int], loaded: list[int], used: int, dist: Tensor, p: Tensor) -> Retrieval:
        """Edges considered: out-edges of loaded nodes; traversed: those between two loaded nodes."""
        rowptr, perm = graph.csr()
        nodes = torch.tensor(loaded, dtype=torch.long)
        _, edges = segments(rowptr, perm, nodes)
        considered = edges.tolist()
        traversed = edges[torch.isin(graph.edge_index[1, edges], nodes)].tolist()
        return Retrieval(loaded=loaded, entries=list(entries), edges_considered=considered, edges_traversed=traversed,
                         loaded_tokens=used, max_depth=int(dist[loaded].max()) if loaded else 0,
                         scores=p[loaded].tolist() if loaded else [])
