"""Tensor kernels shared by the batched policies: ragged CSR reads, budget admission, level-wise bounded BFS.

Every kernel works on all ``B`` queries of a call at once with ``[B, L]`` blocks whose width is
bounded by the budget (never by the graph size), so the cost of a batch after entry selection does
not grow with ``N``. The tests check the policies built on them against per-query reference
implementations (``scripts/benchmarks/policy_references.py``), trace included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from graphmem.core.csr import csr_positions  # noqa: F401  (re-exported for the policies)
from graphmem.core.graph import MemoryGraph
from graphmem.core.retrieval import Budget, RetrievalBatch
from graphmem.core.tokens import node_tokens
from graphmem.policies.tables import csr

if TYPE_CHECKING:
    pass

# expand(rows [M], nodes [M]) -> (targets [M, k], edges [M, k]): the children to push, -1 padded
ExpandBatch = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


# ---------------------------------------------------------------------------- ragged helpers
def csr_values(rowptr: Tensor, values: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`csr_positions` read through ``values``: ``(seg [C], values[pos] [C])`` (e.g. with
    ``values = perm`` of :func:`graphmem.core.graph.out_csr`, the out-edges of ``nodes``)."""
    seg, pos = csr_positions(rowptr, nodes)
    return seg, values[pos]


def segment_topk(score: Tensor, seg: Tensor, k: int) -> Tensor:
    """Positions of the ``k`` best (largest) scores of each segment (ties: earlier position first),
    grouped by segment, best first within a segment.

    When ``seg`` is non-decreasing (segments are contiguous runs, as :func:`csr_positions` gives) and
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


def compact_left(values: Tensor, *others: Tensor, keep: Tensor | None = None) -> tuple[Tensor, ...]:
    """Move the real entries of each row of ``values`` (``keep``, default ``values >= 0``) to the
    front (order kept), drop columns with none; ``others`` (same shape) are permuted alike."""
    keep = values >= 0 if keep is None else keep
    width = int(keep.sum(1).max()) if values.numel() else 0
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)[:, :width]
    return (values.gather(1, order),) + tuple(o.gather(1, order) for o in others)


# ---------------------------------------------------------------------------- budget admission
def load_under_budget(graph: MemoryGraph, ranked: Iterable[int], budget: Budget) -> tuple[list[int], int]:
    """Load nodes in ``ranked`` order, skipping any that would break the node or token budget."""
    tokens = node_tokens(graph)
    loaded, used, seen = [], 0, set()
    for v in ranked:
        if len(loaded) >= budget.max_nodes:
            break
        if v in seen:
            continue
        seen.add(v)
        t = int(tokens[v])
        if used + t <= budget.max_tokens:
            loaded.append(v)
            used += t
    return loaded, used


def load_rankings(
    scope, rankings: Sequence[tuple[Iterable[int], Mapping[int, float]]], budget: Budget
) -> RetrievalBatch:
    """Flat retrieval: query ``b`` of ``scope`` loads its ranking (rows of its own graph, best first)
    with :func:`load_under_budget`; ``rankings[b] = (rows, score of each ranked row)``, a row missing
    from the scores reporting 0. Entries are the first ``max_entries`` loaded nodes."""
    dev, queries, loaded, scores, used = scope.device, [], [], [], []
    for b, (rows, score) in enumerate(rankings):
        own = scope.batch.graphs[int(scope.comp[b])]
        picked, tokens = load_under_budget(own, rows, budget)
        queries += [b] * len(picked)
        loaded += picked
        scores += [float(score.get(v, 0.0)) for v in picked]
        used.append(tokens)
    query = torch.tensor(queries, dtype=torch.long, device=dev)
    local = torch.tensor(loaded, dtype=torch.long, device=dev)
    return RetrievalBatch(
        budget.max_entries,
        torch.tensor(used, dtype=torch.long, device=dev),
        query,
        local + scope.node_offset[query] if local.numel() else local,
        scores=torch.tensor(scores, dtype=torch.float32, device=dev),
    )


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

    def result(self, graph: MemoryGraph, entries: Tensor, budget: Budget) -> RetrievalBatch:
        """The retrievals with Algorithm 1's trace: ``edges_considered`` lists the CSR out-edges
        of every loaded node with depth ``< max_hops``, in load order; ``edges_traversed`` the
        pushing edge of every loaded non-entry node."""
        rows, cols = self.loaded.nonzero(as_tuple=True)
        nodes, via, depth = self.nodes[rows, cols], self.via[rows, cols], self.depth[rows, cols]
        inner = depth < budget.max_hops
        rowptr, perm = csr(graph, entries.device)
        seg, edges = csr_values(rowptr, perm, nodes[inner])
        moved = via >= 0
        return RetrievalBatch(
            entries, self.used, rows, nodes, depth, (rows[inner][seg], edges), (rows[moved], via[moved])
        )


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
