"""The budget-aware best-first walk, batched over queries: the episode that is trained is the retrieval.

For query ``b`` the state after ``t`` loads is the loaded list (load order, each node with its
depth and number of children), the tokens used and the *candidate pool*: the selector's entries
(depth 0, no parent) and every node pair ``u -> v`` out of a loaded node ``u`` with
``depth(u) < max_hops`` (depth ``depth(u) + 1``). A candidate is *open* when

    target not loaded  ∧  parent has < top_k_neighbors children  ∧  tokens_used + tokens(target) <= max_tokens

and ``t < max_nodes``. One step chooses one open candidate (or, with a stop head, to stop) and
loads its target; so the walk keeps up to ``max_entries`` entries, expands the best candidate of
the whole frontier (not level by level), goes as deep as ``max_hops`` and loads at most
``max_nodes`` nodes. A candidate's score ``s(q, u -> v)`` is computed once, when it is pushed, by a
:class:`CandidateScorer`; the choice is ``argmax`` (question time) or a draw from
``softmax(s / τ)`` over the open candidates (training). A walk is a loop of ``max_nodes`` steps
of ``[B, P]`` tensor work, ``P = max_entries + max_nodes · max pair out-degree``: its cost is
bounded by the budget and the degrees, not by the graph size.

:func:`walk` records every candidate and every step's open mask (:class:`WalkEpisodes`), so a
loss can recompute the scores with gradients (:func:`step_log_probs`) without replaying the walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from graphmem.policies.base import Budget
from graphmem.policies.batched import csr_positions
from models.edge_encoder import PairTable


@dataclass
class Candidates:
    """``C`` walk candidates ``parent -> child`` (entries: ``parent = pair = -1``, depth 0)."""

    query: Tensor  # [C] query row
    parent: Tensor  # [C] parent node
    child: Tensor  # [C] target node
    pair: Tensor  # [C] pair id in the PairTable
    depth: Tensor  # [C] depth of the target
    order: Tensor  # [C] entries: rank among the entries; others: the parent's load slot

    @property
    def is_entry(self) -> Tensor:
        return self.parent < 0


class CandidateScorer(Protocol):
    """Scores candidates of a walk; ``prepare`` runs once per batch of queries."""

    def prepare(self, tables: WalkTables, q: Tensor, entries: Tensor, lexical: Any = None) -> Any:
        """Per-batch context from ``[B, D]`` queries and their ``[B, E]`` entry rows (``-1`` padded), and
        the queries' lexical inputs (:class:`graphmem.lexical_features.Lexical`, when the scorer reads them)."""
        ...

    def score(self, ctx: Any, cand: Candidates) -> Tensor:
        """``[C]`` scores of the candidates."""
        ...

    def stop_logit(self, ctx: Any, best: Tensor, count: Tensor, budget: Budget) -> Tensor | None:
        """``[B]`` logit of stopping given the best open score and the nodes loaded; ``None``: never stop."""
        ...


@dataclass
class WalkTables:
    """Query-independent tensors of one graph (or a disjoint union of graphs) on one device."""

    x: Tensor  # [N, D] unit node embeddings
    tokens: Tensor  # [N] tokens of each node's serialized line
    pairs: PairTable
    edge_rows: Tensor | None = None  # [E] rows of a PerEdgeResidual (or None)

    @property
    def num_nodes(self) -> int:
        return int(self.x.shape[0])


@dataclass
class WalkEpisodes:
    """Everything a walk did, as tensors (``P`` pool slots, ``T = max_nodes`` steps).

    Attributes:
        pool_node, pool_parent, pool_pair, pool_depth, pool_slot: ``[B, P]`` each candidate's
            target, parent node (``-1`` for entries), pair id (``-1`` for entries), depth of the
            target and load slot of the parent (``-1`` for entries); ``pool_node = -1`` is empty.
        pool_order: ``[B, P]`` :attr:`Candidates.order` of each candidate.
        scores: ``[B, P]`` the scores the walk used (no gradient).
        open: ``[T, B, P]`` bool, the open candidates at each step.
        action: ``[T, B]`` chosen pool slot, ``P`` for stop, ``-1`` once the walk is over.
        loaded, loaded_depth, loaded_via: ``[B, T]`` loaded nodes in load order, their depths and
            the pool slots that loaded them (``-1`` padded).
        count, used: ``[B]`` nodes loaded and tokens used.
        stoppable: whether the stop action was offered (``allow_stop``).
    """

    pool_node: Tensor
    pool_parent: Tensor
    pool_pair: Tensor
    pool_depth: Tensor
    pool_slot: Tensor
    pool_order: Tensor
    scores: Tensor
    open: Tensor
    action: Tensor
    loaded: Tensor
    loaded_depth: Tensor
    loaded_via: Tensor
    count: Tensor
    used: Tensor
    stoppable: bool = True

    @property
    def acted(self) -> Tensor:
        """``[T, B]`` bool: steps where the walk made a choice (a load or the stop)."""
        return self.action >= 0


def walk_tables(
    x_unit: Tensor, tokens: Tensor, pairs: PairTable, edge_rows: Tensor | None = None, device=None
) -> WalkTables:
    dev = device if device is not None else x_unit.device
    return WalkTables(x_unit.to(dev), tokens.to(dev), pairs.to(dev), None if edge_rows is None else edge_rows.to(dev))


def pool_width(tables: WalkTables, budget: Budget, entries: int) -> int:
    """Pool slots a walk can need: the entries plus every loaded node's out-pairs."""
    per_node = tables.pairs.max_degree() if budget.top_k_neighbors > 0 and budget.max_hops > 0 else 0
    return entries + budget.max_nodes * per_node


def walk(
    tables: WalkTables,
    scorer: CandidateScorer,
    q: Tensor,
    entries: Tensor,
    budget: Budget,
    sample: bool = False,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    ctx: Any = None,
    allow_stop: bool = True,
    blocked: Tensor | None = None,
    lexical: Any = None,
    noise: Tensor | None = None,
) -> WalkEpisodes:
    """Run the walk (module docstring) for ``B`` queries; no gradients are recorded.

    Args:
        tables: the graph's :class:`WalkTables`.
        scorer: a :class:`CandidateScorer`.
        q: ``[B, D]`` query embeddings.
        entries: ``[B, E]`` entry rows, best first, ``-1`` padded (at most ``max_entries`` used).
        budget: the retrieval budget.
        sample: draw each choice from ``softmax(s / temperature)`` instead of taking the argmax.
        temperature: ``τ`` of the sampling distribution (default: 1.0).
        generator: RNG of the draws (default: torch's global one).
        ctx: ``scorer.prepare(tables, q, entries)`` when already computed (default: computed here).
        allow_stop: whether the scorer's stop head may end the walk (default: True).
        blocked: ``[B, K]`` nodes never to load (``-1`` padded), e.g. HAGE's visited entries (default: none).
        lexical: the queries' lexical inputs, passed to ``scorer.prepare`` when ``ctx`` is not given (default: none).
        noise: ``[T, B, W]`` uniforms of the draws, ``W >=`` :func:`pool_width` ``+ 1`` (default: drawn step by
            step from ``generator``). Given per query row, the draws of a row do not depend on the batch it
            is walked in (what data parallelism splits).
    """
    with torch.no_grad():
        entries = entries[:, : budget.max_entries]
        if ctx is None:
            given = () if lexical is None else (lexical,)  # scorers that read no text take none
            ctx = scorer.prepare(tables, q, entries.to(q.device), *given)
        return _walk(
            tables, scorer, q, entries, budget, sample, temperature, generator, ctx, allow_stop, blocked, noise
        )


def _walk(tables, scorer, q, entries, budget, sample, temperature, generator, ctx, allow_stop, blocked, noise):
    dev, bsz, n_ent = q.device, q.shape[0], entries.shape[1]
    entries = entries.to(dev)
    width, steps = pool_width(tables, budget, n_ent), budget.max_nodes
    rows = torch.arange(bsz, device=dev)
    full = lambda v: torch.full((bsz, width), v, dtype=torch.long, device=dev)  # noqa: E731
    node, parent, pair, depth, slot, order = full(-1), full(-1), full(-1), full(0), full(-1), full(0)
    scores = torch.full((bsz, width), float("-inf"), device=dev, dtype=q.dtype)
    node[:, :n_ent] = entries
    order[:, :n_ent] = torch.arange(n_ent, device=dev)
    real = entries >= 0
    qi, col = real.nonzero(as_tuple=True)
    none = torch.full_like(qi, -1)
    scores[qi, col] = scorer.score(ctx, Candidates(qi, none, entries[qi, col], none, 0 * qi, col))
    length = torch.full((bsz,), n_ent, dtype=torch.long, device=dev)
    dead = node < 0  # empty slots and candidates whose target is loaded
    if blocked is not None:
        blocked = blocked.to(dev)
        dead |= (node[:, :, None] == blocked[:, None, :]).any(-1)
    loaded = torch.full((bsz, steps), -1, dtype=torch.long, device=dev)
    loaded_depth, loaded_via = torch.full_like(loaded, -1), torch.full_like(loaded, -1)
    children = torch.zeros(bsz, steps, dtype=torch.long, device=dev)
    count = torch.zeros(bsz, dtype=torch.long, device=dev)
    used = torch.zeros(bsz, dtype=torch.long, device=dev)
    alive = torch.ones(bsz, dtype=torch.bool, device=dev)
    opens = torch.zeros(steps, bsz, width, dtype=torch.bool, device=dev)
    actions = torch.full((steps, bsz), -1, dtype=torch.long, device=dev)
    for t in range(steps):
        has_slot = (slot < 0) | (children.gather(1, slot.clamp(min=0)) < budget.top_k_neighbors)
        fits = used[:, None] + tables.tokens[node.clamp(min=0)] <= budget.max_tokens
        open_ = ~dead & has_slot & fits & alive[:, None]
        has = open_.any(1)
        logits = scores.masked_fill(~open_, float("-inf"))
        best = logits.max(1).values
        stop = scorer.stop_logit(ctx, best, count, budget) if allow_stop else None
        if stop is not None:
            logits = torch.cat([logits, stop[:, None]], 1)
        if sample and noise is not None:
            u = noise[t, :, : logits.shape[1]].to(dev)
        elif sample:
            u = torch.rand(logits.shape, generator=generator, device="cpu" if generator is not None else dev).to(dev)
        if sample:
            choice = (logits / temperature - torch.log(-torch.log(u.clamp(1e-12, 1 - 1e-7)))).argmax(1)
        else:
            choice = logits.argmax(1)
        acting = alive & has
        opens[t] = open_ & acting[:, None]
        actions[t] = torch.where(acting, choice, -1)
        loads = acting & (choice < width)
        alive = loads
        if not bool(loads.any()):
            break
        b, a = rows[loads], choice[loads]
        v = node[b, a]
        pos = count[b]
        loaded[b, pos], loaded_depth[b, pos], loaded_via[b, pos] = v, depth[b, a], a
        has_parent = slot[b, a] >= 0
        children[b[has_parent], slot[b, a][has_parent]] += 1
        used[b] += tables.tokens[v]
        count[b] += 1
        dead[b] |= node[b] == v[:, None]
        # ---- push the out-pairs of the new node (when it may still have children)
        grow = depth[b, a] < budget.max_hops if budget.top_k_neighbors > 0 else torch.zeros_like(v, dtype=torch.bool)
        gb, gv, gpos, gdepth = b[grow], v[grow], pos[grow], depth[b, a][grow] + 1
        if gb.numel() == 0:
            continue
        seg, pid = csr_positions(tables.pairs.rowptr, gv)
        if pid.numel() == 0:
            continue
        deg = tables.pairs.rowptr[gv + 1] - tables.pairs.rowptr[gv]
        first = torch.cumsum(deg, 0) - deg
        qb = gb[seg]
        cols = length[qb] + torch.arange(seg.numel(), device=dev) - first[seg]
        child = tables.pairs.dst[pid]
        node[qb, cols], parent[qb, cols], pair[qb, cols] = child, gv[seg], pid
        depth[qb, cols], slot[qb, cols], order[qb, cols] = gdepth[seg], gpos[seg], gpos[seg]
        dead[qb, cols] = (loaded[qb] == child[:, None]).any(1)
        if blocked is not None:
            dead[qb, cols] |= (blocked[qb] == child[:, None]).any(1)
        scores[qb, cols] = scorer.score(ctx, Candidates(qb, gv[seg], child, pid, gdepth[seg], gpos[seg]))
        length[gb] += deg
    return WalkEpisodes(
        node,
        parent,
        pair,
        depth,
        slot,
        order,
        scores,
        opens,
        actions,
        loaded,
        loaded_depth,
        loaded_via,
        count,
        used,
        allow_stop,
    )


def rescore(scorer: CandidateScorer, ctx: Any, ep: WalkEpisodes) -> Tensor:
    """``[B, P]`` scores of every pool candidate recomputed (with gradients), ``-inf`` at empty slots."""
    qi, col = (ep.pool_node >= 0).nonzero(as_tuple=True)
    fields = (ep.pool_parent, ep.pool_node, ep.pool_pair, ep.pool_depth, ep.pool_order)
    s = scorer.score(ctx, Candidates(qi, *(f[qi, col] for f in fields)))
    out = torch.full(ep.pool_node.shape, float("-inf"), dtype=s.dtype, device=s.device)
    return out.index_put((qi, col), s)


def step_logits(scorer: CandidateScorer, ctx: Any, ep: WalkEpisodes, budget: Budget, scores: Tensor) -> Tensor:
    """``[T, B, P (+1)]`` logits of every step: open candidates' scores (``-inf`` elsewhere), then the stop logit
    (when the walk could stop)."""
    logits = scores[None].masked_fill(~ep.open, float("-inf"))
    counts = torch.arange(ep.open.shape[0], device=scores.device)[:, None].expand(-1, scores.shape[0])
    best = logits.max(2).values
    stop = scorer.stop_logit(ctx, best.flatten(), counts.flatten(), budget) if ep.stoppable else None
    if stop is None:
        return logits
    return torch.cat([logits, stop.view(*best.shape, 1)], 2)


def step_log_probs(
    scorer: CandidateScorer, ctx: Any, ep: WalkEpisodes, budget: Budget, temperature: float
) -> tuple[Tensor, Tensor]:
    """``(log π(a_t | s_t) [T, B], entropy [T, B])`` of the recorded actions under ``softmax(logits / τ)``
    (0 where the walk did not act), with gradients through the scorer."""
    logits = step_logits(scorer, ctx, ep, budget, rescore(scorer, ctx, ep)) / temperature
    acted = ep.acted
    logp_all = torch.log_softmax(logits.masked_fill(~acted[..., None], 0.0), -1)
    logp = logp_all.gather(2, ep.action.clamp(min=0)[..., None]).squeeze(2)
    p = logp_all.exp()
    entropy = -(p * logp_all.masked_fill(p == 0, 0.0)).sum(-1)
    return logp.masked_fill(~acted, 0.0), entropy.masked_fill(~acted, 0.0)


@dataclass
class WalkTrace:
    """What a walk loaded, flattened over queries in load order (the fields of a retrieval).

    Attributes:
        query, node, depth: ``[L]`` query row, node row and depth of every loaded node.
        edge: ``[L]`` the edge that loaded it (the smallest edge id of its pair; ``-1`` for entries).
        score: ``[L]`` the candidate's score when it was chosen.
        expanded_query, expanded_node: ``[K]`` the loaded nodes whose out-pairs were considered.
        tokens: ``[B]`` tokens loaded per query.
    """

    query: Tensor
    node: Tensor
    depth: Tensor
    edge: Tensor
    score: Tensor
    expanded_query: Tensor
    expanded_node: Tensor
    tokens: Tensor


def walk_trace(ep: WalkEpisodes, tables: WalkTables, budget: Budget) -> WalkTrace:
    """:class:`WalkTrace` of a walk (row-major over ``[B, T]``: per query, in load order)."""
    real = ep.loaded >= 0
    qi, t = real.nonzero(as_tuple=True)
    via = ep.loaded_via[qi, t]
    pair = ep.pool_pair[qi, via]
    edge = torch.where(pair >= 0, tables.pairs.edge[pair.clamp(min=0)], -1)
    depth = ep.loaded_depth[qi, t]
    grew = depth < budget.max_hops if budget.top_k_neighbors > 0 else torch.zeros_like(depth, dtype=torch.bool)
    node = ep.loaded[qi, t]
    return WalkTrace(qi, node, depth, edge, ep.scores[qi, via], qi[grew], node[grew], ep.used)
