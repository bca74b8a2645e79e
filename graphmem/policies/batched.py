"""Tensor kernels shared by the batched policies: budget admission, level-wise bounded BFS, traces.

Every kernel works on all ``B`` queries of one graph at once with ``[B, L]`` blocks whose width is
bounded by the budget (never by the graph size), so the cost of a batch after entry selection does
not grow with ``N``. The per-query reference implementations live in the policy files; the tests
check that these kernels reproduce them exactly, trace included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import accumulate
from typing import Callable, Sequence

import torch
from torch import Tensor

from graphmem.graph import MemoryGraph
from graphmem.graph_batch import GraphBatch, graph_batch
from graphmem.policies.base import Budget, Query, Retrieval, share_wall_time
from graphmem.policies.entries import (
    EmbeddingEntrySelector,
    EntrySelector,
    cosine_matrix,
    node_id_rank,
    scoped_cosine,
    scoped_topk,
    topk_by_score,
    validate_entries,
)

# expand(rows [M], nodes [M]) -> (targets [M, k], edges [M, k]): the children to push, -1 padded
ExpandBatch = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


# ---------------------------------------------------------------------------- ragged helpers
def split_list(flat: list, counts: Sequence[int]) -> list[list]:
    """Cut ``flat`` into consecutive pieces of the given lengths."""
    ends = list(accumulate(counts))
    return [flat[e - c : e] for e, c in zip(ends, counts)]


def segments(rowptr: Tensor, values: Tensor | None, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """Concatenated CSR rows of ``nodes`` ``[K]``: ``(seg [C], values[pos] [C])``, ``seg`` indexing ``nodes``
    (``values=None``: the positions ``pos`` themselves)."""
    start = rowptr[nodes]
    deg = rowptr[nodes + 1] - start
    seg = torch.repeat_interleave(torch.arange(nodes.numel(), device=nodes.device), deg)
    first = torch.cumsum(deg, 0) - deg
    pos = torch.arange(seg.numel(), device=nodes.device) - first[seg] + start[seg]
    return seg, pos if values is None else values[pos]


def segment_topk(score: Tensor, seg: Tensor, k: int) -> Tensor:
    """Positions of the ``k`` best (largest) scores of each segment (ties: earlier position first),
    grouped by segment, best first within a segment.

    When ``seg`` is non-decreasing (segments are contiguous runs, as :func:`segments` gives) and
    the runs are of similar length, the scores are laid out as a ``[segments, longest run]`` matrix
    and each row is sorted; otherwise two stable sorts of the flat scores are used.
    """
    if seg.numel() == 0:
        return seg.new_empty(0)
    counts = torch.bincount(seg)
    width = int(counts.max())
    if counts.numel() * width <= 8 * seg.numel() and bool((seg[1:] >= seg[:-1]).all()):
        first = torch.cumsum(counts, 0) - counts
        col = torch.arange(seg.numel(), device=seg.device) - first[seg]
        low = float("-inf") if score.is_floating_point() else torch.iinfo(score.dtype).min  # below every score
        mat = torch.full((counts.numel(), width), low, dtype=score.dtype, device=score.device)
        mat[seg, col] = score
        idx = torch.sort(mat, dim=1, descending=True, stable=True).indices[:, :k]
        return (first[:, None] + idx)[idx < counts[:, None]]
    order = torch.argsort(score, descending=True, stable=True)
    order = order[torch.argsort(seg[order], stable=True)]
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(order.numel(), device=score.device) - first[seg[order]]
    return order[rank < k]


def pad_rows(
    rows: Sequence[Sequence[int]], width: int | None = None, device: str | torch.device | None = None
) -> Tensor:
    """``[B, width]`` long with ``rows`` left-aligned and ``-1`` padding (on ``device``; default CPU)."""
    width = max((len(r) for r in rows), default=0) if width is None else width
    if not rows:
        return torch.empty(0, width, dtype=torch.long, device=device or "cpu")
    padded = [[int(v) for v in r] + [-1] * (width - len(r)) for r in rows]
    return torch.tensor(padded, dtype=torch.long, device=device or "cpu").view(len(rows), width)


def rank_in_group(group: Tensor, num_groups: int = 0) -> tuple[Tensor, Tensor]:
    """``(rank [K], counts [G])``: each item's place among the earlier items of its group
    ``group[i]`` (in order), and the number of items per group (at least ``num_groups`` groups)."""
    counts = torch.bincount(group, minlength=num_groups)
    order = torch.argsort(group, stable=True)
    rank = torch.empty_like(group)
    rank[order] = torch.arange(group.numel(), device=group.device) - (torch.cumsum(counts, 0) - counts)[group[order]]
    return rank, counts


def ragged_block(rows: Tensor, num_rows: int) -> Tensor:
    """``[num_rows, L]`` positions into ``rows`` laid out per row in their given order, ``-1`` padded.

    Item ``i`` lands in row ``rows[i]`` after the earlier items of that row; ``L`` is the largest row count.
    """
    col, counts = rank_in_group(rows, num_rows)
    block = torch.full((num_rows, int(counts.max()) if rows.numel() else 0), -1, dtype=torch.long, device=rows.device)
    block[rows, col] = torch.arange(rows.numel(), device=rows.device)
    return block


def compact_left(values: Tensor, *others: Tensor, keep: Tensor | None = None) -> tuple[Tensor, ...]:
    """Move the real entries of each row of ``values`` (``keep``, default ``values >= 0``) to the
    front (order kept), drop columns with none; ``others`` (same shape) are permuted alike."""
    keep = values >= 0 if keep is None else keep
    width = int(keep.sum(1).max()) if values.numel() else 0
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :width]
    return (values.gather(1, order),) + tuple(o.gather(1, order) for o in others)


# ---------------------------------------------------------------------------- entries
def entry_matrix(
    selector: EntrySelector,
    graph: MemoryGraph,
    queries: Sequence[Query],
    budget: Budget,
    device: str | torch.device | None = None,
) -> Tensor:
    """``[B, <=max_entries]`` entry rows (``-1`` padded) for all queries, on ``device`` (default CPU).

    The embedding selector's tie-aware top-k is used as a tensor directly (its rows are valid and
    distinct by construction), computed on ``device``; any other selector's lists go through
    :func:`validate_entries`.
    """
    if graph.num_nodes == 0:
        return torch.full((len(queries), 0), -1, dtype=torch.long, device=device)
    if type(selector) is EmbeddingEntrySelector:
        return topk_by_score(cosine_matrix(graph, queries, device), budget.max_entries, node_id_rank(graph, device))
    return pad_rows(
        [validate_entries(graph, e, budget) for e in selector.select(graph, queries, budget)], device=device
    )


def scoped_entry_matrix(
    selector: EntrySelector,
    batch: GraphBatch,
    queries: Sequence[Query],
    comp: Tensor,
    budget: Budget,
    device: str | torch.device | None = None,
) -> Tensor:
    """:func:`entry_matrix` over a graph batch: the entries of query ``b`` come from its own
    component ``comp[b]`` only, as union rows (``-1`` padded). The embedding selector ranks with
    :func:`scoped_cosine`; any other selector is asked once per component, over the component graph."""
    if type(selector) is EmbeddingEntrySelector:
        return scoped_topk(scoped_cosine(batch, queries, comp, device), budget.max_entries, batch, comp)
    rows: list[list[int]] = [[] for _ in queries]
    by_comp: dict[int, list[int]] = {}
    for i, c in enumerate(comp.tolist()):
        by_comp.setdefault(c, []).append(i)
    for c, idx in by_comp.items():
        graph, off = batch.graphs[c], int(batch.node_ptr[c])
        for i, picked in zip(idx, selector.select(graph, [queries[i] for i in idx], budget)):
            rows[i] = [v + off for v in validate_entries(graph, picked, budget)]
    return pad_rows(rows, budget.max_entries, device=device)


@dataclass
class Scope:
    """Where each query of a batched walk over a :class:`~graphmem.graph_batch.GraphBatch` belongs:
    ``comp[b]`` is the component of query ``b`` (non-decreasing: each component's queries are one run)."""

    batch: GraphBatch
    comp: Tensor


def query_spans(
    graph: MemoryGraph, b: int, scope: Scope | None, device: str | torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """``([B] first node row, [B] first edge id, [B] node count)`` of each query's own graph, on
    ``device``: its component of the scope's batch, or all of ``graph`` without a scope."""
    if scope is None:
        zero = torch.zeros(b, dtype=torch.long, device=device)
        return zero, zero, torch.full((b,), graph.num_nodes, dtype=torch.long, device=device)
    comp, batch = scope.comp.to(device), scope.batch
    return batch.node_ptr.to(device)[comp], batch.edge_ptr.to(device)[comp], batch.sizes.to(device)[comp]


def retrieve_union(
    policy,
    graphs: Sequence[MemoryGraph],
    queries: Sequence[Sequence[Query]],
    budget: Budget,
    run: Callable[[GraphBatch, list[Query], Scope], list[Retrieval]],
    solo_queries: int | None = None,
) -> list[list[Retrieval]]:
    """``policy.retrieve_graphs`` as one batched call: ``run(batch, flat queries, scope)`` over the
    disjoint union of ``graphs`` (:func:`~graphmem.graph_batch.graph_batch`), split back per graph.

    A graph with more than ``solo_queries`` queries (default: no limit) goes to
    ``policy.retrieve_batch`` by itself: its own batch is wide enough already; so does a graph that
    would be alone in the union.
    """
    if len(graphs) != len(queries):
        raise ValueError(f"retrieve_graphs: {len(graphs)} graphs but {len(queries)} query lists")
    together = [i for i, qs in enumerate(queries) if qs and (solo_queries is None or len(qs) <= solo_queries)]
    if len(together) < 2:
        together = []
    joined = set(together)
    out = [
        [] if i in joined else policy.retrieve_batch(g, qs, budget) for i, (g, qs) in enumerate(zip(graphs, queries))
    ]
    if together:
        t0 = time.perf_counter()
        batch = graph_batch([graphs[i] for i in together])
        counts = [len(queries[i]) for i in together]
        flat = [q for i in together for q in queries[i]]
        results = share_wall_time(run(batch, flat, Scope(batch, batch.query_components(counts))), t0)
        for i, rs in zip(together, split_list(results, counts)):
            out[i] = rs
    return out


# ---------------------------------------------------------------------------- budget admission
def greedy_admit(
    tokens: Tensor, valid: Tensor, used: Tensor, count: Tensor, budget: Budget
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`load_under_budget` for a ``[B, L]`` block, left to right per row.

    Item ``j`` of row ``b`` is admitted iff it is valid, ``count_b < max_nodes`` and
    ``used_b + t_j <= max_tokens``; then ``used_b += t_j`` and ``count_b += 1``. Where no token
    skip occurs the admitted items are exactly ``valid_j & (count_b + C_j <= max_nodes)`` with
    ``C = cumsum(valid)``, and they all fit iff ``used_b + cumsum(t * valid)_j <= max_tokens``; rows
    that fail this check (a skip happens) are scanned item by item, still batched over those rows.

    Returns ``(admitted [B, L] bool, used [B], count [B])``.
    """
    t = torch.where(valid, tokens, 0)
    admit = valid & (count[:, None] + valid.long().cumsum(1) <= budget.max_nodes)
    dirty = (admit & (used[:, None] + (t * admit).cumsum(1) > budget.max_tokens)).any(1)
    if bool(dirty.any()):
        rows = dirty.nonzero().flatten()
        u, c, tv, vv = used[rows].clone(), count[rows].clone(), tokens[rows], valid[rows]
        sub = torch.zeros_like(vv)
        for j in range(vv.shape[1]):
            ok = vv[:, j] & (c < budget.max_nodes) & (u + tv[:, j] <= budget.max_tokens)
            sub[:, j] = ok
            u += torch.where(ok, tv[:, j], 0)
            c += ok.long()
        admit[rows] = sub
    return admit, used + (t * admit).sum(1), count + admit.long().sum(1)


# ---------------------------------------------------------------------------- bounded BFS
@dataclass
class LevelBFS:
    """All popped queue items of a batched bounded BFS, levels concatenated along columns.

    ``nodes``/``via``/``depth``/``loaded`` are ``[B, T]``; row-major order of ``loaded`` is load order.
    """

    nodes: Tensor
    via: Tensor
    depth: Tensor
    loaded: Tensor
    used: Tensor


def level_bfs(entries: Tensor, tokens: Tensor, budget: Budget, expand: ExpandBatch) -> LevelBFS:
    """Algorithm 1's FIFO loop for ``B`` queries, processed one depth level at a time.

    The FIFO queue holds all depth-``d`` items before any depth-``d+1`` item, and a depth-``d+1``
    item is pushed by the ``d``-level node loaded just before, so level ``d+1`` is the concatenation,
    in load order, of the children of the level-``d`` loaded nodes. Within a level an item is
    popped (visited) unless an earlier item in this or a previous level carried the same node;
    popped items are admitted by :func:`greedy_admit`. Membership is tested against the popped
    items only (``[B, L, V]`` comparisons), so nothing of size ``N`` is allocated per query.
    """
    b, dev = entries.shape[0], entries.device
    cand, via = compact_left(entries, torch.full_like(entries, -1))
    used = torch.zeros(b, dtype=torch.long, device=dev)
    count = torch.zeros(b, dtype=torch.long, device=dev)
    levels: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
    popped = torch.empty(b, 0, dtype=torch.long, device=dev)
    for d in range(budget.max_hops + 1):
        if cand.shape[1] == 0:
            break
        valid = cand >= 0
        if popped.shape[1]:
            valid &= ~(cand[:, :, None] == popped[:, None, :]).any(2)
        same = cand[:, :, None] == cand[:, None, :]
        valid &= ~(same & torch.ones_like(same[0]).tril(-1)).any(2)
        admit, used, count = greedy_admit(tokens[cand.clamp(min=0)], valid, used, count, budget)
        levels.append((torch.where(valid, cand, -1), via, torch.full_like(cand, d), admit))
        popped = torch.cat([popped, cand], 1)
        if (
            d == budget.max_hops
            or budget.top_k_neighbors == 0
            or not bool(admit.any())
            or bool((count >= budget.max_nodes).all())
        ):
            break
        rows, pos = admit.nonzero(as_tuple=True)
        tgt, edge = expand(rows, cand[rows, pos])
        k = tgt.shape[1]
        nxt = torch.full((b, cand.shape[1] * k), -1, dtype=torch.long, device=dev)
        nxt_via = torch.full_like(nxt, -1)
        cols = pos[:, None] * k + torch.arange(k, device=dev)
        nxt[rows[:, None], cols] = tgt
        nxt_via[rows[:, None], cols] = edge
        cand, via = compact_left(nxt, nxt_via)
    if not levels:
        empty = torch.empty(b, 0, dtype=torch.long, device=dev)
        return LevelBFS(empty, empty, empty, empty.bool(), used)
    nodes, vias, depth, loaded = (torch.cat(parts, 1) for parts in zip(*levels))
    return LevelBFS(nodes, vias, depth, loaded, used)


def bfs_retrievals(
    bfs: LevelBFS, entries: Tensor, budget: Budget, out_ptr: Tensor, perm: Tensor, scope: Scope | None = None
) -> list[Retrieval]:
    """Retrieval objects with the Algorithm 1 trace, built from tensors with one ``tolist`` each.

    ``edges_considered`` lists the CSR out-edges (``out_ptr``/``perm``) of every loaded node with
    depth ``< max_hops``, in load order; ``edges_traversed`` the pushing edge of every loaded
    non-entry node. With a ``scope`` (a walk over a graph batch), rows and edge ids are given
    relative to each query's own component.
    """
    b = entries.shape[0]
    rows, cols = bfs.loaded.nonzero(as_tuple=True)
    nodes, via, depth = bfs.nodes[rows, cols], bfs.via[rows, cols], bfs.depth[rows, cols]
    inner = depth < budget.max_hops
    seg, edges = segments(out_ptr, perm, nodes[inner])
    moved = via >= 0
    via = via[moved]
    if scope is not None:
        node_off, edge_off, _ = query_spans(scope.batch.graph, b, scope, entries.device)
        nodes, via, edges = nodes - node_off[rows], via - edge_off[rows[moved]], edges - edge_off[rows[inner][seg]]
        entries = torch.where(entries >= 0, entries - node_off[:, None], -1)
    loaded = split_list(nodes.tolist(), torch.bincount(rows, minlength=b).tolist())
    traversed = split_list(via.tolist(), torch.bincount(rows[moved], minlength=b).tolist())
    considered = split_list(edges.tolist(), torch.bincount(rows[inner][seg], minlength=b).tolist())
    max_depth = torch.zeros(b, dtype=torch.long, device=rows.device).scatter_reduce(0, rows, depth, "amax").tolist()
    ent = entries.tolist()
    if bool((entries < 0).any()):
        ent = [[v for v in row if v >= 0] for row in ent]
    used = bfs.used.tolist()
    return [
        Retrieval(
            loaded=loaded[i],
            entries=ent[i],
            edges_considered=considered[i],
            edges_traversed=traversed[i],
            loaded_tokens=used[i],
            max_depth=max_depth[i],
        )
        for i in range(b)
    ]
