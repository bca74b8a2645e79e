"""One query's node columns for the served walk: what :meth:`models.walk_scorer.WalkScorer.score` computes of a
candidate's target ``v``, computed once per query and node instead of once per candidate.

For query row 0 of a one-query context (``c*`` its entries' best cosine, ``N(v)`` the out-neighbours of ``v``)
the columns of node ``v`` are

    [cos(q, x_v), cos(q, x_v) - c*, max_w cos(q, x_w) - c*, mean_w cos(q, x_w) - c*, max_w cos(q, x_w) - cos(q, x_v)]
    (+ λ_qv, the 5 lexical features, with lexical inputs)   (+ ι_qv = (A q̂) · (B x̂_v), with rank > 0)

(``max`` and ``mean`` over ``w ∈ N(v)``; ``cos(q, x_v)`` itself where ``v`` has none). They are made one of two
ways, with the same values:

* **every node at once**, on graphs where the context holds the query's dense cosine row and at most
  :data:`~models.walk_scorer.SPAN_PAIRS` pairs: one pass over the pairs (the look-ahead of every node) and
  the lexical features of the nodes holding a query term;
* **the nodes asked for, when first asked**, on any other graph: the served walk asks for the targets of
  one expansion at a time, so a query computes the columns of at most ``max_entries + max_nodes`` × degree
  targets, each reading its own out-neighbours: work bounded by the budget and the degrees, never by the
  graph's size.

Why they are :meth:`~models.walk_scorer.WalkScorer.score`'s values, bit for bit: ``cos(q, x_v)`` is
:meth:`~models.walk_scorer._Context.cosine` (a lookup in the dense row, or the row-wise product sum, whose
rows do not depend on which rows are computed together); the look-ahead adds each ``v``'s ``cos(q, x_w)`` in
CSR order one float32 addition at a time (``index_add_``), as
:meth:`~models.walk_scorer.WalkScorer.look_ahead` does, takes the same exact maximum and divides by the
same count; :func:`~graphmem.index.lexical_features.pair_features` computes each (query, node) pair on its
own; and ``ι`` is a row-wise sum over the rank.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
from torch import Tensor

from graphmem.core.csr import csr_positions
from graphmem.index.lexical_features import query_features

SIMILARITY_COLUMNS = 5


def host_array(t: Tensor) -> np.ndarray:
    """``t`` as a NumPy array on the host: a view of a CPU tensor, else a copy kept on the tensor (per-graph
    tables are replaced, never changed in place, when the graph changes)."""
    if t.device.type == "cpu":
        return t.numpy()
    got = getattr(t, "_host_array", None)
    if got is None:
        got = t._host_array = t.cpu().numpy()
    return got


class NodeColumns:
    """The columns (module docstring) of one query's nodes, held on the host (the served walk assembles its
    candidates' feature rows there): ``host`` ``[R, K]``, row ``v`` for node ``v`` (every node at once) or the
    row ``row[v]`` (nodes computed when first asked for)."""

    def __init__(self, ctx, every_node: bool):
        # the context holds these columns: a weak reference back, so that the two are not a cycle that keeps
        # the graph's tables alive (a cycle waits for the cyclic collector; the tables of a graph written to
        # between reads would pile up until it runs)
        self.ctx, self.row = weakref.proxy(ctx), None if every_node else {}
        pairs = ctx.tables.pairs
        self.rowptr, self.dst = host_array(pairs.rowptr), host_array(pairs.dst)
        if every_node:
            lex = every_node_lexical(ctx) if ctx.lexical is not None else None
            sims = _every_node_similarity(ctx)
            self.host = self._columns(ctx, sims.detach().cpu().numpy(), None, lex)
        else:
            self.host = np.empty((0, self.width(ctx)), dtype=np.float32)
            self.slots, self.held, self.touched = None, np.empty(0, dtype=np.float32), []

    @staticmethod
    def width(ctx) -> int:
        return SIMILARITY_COLUMNS + (5 if ctx.lexical is not None else 0) + (1 if ctx.qa is not None else 0)

    def span(self, lo: int, hi: int) -> np.ndarray:
        """``[hi - lo, K]`` the columns of the targets of pairs ``lo:hi``."""
        kids = self.dst[lo:hi]
        rows = kids if self.row is None else self._rows(kids.tolist())
        return self.host[rows]

    def node(self, v: int) -> np.ndarray:
        """``[K]`` the columns of node ``v``."""
        r = v if self.row is None else self._rows([v])[0]
        return self.host[r]

    def nodes(self, nodes: list[int]) -> np.ndarray:
        """``[len(nodes), K]`` the columns of ``nodes``."""
        rows = nodes if self.row is None else self._rows(nodes)
        return self.host[rows]

    def _rows(self, nodes: list[int]) -> list[int]:
        """The rows of ``nodes``, computing the columns of those not yet held (one batch)."""
        row = self.row
        new = [v for v in dict.fromkeys(nodes) if v not in row]
        if new:
            start = self.host.shape[0]
            self.host = np.concatenate([self.host, self._computed(new)])
            row.update(zip(new, range(start, start + len(new))))
        return [row[v] for v in nodes]

    def _computed(self, nodes: list[int]) -> np.ndarray:
        """The columns of ``nodes`` (distinct), from their own out-neighbours only: the look-ahead's float32
        sums one addition at a time in CSR order (``index_add_``), its exact maxima and the same divisions and
        differences as :func:`_similarity`, on the host."""
        at = np.asarray(nodes, dtype=np.int64)
        start, count = self.rowptr[at], self.rowptr[at + 1] - self.rowptr[at]
        pos = np.repeat(start - np.cumsum(count) + count, count) + np.arange(int(count.sum()))
        cos = self._cosines(np.concatenate([at, self.dst[pos]]))
        k, seg = at.size, torch.from_numpy(np.repeat(np.arange(at.size), count))
        own, cos_w = cos[:k], torch.from_numpy(cos[k:])
        total = torch.zeros(k, dtype=cos_w.dtype).index_add_(0, seg, cos_w).numpy()
        best = torch.full((k,), float("-inf"), dtype=cos_w.dtype).scatter_reduce_(0, seg, cos_w, "amax").numpy()
        has, ref = count > 0, own.dtype.type(self.ctx.ref[0].item())
        best = np.where(has, best, own)
        mean = np.where(has, total / np.maximum(count, 1).astype(own.dtype), own)
        sims = np.stack([own, own - ref, best - ref, mean - ref, best - own], -1)
        return self._columns(self.ctx, sims, torch.from_numpy(at).to(self.ctx.ref.device))

    def _cosines(self, ids: np.ndarray) -> np.ndarray:
        """``cos(q, x_v)`` of ``ids`` (:meth:`~models.walk_scorer._Context.cosine_one`), each node's computed once
        per query and kept: ``held[slots[v]]``, ``slots`` a per-graph ``[N]`` array of ``-1`` lent to this query
        (:meth:`release` puts back the ``-1`` of the nodes it touched and returns it)."""
        ctx = self.ctx
        if ctx.cos is not None:  # the dense row: a lookup
            return ctx.cos[0].detach().cpu().numpy()[ids]
        if self.slots is None:
            pool = _slot_pool(ctx.tables.pairs)
            self.slots = pool.pop() if pool else np.full(ctx.tables.num_nodes, -1, dtype=np.int32)
        at = self.slots[ids]
        new = ids[at < 0]
        if new.size:
            self.touched.append(new)  # before any slot is written: release() resets every one written
            mark = np.arange(new.size, dtype=np.int32)
            self.slots[new] = mark
            # each new node once (the occurrence whose mark its slot kept), by row (the gathers in memory order)
            new = np.sort(new[self.slots[new] == mark])
            got = ctx.cosine_one(torch.from_numpy(new).to(ctx.ref.device)).detach().cpu().numpy()
            self.slots[new] = np.arange(self.held.size, self.held.size + new.size, dtype=np.int32)
            self.held = np.concatenate([self.held, got])
            at = self.slots[ids]
        return self.held[at]

    def release(self) -> None:
        """Give the per-graph slot array back, every entry ``-1`` again (see :meth:`_cosines`)."""
        if getattr(self, "slots", None) is not None:
            for nodes in self.touched:
                self.slots[nodes] = -1
            _slot_pool(self.ctx.tables.pairs).append(self.slots)
            self.slots, self.touched = None, []

    @staticmethod
    def _columns(ctx, sims: np.ndarray, nodes: Tensor | None, lex: Tensor | None = None) -> np.ndarray:
        """``sims`` ``[k, 5]`` of ``nodes`` (``None``: every node) with their ``λ_qv`` (``lex``, else computed) and
        ``ι_qv`` columns appended, when the context has them."""
        parts = [sims]
        if ctx.lexical is not None:
            lex = lex if lex is not None else query_features(ctx.lexical, nodes)
            parts.append(lex.detach().cpu().numpy().astype(sims.dtype, copy=False))
        if ctx.qa is not None:
            xb = ctx.xb if nodes is None else ctx.xb.index_select(0, nodes)
            parts.append((ctx.qa[:1] * xb).sum(-1, keepdim=True).detach().cpu().numpy())
        return np.concatenate(parts, 1) if len(parts) > 1 else sims


def _slot_pool(pairs) -> list:
    """The ``[N]`` slot arrays of a graph's pair table not lent to a query (made on demand, one per query served
    at once, kept with the table: a new graph version starts with none)."""
    pool = pairs.__dict__.get("_slot_pool")
    if pool is None:
        pool = pairs._slot_pool = []
    return pool


def _similarity(ctx, own: Tensor, best: Tensor, total: Tensor, count: Tensor) -> Tensor:
    """``[k, 5]`` similarity columns from each node's ``cos(q, x_v)``, its out-neighbours' largest and summed
    ``cos(q, x_w)`` and their count, with :meth:`~models.walk_scorer.WalkScorer.look_ahead`'s arithmetic."""
    has, ref = count > 0, ctx.ref[0]
    best, mean = torch.where(has, best, own), torch.where(has, total / count.clamp(min=1), own)
    return torch.stack([own, own - ref, best - ref, mean - ref, best - own], -1)


def _every_node_similarity(ctx) -> Tensor:
    """``[N, 5]`` similarity columns of every node: the look-ahead over every pair at once (the same sums, in
    CSR order), from the dense cosine row; the counts are the out-degrees (exact integers, as sums of ones)."""
    pairs, cos = ctx.tables.pairs, ctx.cos[0]
    cos_w = cos.index_select(0, pairs.dst)
    count = pairs.rowptr.diff().to(cos.dtype)
    total = torch.zeros_like(cos).index_add_(0, pairs.src, cos_w)
    best = torch.full_like(cos, float("-inf")).scatter_reduce_(0, pairs.src, cos_w, "amax")
    return _similarity(ctx, cos, best, total, count)


def every_node_lexical(ctx) -> Tensor:
    """``[N, 5]`` :func:`~graphmem.index.lexical_features.pair_features` of query row 0 with every node, read from
    the postings of the query's terms in the sorted keys (one range per term): each entry ``(t, v)`` holds
    ``w(t, v)`` beside it, so the contributions are the ones ``pair_features`` finds by its binary searches.
    ``pair_features`` adds a node's contributions in the order of the node's own entries, which are sorted by
    vocabulary row (the BM25 index keeps each row's terms sorted); taking the terms by ascending row, each
    node's contributions arrive in that order, and ``index_add_`` adds them one float32 addition at a time in
    the order given. The same norms divide; a node holding none of the terms gets the same ``0 / norm``."""
    lex, n = ctx.lexical, ctx.tables.num_nodes
    table, terms = lex.nodes, lex.queries
    key, own = table.key, table.num_nodes
    held = (terms.row[0] >= 0).nonzero().flatten()
    rows, by_row = terms.row[0, held].sort()
    held, first = held[by_row], rows * own
    bounds = torch.stack([torch.searchsorted(key, first), torch.searchsorted(key, first + own)], 1)
    seg, pos = csr_positions(bounds.flatten(), torch.arange(0, 2 * held.numel(), 2, device=key.device))
    contrib = terms.value[0, held[seg]]
    contrib[:, 0] = contrib[:, 0] * table.key_weight[pos]
    out = contrib.new_zeros(n, contrib.shape[1]).index_add_(0, key[pos] - first[seg], contrib)
    return out / terms.norm[0]
