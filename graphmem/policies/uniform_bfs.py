"""Floor baseline: Algorithm 1 with the neighbour choice made uniformly at random.

Same entries, queue, visited set, hop/node/token budget and trace as :mod:`beta_bfs`; at each
expanded node, ``min(top_k_neighbors, deg)`` distinct out-neighbours (parallel edges counted once,
listed by ascending string id) are drawn uniformly without replacement with a
:class:`random.Random` seeded from ``blake2b(f"{seed}:{qid}")``. The draw depends only on the
query id and the graph, so results are deterministic and independent of batch order.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query, Retrieval, TraversalPolicy, register_policy
from graphmem.policies.beta_bfs import bounded_bfs, out_edge_lists
from graphmem.policies.entries import EntrySelector, graph_cached, make_entry_selector, node_id_rank, validate_entries


@dataclass
class UniformBFSConfig:
    """Hydra config of :class:`UniformBFS` (``configs/policy/uniform_bfs.yaml``)."""

    name: str = "uniform_bfs"
    """registered policy name"""
    seed: int = 0
    """mixed with each query id to seed that query's generator"""
    entries: str = "embedding"
    """entry selector registered in ``ENTRY_SELECTORS``"""


def query_seed(seed: int, qid: str) -> int:
    """Stable 64-bit seed from ``seed`` and the query id (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{qid}".encode(), digest_size=8).digest(), "little")


def unique_neighbors_by_id(graph: MemoryGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy ``(rowptr, target, edge)`` of distinct out-neighbours by ascending string id.

    ``edge`` is the lowest edge id among parallel edges. Depends on the structure only.
    """
    def build():
        n, src, dst = graph.num_nodes, graph.edge_index[0], graph.edge_index[1]
        order = torch.argsort(src * max(n, 1) + node_id_rank(graph)[dst], stable=True)
        pair = (src * max(n, 1) + dst)[order]
        first = torch.ones(pair.numel(), dtype=torch.bool)
        first[1:] = pair[1:] != pair[:-1]
        rep = order[first]
        rowptr = torch.zeros(n + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(src[rep], minlength=n), 0)
        return rowptr.numpy(), dst[rep].numpy(), rep.numpy()
    return graph_cached(graph, "policies.uniform_table", (graph.edge_index,), build)


@register_policy("uniform_bfs")
class UniformBFS(TraversalPolicy):
    """Bounded BFS with uniformly random neighbour choice (see module docstring).

    Args:
        seed: base seed mixed with each query id (default: ``0``).
        entries: entry selector name or instance (default: ``"embedding"``).
    """

    def __init__(self, seed: int = 0, entries: str | EntrySelector = "embedding") -> None:
        self.seed = int(seed)
        self.entries = make_entry_selector(entries)

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """Per-query reference: dedups and orders each node's out-edges directly."""
        t0 = time.perf_counter()
        entries = validate_entries(graph, self.entries.select(graph, [query], budget)[0], budget)
        rng = random.Random(query_seed(self.seed, query.qid))
        ids, dst = graph.node_ids, graph.edge_index[1]

        def expand(v: int):
            out = graph.out_edges(v).tolist()
            first: dict[int, int] = {}
            for e, u in zip(out, dst[out].tolist()):
                first.setdefault(u, e)  # out-edges come ordered by (target, edge id)
            neigh = sorted(first.items(), key=lambda item: ids[item[0]])
            picks = rng.sample(range(len(neigh)), min(budget.top_k_neighbors, len(neigh)))
            return out, [neigh[i] for i in picks]

        result = bounded_bfs(graph, entries, budget, expand)
        result.wall_time_s = time.perf_counter() - t0
        return result

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """Entries from one matmul; each query then walks the cached neighbour table with its own generator."""
        if not queries:
            return []
        t0 = time.perf_counter()
        entries = [validate_entries(graph, e, budget) for e in self.entries.select(graph, queries, budget)]
        shared = (time.perf_counter() - t0) / len(queries)
        rowptr, target, edge = unique_neighbors_by_id(graph)
        out_ptr, perm = out_edge_lists(graph)
        results = []
        for q, ent in zip(queries, entries):
            t1 = time.perf_counter()
            rng = random.Random(query_seed(self.seed, q.qid))

            def expand(v: int, rng=rng):
                a, b = rowptr[v], rowptr[v + 1]
                picks = rng.sample(range(b - a), min(budget.top_k_neighbors, b - a))
                return perm[out_ptr[v]:out_ptr[v + 1]].tolist(), [(int(target[a + i]), int(edge[a + i])) for i in picks]

            r = bounded_bfs(graph, ent, budget, expand)
            r.wall_time_s = time.perf_counter() - t1 + shared
            results.append(r)
        return results
