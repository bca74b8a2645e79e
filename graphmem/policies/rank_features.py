"""The feature rows :class:`models.rank_head.RankHead` ranks a walk's list by, from the query and the graph only.

For query ``q`` (unit ``q̂``), its list ``L`` (the walk's loads; while training, also hard negatives:
the entry selector's next candidates after the entries, the nodes BM25 and dense rank just below
what the walk started from) and an item ``v`` with node embedding ``x̂_v``, ``N(v)`` the items of
``L`` adjacent to ``v`` in the graph (either direction), ``c_v = cos(q, x_v)``, ``s_v`` the walk's
score of ``v`` when it was loaded and ``λ_qv`` the lexical features of :mod:`graphmem.index.lexical_features`:

    f_v = [ c_v,  c_v − max_{u ∈ L} c_u,  λ_qv (5),
            s_v,  s_v − max_{u ∈ L} s_u,  1(loaded),  1(entry),  1(depth 1),  1(depth ≥ 2),
            1 / (1 + selector rank of v)   (entries and negatives; 0 for other loads),
            min(slot_v, 12) / 12           (load position; 1 for negatives),
            min(|N(v)|, 4) / 4,  max_{u ∈ N(v)} c_u,  max_{u ∈ N(v)} φ_bm25(q, u),
            1(some u ∈ N(v) is an entry),  max_{u ∈ N(v)} cos(x_u, x_v) ]

(``s``, depth and the flags are 0 for negatives; a max over an empty ``N(v)`` is 0). Nothing here
reads gold evidence: the same rows are computed when the router serves a query.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from graphmem.core.retrieval import group_by_query
from graphmem.index.lexical_features import Lexical, pair_features
from graphmem.policies.walk import WalkTables, has_pair
from models.rank_head import RankInputs
from models.walk_columns import host_array

NUM_RANK_FEATURES = 20
SLOT_SCALE = 12
NEIGHBOUR_SCALE = 4


def list_pairs(query: Tensor) -> tuple[Tensor, Tensor]:
    """Every ordered pair ``(i, j)``, ``i != j``, of items of one query (``query`` non-decreasing)."""
    b = int(query.max()) + 1 if query.numel() else 0
    counts = torch.bincount(query, minlength=b)
    start = torch.cumsum(counts, 0) - counts
    sq = counts * counts
    owner = torch.repeat_interleave(torch.arange(b, device=query.device), sq)
    local = torch.arange(int(sq.sum()), device=query.device) - torch.repeat_interleave(torch.cumsum(sq, 0) - sq, sq)
    n = counts[owner]
    i, j = local // n, local % n
    keep = i != j
    return (start[owner] + i)[keep], (start[owner] + j)[keep]


def _max_over(pair_values: Tensor, dst: Tensor, m: int) -> Tensor:
    """``[m]``: the largest of ``pair_values`` over the pairs ending at each item (0 where none does)."""
    out = torch.zeros(m, dtype=pair_values.dtype, device=pair_values.device)
    return out.scatter_reduce(0, dst, pair_values, "amax", include_self=False) if dst.numel() else out


def rank_inputs(
    tables: WalkTables,
    q: Tensor,
    lexical: Lexical,
    entries: Tensor,
    loaded: tuple[Tensor, Tensor, Tensor, Tensor],
    negatives: Tensor | None = None,
) -> RankInputs:
    """:class:`RankInputs` of every query's list (formulas: module docstring).

    Args:
        tables: the scope's walk tables (unit embeddings, pairs).
        q: ``[B, D]`` unit query embeddings.
        lexical: the queries' lexical inputs over the scope (query row ``b`` = query ``b``).
        entries: ``[B, E]`` the walk's entry rows in selector order (``-1`` padded).
        loaded: ``(query, node, depth, score)`` of the loaded items, grouped by query, in load order.
        negatives: ``[B, K]`` rows ranked by the selector right after the entries (``-1`` padded), or ``None``.
    """
    lq, ln, ld, ls = loaded
    dev = lq.device
    counts = torch.bincount(lq, minlength=q.shape[0])
    slot = torch.arange(lq.numel(), device=dev) - (torch.cumsum(counts, 0) - counts)[lq]
    e = entries.shape[1]
    is_entry = (ln[:, None] == entries[lq]) & (entries[lq] >= 0)
    entry_rank = torch.where(is_entry.any(1), is_entry.float().argmax(1), -1)
    parts = [(lq, ln, ld, ls.float(), torch.ones_like(lq, dtype=torch.bool), slot, entry_rank)]
    if negatives is not None and negatives.numel():
        nb, nj = (negatives >= 0).nonzero(as_tuple=True)
        nn_ = negatives[nb, nj]
        n = max(tables.num_nodes, 1)
        fresh = ~torch.isin(nb * n + nn_, lq * n + ln)  # a negative the walk loaded anyway is a load
        nb, nj, nn_ = nb[fresh], nj[fresh], nn_[fresh]
        neg = torch.zeros_like(nb)
        parts.append((nb, nn_, neg, neg.float(), neg.bool(), neg - 1, nj + e))
    query, node, depth, score, was_loaded, slot, sel_rank = (torch.cat(t) for t in zip(*parts))
    query, node, depth, score, was_loaded, slot, sel_rank = group_by_query(
        query, node, depth, score, was_loaded, slot, sel_rank
    )
    return _assemble(tables, q, lexical, query, node, depth, score, was_loaded, slot, sel_rank)


def _assemble(tables, q, lexical, query, node, depth, score, was_loaded, slot, sel_rank) -> RankInputs:
    """The feature rows of items already grouped by query (:func:`rank_inputs`)."""
    m, b = node.numel(), q.shape[0]
    x = tables.x[node]
    cos = (x * q[query]).sum(1)
    lex = pair_features(lexical, query, node).to(cos.dtype)
    neg_inf = torch.full((b,), float("-inf"), device=cos.device)
    best_cos = neg_inf.scatter_reduce(0, query, cos, "amax")
    best_s = neg_inf.scatter_reduce(0, query[was_loaded], score[was_loaded], "amax")
    s_rel = torch.where(was_loaded, score - best_s[query], 0.0)
    entry = was_loaded & (depth == 0)
    src, dst = list_pairs(query)
    adj = has_pair(tables, node[src], node[dst]) | has_pair(tables, node[dst], node[src])
    src, dst = src[adj], dst[adj]
    degree = torch.bincount(dst, minlength=m).to(cos.dtype)
    pair_cos = (x[src] * x[dst]).sum(1)
    features = torch.stack(
        [
            cos,
            cos - best_cos[query],
            *lex.unbind(1),
            score,
            s_rel,
            was_loaded.to(cos.dtype),
            entry.to(cos.dtype),
            (was_loaded & (depth == 1)).to(cos.dtype),
            (was_loaded & (depth >= 2)).to(cos.dtype),
            torch.where(sel_rank >= 0, 1.0 / (1.0 + sel_rank.clamp(min=0).to(cos.dtype)), 0.0),
            torch.where(slot >= 0, slot.clamp(min=0, max=SLOT_SCALE).to(cos.dtype) / SLOT_SCALE, 1.0),
            degree.clamp(max=NEIGHBOUR_SCALE) / NEIGHBOUR_SCALE,
            _max_over(cos[src], dst, m),
            _max_over(lex[src, 0], dst, m),
            _max_over(entry.to(cos.dtype)[src], dst, m),
            _max_over(pair_cos, dst, m),
        ],
        dim=1,
    )
    return RankInputs(features, query, node, was_loaded, slot, src, dst)


def one_query_rank_inputs(
    tables: WalkTables, q: Tensor, lex: Tensor, entries: Tensor, loaded: tuple[Tensor, Tensor, Tensor]
) -> RankInputs:
    """:func:`rank_inputs` of one query's list without negatives (what the router ranks when it serves one
    query): the same rows bit for bit, written column by column on the host, with work bounded by the list
    and its nodes' degrees.

    ``loaded`` is ``(node, depth, score)`` in load order and ``lex`` ``[L, 5]`` the items' ``λ_qv``
    (:func:`~graphmem.index.lexical_features.pair_features`, which computes each pair on its own, as the
    served walk's node columns hold it). The items need no sort (one query: already grouped); an item's
    selector rank is its first column among the entries; the adjacent pairs are read from each item's own
    out-pairs, in the list's ``(i, j)`` order, where :func:`rank_inputs` searches every ordered pair in the
    sorted pair keys; ``cos`` and the pair cosines are the same row-wise sums. Each column is
    :func:`_features`' arithmetic in float32 (differences from the largest, ``1 / (1 + rank)``,
    ``min(slot, 12) / 12``, ``min(degree, 4) / 4``) or an exact value (flags, maxima over neighbours).
    """
    node, depth, score = loaded
    nodes, m, dev = node.tolist(), node.numel(), node.device
    src, dst = _adjacent_items(tables, nodes)
    x = tables.x.index_select(0, node)
    cos = (x * q[:1]).sum(1)
    pair_cos = (x.index_select(0, src) * x.index_select(0, dst)).sum(1)
    f32 = np.float32
    f = np.zeros((m, NUM_RANK_FEATURES), dtype=f32)
    c, s = cos.cpu().numpy(), score.cpu().numpy().astype(f32)
    d, lex_ = depth.cpu().numpy(), lex.cpu().numpy().astype(f32)
    cols = entries[0].tolist()
    rank = np.array([cols.index(v) if v in cols else -1 for v in nodes], dtype=np.int64)
    f[:, 0], f[:, 1], f[:, 2:7] = c, c - c.max(initial=-np.inf), lex_
    f[:, 7], f[:, 8], f[:, 9] = s, s - s.max(initial=-np.inf), 1.0
    f[:, 10], f[:, 11], f[:, 12] = d == 0, d == 1, d >= 2
    f[:, 13] = np.where(rank >= 0, f32(1.0) / (f32(1.0) + np.maximum(rank, 0).astype(f32)), f32(0.0))
    f[:, 14] = np.minimum(np.arange(m), SLOT_SCALE).astype(f32) / f32(SLOT_SCALE)
    hs, hd = src.cpu().numpy(), dst.cpu().numpy()
    degree = np.bincount(hd, minlength=m)
    f[:, 15] = np.minimum(degree, NEIGHBOUR_SCALE).astype(f32) / f32(NEIGHBOUR_SCALE)
    for col, values in zip(range(16, 20), (c[hs], lex_[hs, 0], (d == 0)[hs].astype(f32), pair_cos.cpu().numpy())):
        top = np.full(m, -np.inf, dtype=f32)
        np.maximum.at(top, hd, values)
        f[:, col] = np.where(degree > 0, top, f32(0.0))
    features = torch.from_numpy(f).to(dev)
    query, slot, every = torch.zeros_like(node), torch.arange(m, device=dev), torch.ones_like(node, dtype=torch.bool)
    return RankInputs(features, query, node, every, slot, src, dst)


def _adjacent_items(tables: WalkTables, nodes: list[int]) -> tuple[Tensor, Tensor]:
    """``(src, dst)`` of every ordered pair ``(i, j)``, ``i != j``, of items whose nodes are adjacent in either
    direction, in :func:`list_pairs`' order (by ``i``, then ``j``), read from each item's own out-pairs."""
    rowptr, dst = host_array(tables.pairs.rowptr), host_array(tables.pairs.dst)
    at = np.asarray(nodes, dtype=np.int64)
    m = at.size
    start, count = rowptr[at], rowptr[at + 1] - rowptr[at]
    pos = np.repeat(start - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
    by_node = np.argsort(at, kind="stable")
    j = np.minimum(np.searchsorted(at[by_node], dst[pos]), max(m - 1, 0))
    hit = at[by_node][j] == dst[pos] if m else np.zeros(0, dtype=bool)
    adj = np.zeros((m, m), dtype=bool)
    adj[np.repeat(np.arange(m), count)[hit], by_node[j[hit]]] = True
    adj |= adj.T
    np.fill_diagonal(adj, False)
    src, dst_ = np.nonzero(adj)  # row-major: by i, then j
    device = tables.x.device
    return torch.from_numpy(src).to(device), torch.from_numpy(dst_).to(device)
