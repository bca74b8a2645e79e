"""Per-graph tables the policies share, built once by :func:`kept` and kept in the graph's derived tables
(:mod:`graphmem.core.derived`).

Each table depends on the graph only, never on a query, so a batch of queries (or many batches)
reads it without rebuilding; ``device`` keeps a copy where the batched path runs. Tables that
depend on ``S``/``F`` list them as dependencies, so an in-place counter update (eq. 21) rebuilds
them.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph, out_csr
from graphmem.core.tokens import node_tokens

Device = str | torch.device | None


def to_device(value: Any, device: Device) -> Any:
    """A tensor (or numpy array), or a tuple of them (other items unchanged), moved to ``device``."""
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value).to(device)
    if isinstance(value, tuple):
        moved = [to_device(v, device) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else tuple(moved)  # named tuples keep their type
    return value


def kept(graph: MemoryGraph, key: str, build: Callable[[], Any], deps: Sequence[Any] = (), device: Device = None):
    """``build()``, kept in ``graph.derived`` under ``key`` while ``deps`` are unchanged (and until the graph
    changes). With a non-CPU ``device``, a copy of the value (a tensor or a tuple of tensors) moved there is
    kept as well, so query batches find the graph's tables on their device."""
    if device is not None and torch.device(device).type != "cpu":
        moved = graph.derived.get(f"{key}@{device}", deps)
        if moved is None:
            cpu = kept(graph, key, build, deps)
            moved = graph.derived.put(f"{key}@{device}", to_device(cpu, device), deps)
        return moved
    value = graph.derived.get(key, deps)
    return value if value is not None else graph.derived.put(key, build(), deps)


def token_counts(graph: MemoryGraph, device: Device = None) -> Tensor:
    """``[N]`` long :func:`graphmem.core.tokens.node_tokens`, on ``device``."""
    return kept(graph, "policies.node_tokens", lambda: node_tokens(graph), (), device)


def csr(graph: MemoryGraph, device: Device = None) -> tuple[Tensor, Tensor]:
    """``(rowptr [N+1], perm [E])`` of :func:`graphmem.core.graph.out_csr`, on ``device``."""
    return kept(graph, "policies.csr", lambda: out_csr(graph), (graph.edge_index,), device)


def edge_targets(graph: MemoryGraph, device: Device = None) -> Tensor:
    """``[E]`` target row of every edge, on ``device``."""
    return kept(graph, "policies.edge_targets", lambda: graph.edge_index[1], (graph.edge_index,), device)


def edge_sources(graph: MemoryGraph, device: Device = None) -> Tensor:
    """``[E]`` source row of every edge, on ``device``."""
    return kept(graph, "policies.edge_sources", lambda: graph.edge_index[0], (graph.edge_index,), device)


GROW_IDS_ONE_BY_ONE = 64
"""at most this many appended ids are placed one by one in the sorted ids (more: the ids are sorted anew)"""


def node_id_rank(graph: MemoryGraph, device: Device = None) -> Tensor:
    """``[N]`` long: position of each node's string id in ascending string order (the tie-break).

    The sorted ids are kept across mutations (``graph.grown``): while the log holds only appended nodes since
    (:meth:`~graphmem.core.graph.MemoryGraph.rows_appended_since`; no event but a removal changes an id), a few
    at a time, each new id finds its place ``p`` among the earlier ids by binary search, and an earlier node's
    rank moves on by the new ids placed at or before it."""

    def build() -> Tensor:
        n, ids, held = graph.num_nodes, graph.node_ids, graph.grown.get("policies.id_rank")
        keeps = ("revise", "text", "meta", "edges")
        if held is not None and n - held[1] <= GROW_IDS_ONE_BY_ONE and graph.rows_appended_since(*held[:2], keeps):
            _, n0, ordered, rank = held
            new = sorted(range(n0, n), key=ids.__getitem__)
            at = torch.tensor([bisect.bisect_left(ordered, ids[i]) for i in new], dtype=torch.long)
            rank = torch.cat([rank + torch.searchsorted(at, rank, right=True), torch.empty(n - n0, dtype=torch.long)])
            rank[torch.tensor(new, dtype=torch.long)] = at + torch.arange(len(new))
            for i in new:
                bisect.insort(ordered, ids[i])
        else:
            order = sorted(range(n), key=ids.__getitem__)
            rank = torch.empty(n, dtype=torch.long)
            rank[torch.tensor(order, dtype=torch.long)] = torch.arange(n)
            ordered = [ids[i] for i in order]
        graph.grown["policies.id_rank"] = (len(graph.node_log), n, ordered, rank)
        return rank

    return kept(graph, "policies.id_rank", build, (), device)


def unit_embeddings(graph: MemoryGraph, device: Device = None) -> Tensor:
    """``[N, D]`` L2-normalised node embeddings (cached while the embedding tensor is unchanged). The rows are kept
    across mutations in a buffer with room to grow (``graph.grown``): when the graph has only grown since
    (:meth:`~graphmem.core.graph.MemoryGraph.appended_since`), only the new rows are normalised."""

    def build() -> Tensor:
        x, n, held = graph.embeddings, graph.num_nodes, graph.grown.get("policies.unit_embeddings")
        rows = n + n // 8 + 64  # a buffer's rows: an eighth spare, so that the next appends fit in it
        if held is not None and graph.appended_since(held[0]) and held[1].shape[1:] == x.shape[1:]:
            (_, n0, _), buf = held
            if buf.shape[0] < n:
                buf = torch.cat([buf[:n0], torch.empty(rows - n0, *x.shape[1:])])
        else:
            n0, buf = 0, torch.empty(rows, *x.shape[1:])
        torch.nn.functional.normalize(x[n0:].float(), dim=1, out=buf[n0:n])
        graph.grown["policies.unit_embeddings"] = (graph.log_mark(), buf)
        return buf[:n]

    return kept(graph, "policies.unit_embeddings", build, (graph.embeddings,), device)


def first_occurrence(key: Tensor) -> Tensor:
    """``[K]`` bool: whether each key is the first of its value in order."""
    order = torch.argsort(key, stable=True)
    sorted_key = key[order]
    first = torch.ones_like(key, dtype=torch.bool)
    first[order[1:]] = sorted_key[1:] != sorted_key[:-1]
    return first


def distinct_neighbors(
    graph: MemoryGraph, by_weight: bool = False, self_loops: bool = True, device: Device = None
) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct out-neighbors of every node: ``(rowptr [N+1], target [P], edge [P])`` over the
    ``P`` distinct pairs ``(v, u)``, the neighbors of ``v`` being ``target[rowptr[v]:rowptr[v+1]]``.

    Parallel edges ``v -> u`` of several relations count as one neighbor, represented by ``edge``.
    Without ``by_weight``: neighbors by ascending string id, ``edge`` the lowest edge id. With
    ``by_weight``: by decreasing posterior mean ``w = (S+1)/(S+F+2)`` of the pair's heaviest edge,
    ties by string id, ``edge`` that heaviest edge (lowest id among equals). ``self_loops=False``
    drops ``v -> v``. Sorting every edge by ``(v, -w, id rank of u, edge id)`` puts each pair's
    representative first among its edges, and the pairs in the order above.
    """

    def build() -> tuple[Tensor, Tensor, Tensor]:
        n, (src, dst) = graph.num_nodes, graph.edge_index
        edge = torch.arange(graph.num_edges)
        if not self_loops:
            edge = edge[src != dst]
        order = edge[torch.argsort(node_id_rank(graph)[dst[edge]], stable=True)]
        if by_weight:
            order = order[torch.argsort(-graph.posterior_mean[order], stable=True)]
        order = order[torch.argsort(src[order], stable=True)]
        rep = order[first_occurrence(src[order] * max(n, 1) + dst[order])]
        rowptr = torch.zeros(n + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(src[rep], minlength=n), 0)
        return rowptr, dst[rep], rep

    deps = (graph.edge_index, graph.S, graph.F) if by_weight else (graph.edge_index,)
    return kept(graph, f"policies.neighbors:{by_weight}:{self_loops}", build, deps, device)


def dense_rows(rowptr: Tensor, values: Tensor, width: int, fill: int) -> Tensor:
    """``[N, width]``: the first ``width`` values of each CSR row, ``fill`` past a row's end."""
    pos = rowptr[:-1, None] + torch.arange(width)
    if values.numel() == 0:
        return torch.full(pos.shape, fill, dtype=values.dtype)
    return torch.where(pos < rowptr[1:, None], values[pos.clamp(max=values.numel() - 1)], fill)
