"""Bounded neighbourhoods of ``(query, node)`` pairs, gathered from a CSR built once per graph.

A batch of queries keeps its per-query state sparse: the pairs it has touched, as sorted keys
``query * N + node``. Every function here allocates and scans only the rows of the nodes it is
given (``rowptr[v] .. rowptr[v + 1]``), never a tensor of size ``N`` or ``E``, so the work per
query depends on the neighbourhood it reads and not on the size of the graph.

* :func:`undirected_csr`: both directions of every edge, ``(rowptr [N+1], nbr [2E], edge [2E])``
  (cached per graph);
* :func:`ball`: the pairs within ``radius`` hops of each query's seeds, with their hop distance;
* :func:`relational_rows`: the CSR rows of some nodes read as the edges of the relational graph a
  message-passing reader runs on (each edge and, optionally, its inverse);
* :func:`layered_subgraphs`: per query, the nodes and edges each layer of an ``L``-layer reader needs
  to give target nodes their full-graph states (:mod:`graphmem.policies.gnn`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.policies.batched import csr_positions
from graphmem.policies.tables import edge_sources, kept


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

    return kept(graph, "policies.undirected_csr", build, (graph.edge_index,), device)


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


def relational_rows(
    graph: MemoryGraph, nodes: Tensor, incoming: bool, inverse: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The relational edges at ``nodes`` ``[K]``: ``(seg, other, edge, flipped)``, one row per edge,
    ``seg`` indexing ``nodes``.

    The relational graph holds every edge ``u -> v`` and, with ``inverse``, its inverse ``v -> u``
    (``flipped``; a reader gives it relation ``r + R``). With ``incoming`` the rows are the relational
    in-edges ``other -> nodes[seg]``, else the out-edges ``nodes[seg] -> other``. Read from the
    :func:`undirected_csr` rows of ``nodes``: an entry there is the edge itself when it points the
    asked way, else its inverse; a self-loop's two entries are the loop and its inverse.
    """
    dev = nodes.device
    rowptr, nbr, eid = undirected_csr(graph, dev)
    seg, pos = csr_positions(rowptr, nodes)
    v, other, edge = nodes[seg], nbr[pos], eid[pos]
    starts_at_v = edge_sources(graph, dev).index_select(0, edge) == v
    flipped = starts_at_v if incoming else ~starts_at_v
    loop = other == v
    if bool(loop.any()):  # the second of a loop's two (identical) entries is its inverse
        prev = (pos - 1).clamp(min=0)
        second = (pos > rowptr[v]) & (nbr[prev] == other) & (eid[prev] == edge)
        flipped = torch.where(loop, second, flipped)
    if not inverse:
        keep = ~flipped
        seg, other, edge, flipped = seg[keep], other[keep], edge[keep], flipped[keep]
    return seg, other, edge, flipped


def relational_in_degree(graph: MemoryGraph, inverse: bool, device: str | torch.device | None = None) -> Tensor:
    """``[N]`` in-degree of every node in the relational graph (:func:`relational_rows`): its
    undirected degree with ``inverse``, else its in-degree. Cached per graph."""

    def build() -> Tensor:
        if inverse:
            return undirected_csr(graph)[0].diff()
        return torch.bincount(graph.edge_index[1], minlength=graph.num_nodes)

    return kept(graph, f"policies.relational_degree.{inverse}", build, (graph.edge_index,), device)


class LayeredSubgraphs(NamedTuple):
    """What an ``L``-layer reader reads to score some ``(query, node)`` targets: one part per query,
    local rows ``0 .. M-1``.

    ``query`` / ``node`` ``[M]``: each local row's query and global node, sorted by ``(query, node)``;
    ``seed`` ``[M]`` bool: the row is one of its query's seeds; ``degree`` ``[M]``: the node's in-degree in
    the whole relational graph; ``layers``: for layer ``l = 1 .. L``, ``(edge_index [2, E_l]`` in local
    rows, ``edge [E_l]`` global edge ids, ``flipped [E_l]`` bool: the inverse of the edge``)``;
    ``target`` ``[T]``: the local rows of the targets.
    """

    query: Tensor
    node: Tensor
    seed: Tensor
    degree: Tensor
    layers: list[tuple[Tensor, Tensor, Tensor]]
    target: Tensor


def layered_subgraphs(
    graph: MemoryGraph, query: Tensor, target: Tensor, seeds: Tensor, layers: int, inverse: bool = True
) -> LayeredSubgraphs:
    """The nodes and edges each layer of an ``L``-layer reader needs so that the targets
    ``(query, target)`` get their full-graph states, when the states start as zero outside the seeds
    (``seeds``: sorted keys ``query * N + node``), as a reader seeded at its entries does.

    ``S_L`` is the targets and ``S_{l-1}`` is ``S_l`` with the sources of the relational in-edges into
    it, so layer ``l`` needs the in-edges of ``S_l`` (``l >= 2``): by induction every node of ``S_l`` gets
    its full-graph state after ``l`` layers. Before layer 1 only the seeds hold non-zero states, and a
    message from a zero state is zero, so layer 1 needs only the seeds' out-edges into ``S_1`` (with each
    node's full in-degree for the mean). Per query, the edges read are those into ``L - 1`` undirected
    hops around its targets plus its seeds' own: bounded by the targets and the degrees, not by ``N``.
    """
    dev, n = query.device, graph.num_nodes
    need = torch.unique(query * n + target)  # S_L
    stages: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []  # (source key, target key, edge, flipped), layers L..2
    for _ in range(layers - 1):
        seg, other, edge, flipped = relational_rows(graph, need % n, incoming=True, inverse=inverse)
        owner = need[seg] // n
        stages.append((owner * n + other, need[seg], edge, flipped))
        need = torch.unique(torch.cat([need, owner * n + other]))  # S_{l-1}
    present, _ = lookup(torch.unique(need // n), seeds // n)
    seeds = seeds[present]  # the seeds of the queries asked about
    if layers > 0:
        seg, other, edge, flipped = relational_rows(graph, seeds % n, incoming=False, inverse=inverse)
        dst = seeds[seg] // n * n + other
        into, _ = lookup(need, dst)
        stages.append((seeds[seg][into], dst[into], edge[into], flipped[into]))
    keys = torch.unique(torch.cat([need, seeds]))
    stages.reverse()  # layer 1 first
    local = [
        (torch.stack([torch.searchsorted(keys, s), torch.searchsorted(keys, t)]), edge, flipped)
        for s, t, edge, flipped in stages
    ]
    node = keys % n
    return LayeredSubgraphs(
        query=keys // n,
        node=node,
        seed=lookup(seeds, keys)[0],
        degree=relational_in_degree(graph, inverse, dev).index_select(0, node),
        layers=local,
        target=torch.searchsorted(keys, query * n + target),
    )
