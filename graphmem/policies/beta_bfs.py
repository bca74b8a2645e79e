"""Posterior-mean-prioritised BFS: GraphMemory Algorithm 1 (Appendix B.2).

Entries start at depth 0 in a FIFO queue. Pop ``(v, d)``; if ``v`` is not visited, mark it
visited; if ``tokens(L || [v]) <= max_tokens`` append ``v`` to the loaded list ``L`` and, when
``d < max_hops``, push the ``top_k_neighbors`` out-neighbours ``u`` of ``v`` with the largest
posterior mean

    w(v, u) = (S + 1) / (S + F + 2)        (GraphMemory eq. 19)

(ties by ascending target string id) at depth ``d + 1``. Stop when ``|L| = max_nodes`` or the
queue is empty. Parallel edges ``v -> u`` of several relations count as one neighbour with the
largest of their weights. No fallback: no entries means nothing is loaded.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import (
    Budget,
    Query,
    Retrieval,
    TraversalPolicy,
    register_policy,
    resolve_device,
    share_wall_time,
)
from graphmem.policies.batched import (
    Scope,
    bfs_retrievals,
    entry_matrix,
    level_bfs,
    pad_rows,
    retrieve_union,
    scoped_entry_matrix,
)
from graphmem.policies.entries import (
    EntrySelector,
    graph_cached,
    graph_tables,
    make_entry_selector,
    node_id_rank,
    validate_entries,
)

# expand(v) -> (ids of every out-edge inspected, [(neighbour row, edge id), ...] to push in order)
Expand = Callable[[int], tuple[list[int], list[tuple[int, int]]]]


@dataclass
class BetaBFSConfig:
    """Hydra config of :class:`BetaBFS` (``configs/policy/beta_bfs.yaml``)."""

    name: str = "beta_bfs"
    """registered policy name"""
    entries: str = "embedding"
    """entry selector registered in ``ENTRY_SELECTORS``"""
    device: str = "cpu"
    """where the batched traversal runs (``cpu``, ``cuda``, ``cuda:1``, ...)"""


def bounded_bfs(graph: MemoryGraph, entries: Sequence[int], budget: Budget, expand: Expand) -> Retrieval:
    """The loop of Algorithm 1 with a pluggable neighbour choice ``expand``.

    Args:
        graph: the memory graph.
        entries: entry rows, pushed at depth 0 in this order.
        budget: hop, node and token limits.
        expand: returns the out-edges inspected at ``v`` and the ``(u, edge)`` pairs to push.

    The trace lists every inspected out-edge and, for each loaded non-entry node, the edge whose
    push loaded it.
    """
    tokens = graph_cached(graph, "policies.tokens_list", (), lambda: graph.node_tokens().tolist())
    queue: deque[tuple[int, int, int]] = deque((v, 0, -1) for v in entries)
    loaded: list[int] = []
    visited: set[int] = set()
    considered: list[int] = []
    traversed: list[int] = []
    used = max_depth = 0
    while queue and len(loaded) < budget.max_nodes:
        v, d, via = queue.popleft()
        if v in visited:
            continue
        visited.add(v)
        if used + tokens[v] > budget.max_tokens:
            continue
        loaded.append(v)
        used += tokens[v]
        max_depth = max(max_depth, d)
        if via >= 0:
            traversed.append(via)
        if d < budget.max_hops:
            inspected, chosen = expand(v)
            considered.extend(inspected)
            queue.extend((u, d + 1, e) for u, e in chosen)
    return Retrieval(
        loaded=loaded,
        entries=list(entries),
        edges_considered=considered,
        edges_traversed=traversed,
        loaded_tokens=used,
        max_depth=max_depth,
    )


def unique_neighbors_by_weight(graph: MemoryGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Out-neighbour table ordered for Algorithm 1, cached until ``S``/``F``/edges change.

    Returns numpy ``(rowptr [N+1], target [P], edge [P])`` over the ``P`` distinct pairs
    ``(v, u)``: the neighbours of ``v`` are ``target[rowptr[v]:rowptr[v+1]]`` by decreasing
    weight, ties by target string id; ``edge`` is the heaviest parallel edge (lowest id on ties).
    Query-independent, so it is built once for all queries.
    """

    def build():
        n, src, dst = graph.num_nodes, graph.edge_index[0], graph.edge_index[1]
        w = graph.posterior_mean
        order = torch.argsort(-w, stable=True)  # heaviest first, lowest edge id among equals
        order = order[torch.argsort((src * n + dst)[order], stable=True)]
        pair = (src * n + dst)[order]
        first = torch.ones(pair.numel(), dtype=torch.bool)
        first[1:] = pair[1:] != pair[:-1]
        rep = order[first]
        o = torch.argsort(node_id_rank(graph)[dst[rep]], stable=True)
        o = o[torch.argsort(-w[rep][o], stable=True)]
        o = o[torch.argsort(src[rep][o], stable=True)]
        rep = rep[o]
        rowptr = torch.zeros(n + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(src[rep], minlength=n), 0)
        return rowptr.numpy(), dst[rep].numpy(), rep.numpy()

    return graph_cached(graph, "policies.beta_bfs_table", (graph.edge_index, graph.S, graph.F), build)


def out_edge_lists(graph: MemoryGraph) -> tuple[np.ndarray, np.ndarray]:
    """numpy ``(rowptr, perm)`` of :meth:`MemoryGraph.csr` for fast slicing."""

    def build():
        rowptr, perm = graph.csr()
        return rowptr.numpy(), perm.numpy()

    return graph_cached(graph, "policies.csr_numpy", (graph.edge_index,), build)


@register_policy("beta_bfs")
class BetaBFS(TraversalPolicy):
    """GraphMemory's bounded posterior-mean BFS (Algorithm 1; see module docstring).

    Args:
        entries: entry selector name or instance (default: ``"embedding"``).
        device: where the batched traversal runs; the per-query reference stays on the CPU
            (default: ``"cpu"``).
    """

    def __init__(self, entries: str | EntrySelector = "embedding", device: str | torch.device = "cpu") -> None:
        self.entries = make_entry_selector(entries)
        self.device = resolve_device(device)

    # ------------------------------------------------------------------ reference: one query
    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """Per-query reference: reads each loaded node's out-edges and ranks them directly."""
        t0 = time.perf_counter()
        entries = validate_entries(graph, self.entries.select(graph, [query], budget)[0], budget)
        ids, S, F, dst = graph.node_ids, graph.S, graph.F, graph.edge_index[1]

        def expand(v: int):
            out = graph.out_edges(v)
            w = ((S[out] + 1.0) / (S[out] + F[out] + 2.0)).tolist()
            best: dict[int, tuple[float, int]] = {}
            for e, u, wu in zip(out.tolist(), dst[out].tolist(), w):
                if u not in best or wu > best[u][0]:  # out-edges come ordered by (target, edge id)
                    best[u] = (wu, e)
            ranked = sorted(best.items(), key=lambda item: (-item[1][0], ids[item[0]]))
            return out.tolist(), [(u, e) for u, (_, e) in ranked[: budget.top_k_neighbors]]

        result = bounded_bfs(graph, entries, budget, expand)
        result.wall_time_s = time.perf_counter() - t0
        return result

    # ------------------------------------------------------------------ batched
    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """All entries from one ``[B, D] x [D, N]`` matmul, then Algorithm 1 for all queries at once as
        ``[B, L]`` tensor levels over the query-independent top-k neighbour table
        (:func:`graphmem.policies.batched.level_bfs`)."""
        if not queries:
            return []
        t0 = time.perf_counter()
        entries = entry_matrix(self.entries, graph, queries, budget, self.device)
        return share_wall_time(self._traverse_batch(graph, entries, budget), t0)

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """All queries of all ``graphs`` in one batched call over their disjoint union: entries from
        each query's own component (:func:`~graphmem.policies.batched.scoped_entry_matrix`), then one
        :func:`~graphmem.policies.batched.level_bfs`, which never leaves a component."""

        def run(batch, flat, scope):
            entries = scoped_entry_matrix(self.entries, batch, flat, scope.comp, budget, self.device)
            return self._traverse_batch(batch.graph, entries, budget, scope)

        return retrieve_union(self, graphs, queries, budget, run)

    def traverse(self, graph: MemoryGraph, entries: Sequence[int], budget: Budget) -> Retrieval:
        """Algorithm 1 from given entry rows (lines 2-16), using the cached neighbour table.

        Invalid or repeated rows are discarded and at most ``budget.max_entries`` are kept.
        """
        t0 = time.perf_counter()
        result = self._traverse_batch(graph, pad_rows([validate_entries(graph, entries, budget)]), budget)[0]
        result.wall_time_s = time.perf_counter() - t0
        return result

    def traverse_batch(
        self, graph: MemoryGraph, entries: Tensor | Sequence[Sequence[int]], budget: Budget
    ) -> list[Retrieval]:
        """:meth:`traverse` for many entry lists at once; a ``[B, <=max_entries]`` tensor of valid,
        distinct rows (``-1`` padded, as :func:`~graphmem.policies.batched.entry_matrix` gives) is used as is."""
        if len(entries) == 0:
            return []
        t0 = time.perf_counter()
        if not isinstance(entries, Tensor):
            entries = pad_rows([validate_entries(graph, e, budget) for e in entries])
        return share_wall_time(self._traverse_batch(graph, entries.to(self.device), budget), t0)

    def _traverse_batch(
        self, graph: MemoryGraph, entries: Tensor, budget: Budget, scope: Scope | None = None
    ) -> list[Retrieval]:
        target, edge = top_neighbor_table(graph, budget.top_k_neighbors, entries.device)
        tokens, (out_ptr, perm) = graph_tables(graph, entries.device)
        bfs = level_bfs(entries, tokens, budget, lambda rows, nodes: (target[nodes], edge[nodes]))
        return bfs_retrievals(bfs, entries, budget, out_ptr, perm, scope)


def top_neighbor_table(graph: MemoryGraph, k: int, device: str | torch.device | None = None) -> tuple[Tensor, Tensor]:
    """``([N, k] target, [N, k] edge)``: the first ``k`` rows of :func:`unique_neighbors_by_weight`
    per node, ``-1`` where a node has fewer distinct out-neighbours. Query-independent and cached
    (on ``device`` too, when given)."""

    def build():
        rowptr, target, edge = (torch.from_numpy(a) for a in unique_neighbors_by_weight(graph))
        pos = rowptr[:-1, None] + torch.arange(k)
        ok = pos < rowptr[1:, None]
        pos = pos.clamp(max=max(target.numel() - 1, 0))
        if target.numel() == 0:
            return torch.full(pos.shape, -1, dtype=torch.long), torch.full(pos.shape, -1, dtype=torch.long)
        return torch.where(ok, target[pos], -1), torch.where(ok, edge[pos], -1)

    return graph_cached(graph, f"policies.beta_bfs_top{k}", (graph.edge_index, graph.S, graph.F), build, device)
