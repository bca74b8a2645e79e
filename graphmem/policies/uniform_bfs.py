"""Floor baseline: Algorithm 1 with the neighbour choice made uniformly at random.

Same entries, queue, visited set, hop/node/token budget and trace as :mod:`beta_bfs`; at each
expanded node ``v``, the ``min(top_k_neighbors, deg)`` distinct out-neighbours ``u`` (parallel edges
counted once, the lowest edge id kept) with the smallest priorities

    key_q(v, u) = splitmix64(s_q xor (v * c1) xor (u * c2)) >> 1,   s_q = blake2b(f"{seed}:{qid}")

(64-bit wrapping arithmetic; ties by ascending string id) are pushed in ascending key order. The
keys are a counter-based hash, so this is a uniform draw without replacement that depends only on
the query id, the graph and the seed: deterministic, independent of batch order, and computable
for all queries and nodes of a batch at once.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query, Retrieval, TraversalPolicy, register_policy
from graphmem.policies.batched import bfs_retrievals, entry_matrix, level_bfs, segment_topk, segments
from graphmem.policies.beta_bfs import bounded_bfs
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


_C1, _C2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def neighbor_priority(seed: np.ndarray, v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``key_q(v, u)`` of the module docstring, elementwise over uint64 arrays; int64 result in ``[0, 2^63)``."""
    with np.errstate(over="ignore"):
        x = seed.astype(np.uint64) ^ (v.astype(np.uint64) * _C1) ^ (u.astype(np.uint64) * _C2)
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(1)).astype(np.int64)


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
        seed = np.uint64(query_seed(self.seed, query.qid))
        ids, dst = graph.node_ids, graph.edge_index[1]

        def expand(v: int):
            out = graph.out_edges(v).tolist()
            first: dict[int, int] = {}
            for e, u in zip(out, dst[out].tolist()):
                first.setdefault(u, e)  # out-edges come ordered by (target, edge id)
            neigh = sorted(first.items(), key=lambda item: ids[item[0]])
            keys = neighbor_priority(np.full(len(neigh), seed), np.full(len(neigh), v), np.array([u for u, _ in neigh]))
            picks = sorted(range(len(neigh)), key=lambda i: (keys[i], i))[:budget.top_k_neighbors]
            return out, [neigh[i] for i in picks]

        result = bounded_bfs(graph, entries, budget, expand)
        result.wall_time_s = time.perf_counter() - t0
        return result

    def retrieve_batch(self, graph: MemoryGraph, queries: Sequence[Query], budget: Budget) -> list[Retrieval]:
        """Entries from one matmul; Algorithm 1 for all queries as tensor levels, each level's draws
        hashed for all (query, node, neighbour) triples at once."""
        if not queries:
            return []
        t0 = time.perf_counter()
        entries = entry_matrix(self.entries, graph, queries, budget)
        seeds = np.array([query_seed(self.seed, q.qid) for q in queries], dtype=np.uint64)
        rowptr, target, edge = (torch.from_numpy(a) for a in unique_neighbors_by_id(graph))
        k = budget.top_k_neighbors

        def expand(rows: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
            seg, pos = segments(rowptr, torch.arange(target.numel()), nodes)
            u = target[pos]
            keys = torch.from_numpy(neighbor_priority(seeds[rows[seg].numpy()], nodes[seg].numpy(), u.numpy()))
            kept = segment_topk(-keys, seg, k)
            owner = seg[kept]
            counts = torch.bincount(owner, minlength=nodes.numel())
            rank = torch.arange(kept.numel()) - (torch.cumsum(counts, 0) - counts)[owner]
            tgt = torch.full((nodes.numel(), k), -1, dtype=torch.long)
            via = torch.full_like(tgt, -1)
            tgt[owner, rank] = u[kept]
            via[owner, rank] = edge[pos[kept]]
            return tgt, via

        bfs = level_bfs(entries, graph.node_tokens(), budget, expand)
        out_ptr, perm = graph.csr()
        results = bfs_retrievals(bfs, entries, budget, out_ptr, perm)
        per_query = (time.perf_counter() - t0) / len(queries)
        for r in results:
            r.wall_time_s = per_query
        return results
