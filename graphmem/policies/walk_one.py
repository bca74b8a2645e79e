"""The greedy walk of :func:`graphmem.policies.walk.walk` for one query, as the router serves it.

:func:`~graphmem.policies.walk.walk` keeps a batch's candidate pool as ``[B, P]`` tensors and masks
it at every step; one query at question time needs none of that. :func:`walk_one` keeps the pool
as a max-heap of scores and loads exactly what the batched walk loads (same candidates, same
``scorer.score`` calls, the same tie order), at one heap pop and one ``score`` call per step.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from graphmem.core.budget import Budget
from graphmem.policies.walk import Candidates, CandidateScorer, WalkTables, WalkTrace


def walk_one(
    tables: WalkTables,
    scorer: CandidateScorer,
    q: Tensor,
    entries: Tensor,
    budget: Budget,
    ctx: Any = None,
    lexical: Any = None,
) -> WalkTrace:
    """The greedy walk of :func:`~graphmem.policies.walk.walk` for one query (``q`` ``[1, D]``, ``entries``
    ``[1, E]``), as its :class:`WalkTrace`: the question-time path, with the pool as a heap instead of
    ``[1, P]`` masks.

    It loads what :func:`walk` loads (``sample=False``, no ``blocked``): a candidate's score is computed
    once, when it is pushed, by the same ``scorer.score`` call on the same candidates; and every reason a
    candidate is closed (target loaded, parent out of children, tokens that no longer fit) lasts, since
    loads, children and tokens only grow. So the best open candidate is the top of a max-heap after
    popping the closed ones, ties going to the earlier pool slot as ``argmax`` does, and the walk stops
    when the stop logit beats it. Per step: one heap pop and one ``score`` call on the new node's
    out-pairs, without the ``[1, P]`` mask work of the batched loop. ``ctx`` and ``lexical`` are those of
    :func:`~graphmem.policies.walk.walk` (the query's lexical inputs reach ``scorer.prepare`` the same way).
    """
    with torch.no_grad():
        entries = entries[:, : budget.max_entries].to(q.device)
        if ctx is None:
            given = () if lexical is None else (lexical,)  # scorers that read no text take none
            ctx = scorer.prepare(tables, q, entries, *given)
        return _walk_one(tables, scorer, q, entries, budget, ctx)


@dataclass
class EntryCandidates(Candidates):
    """The entries of query row 0 as :class:`~graphmem.policies.walk.Candidates`, with their columns
    ``entry_cols``, which a scorer may score from per-query tables instead."""

    entry_cols: tuple[int, ...] = ()


class Expansion:
    """The candidates ``u -> dst[p]``, ``p in lo:hi``, of one loaded node ``u`` of query row 0 (depth ``depth``,
    order ``order``): :class:`~graphmem.policies.walk.Candidates` (its tensors made on first use) with
    ``span = (lo, hi, u, depth, order)``, which a scorer may score from per-query tables instead."""

    def __init__(self, pairs, lo: int, hi: int, u: int, depth: int, order: int):
        self.span, self._pairs, self._cand = (lo, hi, u, depth, order), pairs, None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self._cand is None:
            lo, hi, u, depth, order = self.span
            dst = self._pairs.dst
            same = torch.tensor([[0], [u], [depth], [order]], device=dst.device).expand(4, hi - lo)
            pair = torch.arange(lo, hi, device=dst.device)
            self._cand = Candidates(same[0], same[1], dst[lo:hi], pair, same[2], same[3])
        return getattr(self._cand, name)


def _as_list(t: Tensor) -> list:
    """``t.tolist()`` of a per-graph table, kept on the tensor (the tables are rebuilt, not changed in
    place, when the graph changes): the walk reads single entries of it at every step."""
    got = getattr(t, "_walk_one_list", None)
    if got is None:
        got = t._walk_one_list = t.tolist()
    return got


def _stops(scorer, ctx, best: float, count: int, counts: Tensor, budget: Budget, dtype) -> bool:
    """Whether the stop logit beats the best open score (argmax over [candidates, stop]: ties to a candidate):
    ``scorer.stop_value`` where it has one, else ``scorer.stop_logit`` of one-element tensors."""
    value = getattr(scorer, "stop_value", None)
    stop = None if value is None else value(ctx, best, count, budget)
    if stop is not None:
        return stop > best
    best_t = torch.tensor([best], dtype=dtype, device=counts.device)
    logit = scorer.stop_logit(ctx, best_t, counts[count : count + 1], budget)
    return logit is not None and bool(logit[0] > best_t[0])


def _walk_one(tables, scorer, q, entries, budget, ctx):
    dev = q.device
    pairs, tokens, top_k = tables.pairs, tables.tokens, budget.top_k_neighbors
    rowptr, dst, tok = _as_list(pairs.rowptr), _as_list(pairs.dst), _as_list(tokens)
    counts = torch.arange(budget.max_nodes, device=dev)
    col = (entries[0] >= 0).nonzero().flatten()
    ent = entries[0, col]
    none = torch.full_like(col, -1)
    s = scorer.score(ctx, EntryCandidates(0 * col, none, ent, none, 0 * col, col, tuple(col.tolist())))
    # pool slot -> (target, pair, depth, parent's load slot, tokens of the target); entries keep their columns
    pool = {c: (v, -1, 0, -1, tok[v]) for c, v in zip(col.tolist(), ent.tolist())}
    heap = [(-x, c) for x, c in zip(s.tolist(), col.tolist())]
    heapq.heapify(heap)
    width = entries.shape[1]
    loaded, seen, children = [], set(), []  # loaded: (node, depth, pair, score)
    used, expanded = 0, []
    for count in range(budget.max_nodes):
        while heap:  # drop the closed candidates on top: they never open again
            neg, a = heap[0]
            v, _, _, parent, k = pool[a]
            if v in seen or (parent >= 0 and children[parent] >= top_k) or used + k > budget.max_tokens:
                heapq.heappop(heap)
                continue
            break
        if not heap:
            break
        if _stops(scorer, ctx, -neg, count, counts, budget, s.dtype):
            break
        heapq.heappop(heap)
        v, pair, depth, parent, k = pool[a]
        loaded.append((v, depth, pair, -neg))
        seen.add(v)
        children.append(0)
        if parent >= 0:
            children[parent] += 1
        used += k
        if top_k <= 0 or depth >= budget.max_hops:
            continue
        expanded.append(v)
        lo, hi = rowptr[v], rowptr[v + 1]
        if hi == lo or count + 1 == budget.max_nodes:  # the last load: its children could never be loaded
            continue
        deg = hi - lo
        for j, x in enumerate(scorer.score(ctx, Expansion(pairs, lo, hi, v, depth + 1, count)).tolist()):
            c = dst[lo + j]
            pool[width + j] = (c, lo + j, depth + 1, count, tok[c])
            if c not in seen:
                heapq.heappush(heap, (-x, width + j))
        width += deg
    long = dict(dtype=torch.long, device=dev)
    node = torch.tensor([r[0] for r in loaded], **long)
    pair = torch.tensor([r[2] for r in loaded], **long)
    edge = torch.where(pair >= 0, pairs.edge[pair.clamp(min=0)], -1)
    score = torch.tensor([r[3] for r in loaded], dtype=s.dtype, device=dev)
    zeros = lambda n: torch.zeros(n, **long)  # noqa: E731
    depth = torch.tensor([r[1] for r in loaded], **long)
    return WalkTrace(
        zeros(len(loaded)),
        node,
        depth,
        edge,
        score,
        zeros(len(expanded)),
        torch.tensor(expanded, **long),
        torch.tensor([used], **long),
    )
