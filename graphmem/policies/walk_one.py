"""The greedy walk of :func:`graphmem.policies.walk.walk` for one query, as the router serves it.

:func:`~graphmem.policies.walk.walk` keeps a batch's candidate pool as ``[B, P]`` tensors and masks
it at every step; one query at question time needs none of that. :func:`walk_one` keeps the pool
as a max-heap of scores and loads exactly what the batched walk loads (same candidates, same
``scorer.score`` calls, the same tie order), at one heap pop and one ``score`` call per step.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import torch
from torch import Tensor

from graphmem.core.budget import Budget
from graphmem.policies.walk import Candidates, CandidateScorer, WalkTables, WalkTrace
from models.walk_columns import host_array


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
        try:
            return _walk_one(tables, scorer, q, entries, budget, ctx)
        finally:
            columns = getattr(ctx, "columns", None)
            if columns is not None:
                columns.release()  # the walk has scored every node it loaded: nothing more to compute


class _Lazy:
    """Candidates of query row 0 whose :class:`~graphmem.policies.walk.Candidates` tensors are made on first use
    (:meth:`candidates`), for a scorer that reads them instead of its per-query tables."""

    span = entry_cols = None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if self.__dict__.get("_cand") is None:
            self._cand = self.candidates()
        return getattr(self._cand, name)


class EntryCandidates(_Lazy):
    """The entries ``nodes`` of query row 0, in columns ``entry_cols`` of its entry row."""

    def __init__(self, nodes: list[int], cols: tuple[int, ...], device):
        self.nodes, self.entry_cols, self._device = nodes, cols, device

    def candidates(self) -> Candidates:
        col = torch.tensor(self.entry_cols, dtype=torch.long, device=self._device)
        none, zero = torch.full_like(col, -1), torch.zeros_like(col)
        return Candidates(zero, none, torch.tensor(self.nodes, dtype=torch.long, device=self._device), none, zero, col)


class Expansion(_Lazy):
    """The candidates ``u -> dst[p]``, ``p in lo:hi``, of one loaded node ``u`` of query row 0 (depth ``depth``,
    order ``order``), with ``span = (lo, hi, u, depth, order)``."""

    def __init__(self, pairs, lo: int, hi: int, u: int, depth: int, order: int):
        self.span, self._pairs = (lo, hi, u, depth, order), pairs

    def candidates(self) -> Candidates:
        lo, hi, u, depth, order = self.span
        dst = self._pairs.dst
        same = torch.tensor([[0], [u], [depth], [order]], device=dst.device).expand(4, hi - lo)
        return Candidates(same[0], same[1], dst[lo:hi], torch.arange(lo, hi, device=dst.device), same[2], same[3])


def _stops(scorer, ctx, best: float, count: int, budget: Budget, dtype) -> bool:
    """Whether the stop logit beats the best open score (argmax over [candidates, stop]: ties to a candidate):
    ``scorer.stop_value`` where it has one, else ``scorer.stop_logit`` of one-element tensors."""
    value = getattr(scorer, "stop_value", None)
    stop = None if value is None else value(ctx, best, count, budget)
    if stop is not None:
        return stop > best
    best_t = torch.tensor([best], dtype=dtype, device=ctx.q.device if hasattr(ctx, "q") else None)
    logit = scorer.stop_logit(ctx, best_t, torch.tensor([count], device=best_t.device), budget)
    return logit is not None and bool(logit[0] > best_t[0])


def _walk_one(tables, scorer, q, entries, budget, ctx):
    """:func:`walk_one`'s loop. The pool is kept as sorted runs: the candidates one score call pushed (the entries,
    or one expansion's targets not yet loaded), each sorted by ``(-score, pool slot)``, in a heap keyed by
    each run's first open candidate. A run's candidates share their parent, so when the parent is out of
    children the whole run closes at once, and so does the rest of a run whose smallest target no longer
    fits the tokens left; a candidate closed on its own (target loaded, tokens) is passed over. The heap's top
    is the best open candidate of the whole pool, ties to the earlier pool slot, as ``argmax`` takes it."""
    dev = q.device
    pairs, top_k, max_tokens = tables.pairs, budget.top_k_neighbors, budget.max_tokens
    rowptr, dst, tok = host_array(pairs.rowptr), host_array(pairs.dst), host_array(tables.tokens)
    row = entries[0].tolist()
    col = [j for j, v in enumerate(row) if v >= 0]
    ent = [row[j] for j in col]
    s = scorer.score(ctx, EntryCandidates(ent, tuple(col), dev))
    # a candidate: (-score, pool slot, target, pair, depth, parent's load slot, tokens of the target)
    heap: list = []
    _push(heap, [(-x, j, v, -1, 0, -1, int(tok[v])) for x, j, v in zip(s.tolist(), col, ent)])
    width = entries.shape[1]
    loaded, seen, children = [], set(), []  # loaded: (node, depth, pair, score)
    used, expanded = 0, []
    for count in range(budget.max_nodes):
        while heap:  # pass over the closed candidates on top: they never open again
            neg, _, i, run, least = heap[0]
            _, _, v, _, _, parent, k = run[i]
            if (parent >= 0 and children[parent] >= top_k) or used + least[i] > max_tokens:
                heapq.heappop(heap)  # the parent is out of children, or no target left fits: the run is closed
            elif v in seen or used + k > max_tokens:
                _advance(heap, run, i, least)
            else:
                break
        if not heap or _stops(scorer, ctx, -neg, count, budget, s.dtype):
            break
        _advance(heap, run, i, least)
        _, _, v, pair, depth, parent, k = run[i]
        loaded.append((v, depth, pair, -neg))
        seen.add(v)
        children.append(0)
        if parent >= 0:
            children[parent] += 1
        used += k
        if top_k <= 0 or depth >= budget.max_hops:
            continue
        expanded.append(v)
        lo, hi = int(rowptr[v]), int(rowptr[v + 1])
        if hi == lo or count + 1 == budget.max_nodes:  # the last load: its children could never be loaded
            continue
        kids = dst[lo:hi]
        got = scorer.score(ctx, Expansion(pairs, lo, hi, v, depth + 1, count)).tolist()
        run = zip(got, range(width, width + hi - lo), kids.tolist(), range(lo, hi), tok[kids].tolist())
        _push(heap, [(-x, j, c, p, depth + 1, count, k) for x, j, c, p, k in run if c not in seen])
        width += hi - lo
    return _trace(pairs, loaded, expanded, used, s.dtype, dev)


def _push(heap: list, run: list) -> None:
    """Add a run of candidates to the heap: sorted, keyed by its first, with the least tokens of each suffix."""
    if run:
        run.sort()
        least = list(itertools.accumulate(reversed([c[6] for c in run]), min))[::-1]
        heapq.heappush(heap, (run[0][0], run[0][1], 0, run, least))


def _advance(heap: list, run: list, i: int, least: list) -> None:
    """Move the heap's top run past its candidate ``i`` (the run leaves the heap after its last)."""
    if i + 1 < len(run):
        heapq.heapreplace(heap, (run[i + 1][0], run[i + 1][1], i + 1, run, least))
    else:
        heapq.heappop(heap)


def _trace(pairs, loaded: list, expanded: list, used: int, dtype, dev) -> WalkTrace:
    """The :class:`WalkTrace` of one query's loads ``(node, depth, pair, score)`` and expanded nodes."""
    edge_of = host_array(pairs.edge)
    node, depth, pair, score = (list(t) for t in zip(*loaded)) if loaded else ([], [], [], [])
    edge = [int(edge_of[p]) if p >= 0 else -1 for p in pair]
    rows = torch.tensor([node, depth, edge, expanded + [0] * (len(node) - len(expanded))], dtype=torch.long, device=dev)
    zeros = torch.zeros(len(node), dtype=torch.long, device=dev)
    return WalkTrace(
        zeros,
        rows[0],
        rows[1],
        rows[2],
        torch.tensor(score, dtype=dtype, device=dev),
        zeros[: len(expanded)],
        rows[3, : len(expanded)],
        torch.tensor([used], dtype=torch.long, device=dev),
    )
