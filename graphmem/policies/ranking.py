"""Ranking helpers: cosine of queries to nodes, and a tie-aware top-k (ties by ascending string id).

:func:`scoped_cosine` scores each query of a graph batch against its own graph's nodes only;
:func:`topk_by_score` ranks any ``[B, W]`` score block deterministically.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from graphmem.core.graph import MemoryGraph
from graphmem.core.graph_batch import GraphBatch
from graphmem.core.retrieval import Query
from graphmem.policies.tables import Device, node_id_rank, unit_embeddings


def query_matrix(graph: MemoryGraph, queries: Sequence[Query]) -> Tensor:
    """``[B, D]`` L2-normalised query embeddings; raises if a dimension differs from the graph's."""
    rows, dim = [], graph.dim
    for q in queries:
        e = q.embedding.float().flatten()
        if e.numel() != dim:
            raise ValueError(f"query {q.qid!r}: embedding has {e.numel()} values, graph embeddings have {dim}")
        rows.append(e)
    if not rows:
        return torch.empty(0, graph.dim)
    return torch.nn.functional.normalize(torch.stack(rows), dim=1)


def cosine_matrix(graph: MemoryGraph, queries: Sequence[Query], device: Device = None) -> Tensor:
    """``[B, N]`` cosine similarity of every query to every node, one matmul (on ``device``; default CPU)."""
    x = unit_embeddings(graph, device)
    return query_matrix(graph, queries).to(x.device) @ x.T


def topk_by_score(scores: Tensor, k: int, id_rank: Tensor, col_offset: Tensor | None = None) -> Tensor:
    """``[B, min(k, N)]`` columns of the ``k`` highest scores per row, ties by ascending ``id_rank``.

    ``torch.topk`` does not order ties; this finds the ``k``-th value per row, keeps every column
    at or above it, and sorts those lexicographically by (row, -score, id rank). A score of
    ``-inf`` marks a column as absent (the padding of :func:`scoped_cosine`): such columns come
    last, in no particular order.

    Args:
        scores: ``[B, N]`` scores.
        k: columns to keep per row.
        id_rank: tie-break rank (lower first): column ``j`` of row ``b`` has rank
            ``id_rank[j + col_offset[b]]`` (``col_offset`` default: zeros).
    """
    b, n = scores.shape
    k = min(k, n)
    if k == 0 or b == 0:
        return torch.empty(b, k, dtype=torch.long, device=scores.device)
    # rows whose top k+1 values are strictly decreasing have a unique answer: plain topk order
    vals, cols = scores.topk(min(k + 1, n), dim=1)
    tied = ((vals[:, 1:] == vals[:, :-1]) & (vals[:, 1:] > float("-inf"))).any(1)
    if not bool(tied.any()):
        return cols[:, :k]
    out = cols[:, :k].clone()
    rows = tied.nonzero().flatten()
    out[rows] = _topk_with_ties(scores[rows], k, id_rank, None if col_offset is None else col_offset[rows])
    return out


def _topk_with_ties(scores: Tensor, k: int, id_rank: Tensor, col_offset: Tensor | None) -> Tensor:
    """:func:`topk_by_score` for rows that have ties among their top ``k + 1`` scores."""
    b = scores.shape[0]
    kth = scores.topk(k, dim=1).values[:, -1:]
    rows, cols = (scores >= kth).nonzero(as_tuple=True)
    vals = scores[rows, cols]
    if col_offset is not None:  # padding columns past the last node may be among the ties; their rank is irrelevant
        cols_rank = id_rank[(cols + col_offset[rows]).clamp(max=id_rank.numel() - 1)]
    else:
        cols_rank = id_rank[cols]
    order = torch.argsort(cols_rank, stable=True)
    order = order[torch.argsort(-vals[order], stable=True)]
    order = order[torch.argsort(rows[order], stable=True)]
    rows, cols = rows[order], cols[order]
    counts = torch.bincount(rows, minlength=b)
    starts = torch.cumsum(counts, 0) - counts
    keep = (torch.arange(rows.numel(), device=rows.device) - starts[rows]) < k
    return cols[keep].view(b, k)


def scoped_cosine(batch: GraphBatch, queries: Sequence[Query], counts: Sequence[int], device: Device = None) -> Tensor:
    """``[B, W]`` cosine of each query to the nodes of its own component of ``batch``.

    The queries of component ``c`` are ``counts[c]`` consecutive rows. Column ``j`` of such a row
    is union node ``node_ptr[c] + j``; ``W`` is the largest component and columns past a
    component's size hold ``-inf``. No query is scored against another component's nodes: the
    queries of each component are multiplied with that component's rows of the unit embeddings,
    the same matmul :func:`cosine_matrix` does on the component graph alone. A batch of one graph
    is :func:`cosine_matrix` itself.
    """
    if batch.num_graphs == 1:
        return cosine_matrix(batch.graph, queries, device)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    x = unit_embeddings(batch.graph, dev)
    q = query_matrix(batch.graph, queries).to(dev)
    scores = torch.full((len(queries), int(batch.sizes.max())), float("-inf"), device=dev)
    ptr, start = batch.node_ptr.tolist(), 0
    for g, c in enumerate(counts):
        if c:
            scores[start : start + c, : ptr[g + 1] - ptr[g]] = q[start : start + c] @ x[ptr[g] : ptr[g + 1]].T
        start += c
    return scores


def scoped_topk(scores: Tensor, k: int, batch: GraphBatch, node_offset: Tensor, sizes: Tensor) -> Tensor:
    """:func:`topk_by_score` over :func:`scoped_cosine`'s ``[B, W]`` scores, as union node rows.

    Ties go by ascending string id within the component; rows of a component with fewer than ``k``
    nodes are ``-1`` padded after the real ones. ``node_offset`` and ``sizes`` (``[B]``) are the
    first row and node count of each query's component.
    """
    rank = node_id_rank(batch.graph, scores.device)
    if batch.num_graphs == 1:
        return topk_by_score(scores, k, rank)
    top = topk_by_score(scores, k, rank, node_offset)
    return torch.where(top < sizes[:, None], top + node_offset[:, None], -1)
