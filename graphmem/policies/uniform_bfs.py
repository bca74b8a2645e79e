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
    query_spans,
    retrieve_union,
    scoped_entry_matrix,
    segment_topk,
    segments,
)
from graphmem.policies.beta_bfs import bounded_bfs
from graphmem.policies.entries import (
    EntrySelector,
    graph_cached,
    graph_tables,
    make_entry_selector,
    node_id_rank,
    validate_entries,
)


@dataclass
class UniformBFSConfig:
    """Hydra config of :class:`UniformBFS` (``configs/policy/uniform_bfs.yaml``)."""

    name: str = "uniform_bfs"
    """registered policy name"""
    seed: int = 0
    """mixed with each query id to seed that query's generator"""
    entries: str = "embedding"
    """entry selector registered in ``ENTRY_SELECTORS``"""
    device: str = "cpu"
    """where the batched traversal runs (``cpu``, ``cuda``, ...)"""


def query_seed(seed: int, qid: str) -> int:
    """Stable 64-bit seed from ``seed`` and the query id (not Python's salted ``hash``)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{qid}".encode(), digest_size=8).digest(), "little")


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as the unsigned ``value``."""
    return value - (1 << 64) if value >= 1 << 63 else value


_C1, _C2 = _signed(0x9E3779B97F4A7C15), _signed(0xC2B2AE3D27D4EB4F)
_M1, _M2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shift_right(x: Tensor, s: int) -> Tensor:
    """Logical right shift of the 64 bits of int64 ``x``."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def neighbor_priority(seed: Tensor, v: Tensor, u: Tensor) -> Tensor:
    """``key_q(v, u)`` of the module docstring, elementwise over int64 tensors holding the 64-bit
    words (``seed`` as :func:`_signed` of the unsigned seed); int64 result in ``[0, 2^63)``.

    int64 multiplication wraps modulo ``2^64`` and xor acts on the bits, so this is the unsigned
    arithmetic of the formula on any device.
    """
    x = seed ^ (v * _C1) ^ (u * _C2)
    x = (x ^ _shift_right(x, 30)) * _M1
    x = (x ^ _shift_right(x, 27)) * _M2
    x = x ^ _shift_right(x, 31)
    return _shift_right(x, 1)


def unique_neighbors_by_id(
    graph: MemoryGraph, device: str | torch.device | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """``(rowptr, target, edge)`` of distinct out-neighbours by ascending string id (on ``device``).

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
        return rowptr, dst[rep], rep

    return graph_cached(graph, "policies.uniform_table", (graph.edge_index,), build, device)


@register_policy("uniform_bfs")
class UniformBFS(TraversalPolicy):
    """Bounded BFS with uniformly random neighbour choice (see module docstring).

    Args:
        seed: base seed mixed with each query id (default: ``0``).
        entries: entry selector name or instance (default: ``"embedding"``).
        device: where the batched traversal runs; the per-query reference stays on the CPU
            (default: ``"cpu"``).
    """

    def __init__(
        self, seed: int = 0, entries: str | EntrySelector = "embedding", device: str | torch.device = "cpu"
    ) -> None:
        self.seed = int(seed)
        self.entries = make_entry_selector(entries)
        self.device = resolve_device(device)

    def retrieve(self, graph: MemoryGraph, query: Query, budget: Budget) -> Retrieval:
        """Per-query reference: dedups and orders each node's out-edges directly."""
        t0 = time.perf_counter()
        entries = validate_entries(graph, self.entries.select(graph, [query], budget)[0], budget)
        seed = _signed(query_seed(self.seed, query.qid))
        ids, dst = graph.node_ids, graph.edge_index[1]

        def expand(v: int):
            out = graph.out_edges(v).tolist()
            first: dict[int, int] = {}
            for e, u in zip(out, dst[out].tolist()):
                first.setdefault(u, e)  # out-edges come ordered by (target, edge id)
            neigh = sorted(first.items(), key=lambda item: ids[item[0]])
            keys = neighbor_priority(
                torch.full((len(neigh),), seed),
                torch.full((len(neigh),), v),
                torch.tensor([u for u, _ in neigh], dtype=torch.long),
            ).tolist()
            picks = sorted(range(len(neigh)), key=lambda i: (keys[i], i))[: budget.top_k_neighbors]
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
        entries = entry_matrix(self.entries, graph, queries, budget, self.device)
        return share_wall_time(self._walk(graph, queries, entries, budget), t0)

    def retrieve_graphs(
        self, graphs: Sequence[MemoryGraph], queries: Sequence[Sequence[Query]], budget: Budget
    ) -> list[list[Retrieval]]:
        """All queries of all ``graphs`` in one batched call over their disjoint union; each draw is
        hashed with the rows the nodes have in their own graph, so the draws are those of
        :meth:`retrieve_batch` on that graph."""

        def run(batch, flat, scope):
            entries = scoped_entry_matrix(self.entries, batch, flat, scope.comp, budget, self.device)
            return self._walk(batch.graph, flat, entries, budget, scope)

        return retrieve_union(self, graphs, queries, budget, run)

    def _walk(
        self, graph: MemoryGraph, queries: Sequence[Query], entries: Tensor, budget: Budget, scope: Scope | None = None
    ) -> list[Retrieval]:
        dev = self.device
        seeds = torch.tensor([_signed(query_seed(self.seed, q.qid)) for q in queries], dtype=torch.long, device=dev)
        rowptr, target, edge = unique_neighbors_by_id(graph, dev)
        tokens, (out_ptr, perm) = graph_tables(graph, dev)
        node_off = query_spans(graph, len(queries), scope, dev)[0]
        k = budget.top_k_neighbors

        def expand(rows: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
            seg, pos = segments(rowptr, None, nodes)
            u = target[pos]
            off = node_off[rows[seg]]
            keys = neighbor_priority(seeds[rows[seg]], nodes[seg] - off, u - off)
            kept = segment_topk(-keys, seg, k)
            owner = seg[kept]
            counts = torch.bincount(owner, minlength=nodes.numel())
            rank = torch.arange(kept.numel(), device=dev) - (torch.cumsum(counts, 0) - counts)[owner]
            tgt = torch.full((nodes.numel(), k), -1, dtype=torch.long, device=dev)
            via = torch.full_like(tgt, -1)
            tgt[owner, rank] = u[kept]
            via[owner, rank] = edge[pos[kept]]
            return tgt, via

        return bfs_retrievals(level_bfs(entries, tokens, budget, expand), entries, budget, out_ptr, perm, scope)
