"""Bounded neighbourhoods of ``(query, node)`` pairs, gathered from a CSR built once per graph.

A batch of queries keeps its per-query state sparse: the pairs it has touched, as sorted keys
``query * N + node``. Every function here allocates and scans only the rows of the nodes it is
given (``rowptr[v] .. rowptr[v + 1]``), never a tensor of size ``N`` or ``E``, so the work per
query depends on the neighbourhood it reads and not on the size of the graph.

* :func:`undirected_csr`: both directions of every edge, ``(rowptr [N+1], nbr [2E], edge [2E])``
  (cached per graph);
* :func:`ball`: the pairs within ``radius`` hops of each query's seeds, with their hop distance;
* :func:`incident_edges`: the distinct edges with an endpoint in each query's node set;
* :func:`query_subgraphs`: the disjoint union, one part per query, of the edges incident to the
  ``radius``-ball around given target nodes: what a message-passing reader runs on
  (:mod:`graphmem.policies.gnn`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.policies.batched import csr_positions


def undirected_csr(graph: MemoryGraph, device: str | torch.device | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """``(rowptr [N+1], nbr [2E], edge [2E])``: row ``v`` lists every edge with an endpoint ``v`` (out-edges
    and in-edges, a self-loop twice) as its other endpoint ``nbr`` and its id ``edge``, by ``(nbr, edge)``.
    Built once per graph (cached, on ``device`` too when given)."""

    def build() -> tuple[Tensor, Tensor, Tensor]:
        n, (src, dst) = graph.num_nodes, graph.edge_index
        ids = torch.arange(graph.num_edges)
        row, nbr, edge = torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([ids, ids])
        order = torch.argsort((row * max(n, 1) + nbr) * max(graph.num_edges, 1) + edge)
        rowptr = torch.zeros(n + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(row, minlength=n), 0)
        return rowptr, nbr[order], edge[order]

    return graph.cached("policies.undirected_csr", build, (graph.edge_index,), device)


def ball(
    rowptr: Tensor, col: Tensor, query: Tensor, node: Tensor, radius: int, num_nodes: int
) -> tuple[Tensor, Tensor, Tensor]:
    """The pairs ``(q, v)`` with ``v`` at most ``radius`` CSR hops from a seed ``(q, s)``.

    Breadth first from the seed pairs: hop ``h`` is the set of rows ``col[rowptr[u]:rowptr[u+1]]`` of
    the hop-``h - 1`` pairs not seen before. Returns ``(query, node, dist)`` sorted by ``(query, node)``.
    """
    keys = torch.unique(query * num_nodes + node)
    dist = torch.zeros_like(keys)
    fq, fv = keys // num_nodes, keys % num_nodes
    for h in range(1, radius + 1):
        if fv.numel() == 0:
            break
        seg, pos = csr_positions(rowptr, fv)
        rq, rv = fq[seg], col[pos]
        reached, first = _first_of_each(rq * num_nodes + rv)
        new = ~torch.isin(reached, keys)
        fq, fv = rq[first[new]], rv[first[new]]
        keys, dist = torch.cat([keys, reached[new]]), torch.cat([dist, torch.full_like(fv, h)])
    order = torch.argsort(keys)
    keys, dist = keys[order], dist[order]
    return keys // num_nodes, keys % num_nodes, dist


def _first_of_each(keys: Tensor) -> tuple[Tensor, Tensor]:
    """``(distinct sorted keys, position in keys of one occurrence of each)``."""
    distinct, inverse = torch.unique(keys, return_inverse=True)
    first = torch.empty_like(distinct).scatter_(0, inverse, torch.arange(keys.numel(), device=keys.device))
    return distinct, first


def lookup(sorted_keys: Tensor, keys: Tensor) -> tuple[Tensor, Tensor]:
    """``(found [K] bool, position [K])`` of ``keys`` in the sorted, distinct ``sorted_keys``."""
    pos = torch.searchsorted(sorted_keys, keys).clamp(max=max(sorted_keys.numel() - 1, 0))
    found = sorted_keys[pos] == keys if sorted_keys.numel() else torch.zeros_like(keys, dtype=torch.bool)
    return found, pos


def incident_edges(rowptr: Tensor, edge: Tensor, query: Tensor, node: Tensor, num_edges: int) -> tuple[Tensor, Tensor]:
    """``(query, edge)``: the distinct edges of :func:`undirected_csr` rows ``node``, per query, sorted."""
    seg, pos = csr_positions(rowptr, node)
    keys = torch.unique(query[seg] * max(num_edges, 1) + edge[pos])
    return keys // max(num_edges, 1), keys % max(num_edges, 1)


class QuerySubgraphs(NamedTuple):
    """A disjoint union of one subgraph per query (local rows ``0 .. M-1``).

    ``query`` / ``node`` ``[M]``: the query and global node of each local row, sorted by
    ``(query, node)``; ``edge_index`` ``[2, E']`` local rows of the edges, ``edge`` ``[E']`` their
    global ids (features are read through them); ``target`` ``[T]``: the local rows of the targets.
    """

    query: Tensor
    node: Tensor
    edge_index: Tensor
    edge: Tensor
    target: Tensor


def query_subgraphs(graph: MemoryGraph, query: Tensor, target: Tensor, radius: int) -> QuerySubgraphs:
    """For target pairs ``(query, target)``: per query, the edges incident to the undirected ``radius - 1``-ball
    around its targets and their endpoints (for ``radius = 0``: the targets alone).

    Every node within ``radius - 1`` hops of a target keeps all its edges, so ``radius`` rounds of
    message passing along the edges and against them give each target the state of the full graph.
    """
    dev, n, e = query.device, graph.num_nodes, graph.num_edges
    rowptr, nbr, eid = undirected_csr(graph, dev)
    src, dst = graph.edge_index.to(dev)
    if radius > 0:
        bq, bn, _ = ball(rowptr, nbr, query, target, radius - 1, n)
        eq, edges = incident_edges(rowptr, eid, bq, bn, e)
    else:
        eq = edges = torch.empty(0, dtype=torch.long, device=dev)
    keys = torch.unique(torch.cat([query * n + target, eq * n + src[edges], eq * n + dst[edges]]))
    local = torch.stack([torch.searchsorted(keys, eq * n + src[edges]), torch.searchsorted(keys, eq * n + dst[edges])])
    return QuerySubgraphs(keys // n, keys % n, local, edges, torch.searchsorted(keys, query * n + target))
