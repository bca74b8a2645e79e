r"""Personalized PageRank by forward push (Andersen, Chung and Lang 2006), batched over queries.

The PPR vector of a query with restart distribution ``s`` (uniform over its entries) solves

    pi = alpha s + (1 - alpha) M pi,        M = P^T + s 1_D^T,

with ``P`` the row-stochastic transition of :func:`graphmem.policies.ppr.transition_matrix` and
``D`` its dangling nodes (their mass returns to ``s``, as in the power iteration). ``M`` is
column-stochastic, so ``G = alpha (I - (1 - alpha) M)^{-1}`` has non-negative columns that sum to one.

Forward push keeps an estimate ``p`` and a residual ``r`` (``p = 0``, ``r = s`` at the start) with
the invariant ``pi = p + G r``. A push at ``u`` moves ``alpha r_u`` into ``p_u`` and spreads
``(1 - alpha) r_u`` over ``M e_u`` (the out-edges of ``u``, or ``s`` when ``u`` is dangling):
``G (I - (1 - alpha) M) e_u = alpha e_u`` keeps the invariant. Every node with

    r_u >= epsilon * d_u,        d_u = max(out-degree of u, 1),

is pushed, all of them at once in a round (a synchronous sweep; the invariant and the bounds below
hold for any order), until none is left or after ``max_rounds`` rounds.

* **Cost.** A push at ``u`` reads ``d_u`` rows and moves ``alpha r_u >= alpha epsilon d_u`` into
  ``p``, whose total is at most 1, so the rows read by all pushes of one query are at most
  ``1 / (alpha epsilon)``: independent of ``N``. The state of a query is the pairs it touched.
* **Error.** ``pi - p = G r >= 0`` entrywise and ``||pi - p||_1 = ||r||_1``; at termination
  ``||r||_1 < epsilon * sum_{u: r_u > 0} d_u``. So ``0 <= pi_v - p_v <= ||r||_1`` for every node
  ``v``; :func:`forward_push` returns ``||r||_1`` of each query (the certificate).
* **Estimate.** ``G = alpha sum_k (1 - alpha)^k M^k >= alpha I``, so ``hat p = p + alpha r`` is a tighter
  lower bound: ``pi - hat p = (G - alpha I) r >= 0`` with ``||pi - hat p||_1 = (1 - alpha) ||r||_1``, at no
  extra reads. Retrieval ranks by ``hat p`` (a node holding residual only is a candidate too).

The state of all queries is one set of sorted keys ``query * N + node`` with their ``p`` and
``r``: each round gathers the CSR rows of the pushed pairs and merges the new residuals with
:func:`torch.unique` (sorted) and ``index_add_``, which sums in input order, so the result is
deterministic and a query's values do not depend on the other queries of the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from graphmem.policies.base import Budget, RetrievalBatch
from graphmem.policies.batched import csr_positions, csr_values, greedy_admit, rank_in_group
from graphmem.policies.subgraph import ball, lookup


class PushTable(NamedTuple):
    """The transition as CSR rows of positive-strength edges: ``rowptr [N+1]``, ``col [E+]``,
    ``prob [E+]`` float64 (``P[u, col]``), and ``cost [N]`` float64 (``d_u = max(out-degree, 1)``)."""

    rowptr: Tensor
    col: Tensor
    prob: Tensor
    cost: Tensor


def push_table(pt: Tensor, num_nodes: int) -> PushTable:
    """:class:`PushTable` from ``P^T`` (coalesced sparse COO ``[N, N]``, rows = targets)."""
    dst, src = pt.indices()
    order = torch.argsort(src * max(num_nodes, 1) + dst)
    counts = torch.bincount(src, minlength=num_nodes)
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(counts, 0)
    return PushTable(rowptr, dst[order], pt.values()[order], counts.clamp(min=1).double())


class PushResult(NamedTuple):
    """Per query the touched pairs, sorted by ``(query, node)``: ``query``, ``node``, pushed mass ``p``,
    residual ``r`` and the estimate ``hat p = p + alpha r`` (float64); ``residual_mass [B]`` is ``||r||_1`` of
    each query, ``rounds`` the sweeps run and ``rows_read [B]`` the CSR rows each query's pushes read
    (``sum d_u`` over its pushes)."""

    query: Tensor
    node: Tensor
    p: Tensor
    r: Tensor
    estimate: Tensor
    residual_mass: Tensor
    rounds: int
    rows_read: Tensor


def forward_push(
    table: PushTable,
    query: Tensor,
    node: Tensor,
    weight: Tensor,
    num_queries: int,
    alpha: float,
    epsilon: float,
    max_rounds: int = 10_000,
) -> PushResult:
    """Forward push (module docstring) for the restart pairs ``(query, node, weight)``: ``weight`` is
    ``s_q(node)`` (each query's weights sum to one, distinct pairs)."""
    n = table.rowptr.numel() - 1
    dev = query.device
    seed_key = query * n + node
    order = torch.argsort(seed_key)
    seed_key, seed_w = seed_key[order], weight[order].double()
    seed_ptr = torch.searchsorted(seed_key // n, torch.arange(num_queries + 1, device=dev))
    key, qry, node, r = seed_key, seed_key // n, seed_key % n, seed_w.clone()
    p = torch.zeros_like(r)
    rows_read = torch.zeros(num_queries, dtype=torch.float64, device=dev)
    rounds = 0
    while rounds < max_rounds:
        active = r >= epsilon * table.cost.index_select(0, node)
        pushed = active.nonzero().squeeze(1)
        if pushed.numel() == 0:
            break
        rounds += 1
        aq, av, ar = qry.index_select(0, pushed), node.index_select(0, pushed), r.index_select(0, pushed)
        p = p.index_add(0, pushed, alpha * ar)
        r = r.index_fill(0, pushed, 0.0)
        rows_read.index_add_(0, aq, table.cost.index_select(0, av))
        mass = (1.0 - alpha) * ar
        seg, pos = csr_positions(table.rowptr, av)
        new_q, new_v = [aq.index_select(0, seg)], [table.col.index_select(0, pos)]
        new_r = [mass.index_select(0, seg) * table.prob.index_select(0, pos)]
        dangling = table.rowptr.index_select(0, av + 1) == table.rowptr.index_select(0, av)
        if bool(dangling.any()):  # mass of a dangling node returns to its query's restart vector
            dq, dm = aq[dangling], mass[dangling]
            seg, at = csr_positions(seed_ptr, dq)
            new_q.append(dq[seg])
            new_v.append(seed_key[at] - dq[seg] * n)
            new_r.append(dm[seg] * seed_w[at])
        all_q, all_v = torch.cat([qry, *new_q]), torch.cat([node, *new_v])
        key, inverse = torch.unique(all_q * n + all_v, return_inverse=True)
        qry, node = key // n, key % n
        r = torch.zeros(key.numel(), dtype=torch.float64, device=dev).index_add_(0, inverse, torch.cat([r, *new_r]))
        p = torch.zeros_like(r).index_add_(0, inverse[: p.numel()], p)
    mass = torch.zeros(num_queries, dtype=torch.float64, device=dev).index_add_(0, qry, r)
    return PushResult(qry, node, p, r, p + alpha * r, mass, rounds, rows_read)


def push_retrieval(
    table: PushTable,
    entries: Tensor,
    budget: Budget,
    alpha: float,
    epsilon: float,
    max_rounds: int,
    id_rank: Tensor,
    tokens: Tensor,
    out_csr: tuple[Tensor, Tensor],
    edge_dst: Tensor,
) -> RetrievalBatch:
    """The ``ppr`` retrievals from :func:`forward_push`: for entry rows ``entries`` ``[B, K]`` (``-1``
    padded, restart uniform over each row's entries), the touched nodes (``hat p > 0``) within ``max_hops``
    hops of an entry (:func:`~graphmem.policies.subgraph.ball` over the positive-strength edges) by
    ``(-hat p, id_rank)``, loaded by :func:`_admit_windows`. Edges considered: the
    out-edges of the loaded nodes; traversed: those between two loaded nodes of the same query."""
    b, n, dev = entries.shape[0], table.rowptr.numel() - 1, entries.device
    q, slot = (entries >= 0).nonzero(as_tuple=True)
    seeds = entries[q, slot]
    weight = 1.0 / (entries >= 0).sum(1).double()[q]
    res = forward_push(table, q, seeds, weight, b, alpha, epsilon, max_rounds)
    bq, bn, bd = ball(table.rowptr, table.col, q, seeds, budget.max_hops, n)
    key = res.query * n + res.node
    near, at = lookup(bq * n + bn, key)
    keep = (res.estimate > 0) & near
    cq, cv, cp, cd = res.query[keep], res.node[keep], res.estimate[keep], bd[at[keep]]
    order = torch.argsort(id_rank[cv], stable=True)
    order = order[torch.argsort(-cp[order], stable=True)]
    order = order[torch.argsort(cq[order], stable=True)]
    cq, cv, cp, cd = cq[order], cv[order], cp[order], cd[order]
    col, counts = rank_in_group(cq, b)
    width = int(counts.max()) if cq.numel() else 0
    slots = torch.full((b, width), -1, dtype=torch.long, device=dev)
    slots[cq, col] = torch.arange(cq.numel(), device=dev)
    admit, used = _admit_windows(slots, tokens[cv], budget)
    taken = slots[admit]  # row-major: per query, in load order
    lq, lv = cq[taken], cv[taken]
    seg, edges = csr_values(*out_csr, lv)
    eq = lq[seg]
    loaded_keys, _ = torch.sort(lq * n + lv)
    hit, _ = lookup(loaded_keys, eq * n + edge_dst[edges])
    return RetrievalBatch(entries, used, lq, lv, cd[taken], (eq, edges), (eq[hit], edges[hit]), cp[taken])


def _admit_windows(slots: Tensor, tokens: Tensor, budget: Budget) -> tuple[Tensor, Tensor]:
    """:func:`~graphmem.policies.batched.greedy_admit` of the ranked candidates ``slots`` ``[B, W]``
    (indices into ``tokens``, ``-1`` padded at the end of each row), read in windows: the first
    ``max_nodes`` places, then four times as many each round, a row taking another window only while
    it is below ``max_nodes``, its last window held candidates only and its smallest candidate still
    fits. Returns ``(admitted [B, W] bool, used tokens [B])``."""
    (b, width), dev = slots.shape, slots.device
    admitted = torch.zeros(b, width, dtype=torch.bool, device=dev)
    used = torch.zeros(b, dtype=torch.long, device=dev)
    count = torch.zeros(b, dtype=torch.long, device=dev)
    smallest = int(tokens.min()) if tokens.numel() else 0
    rows, start, stop = torch.arange(b, device=dev), 0, min(width, budget.max_nodes)
    while rows.numel() and start < width:
        block = slots[rows, start:stop]
        valid = block >= 0
        admit, used_r, count_r = greedy_admit(tokens[block.clamp(min=0)], valid, used[rows], count[rows], budget)
        admitted[rows, start:stop] = admit
        used[rows], count[rows] = used_r, count_r
        rows = rows[(count_r < budget.max_nodes) & valid[:, -1] & (used_r + smallest <= budget.max_tokens)]
        start, stop = stop, min(width, 4 * stop)
    return admitted, used
