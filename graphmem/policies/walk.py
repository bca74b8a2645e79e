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

from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.policies.base import Budget
from graphmem.policies.batched import csr_positions
from graphmem.policies.tables import unit_embeddings
from models.edge_encoder import PairTable, edge_pairs, pair_table


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
        the queries' lexical inputs (:class:`graphmem.index.lexical_features.Lexical`, when the scorer reads them)."""
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

    def to(self, device: str | torch.device) -> WalkTables:
        """The tables on ``device``."""
        rows = None if self.edge_rows is None else self.edge_rows.to(device)
        return WalkTables(self.x.to(device), self.tokens.to(device), self.pairs.to(device), rows)


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
    return WalkTables(x_unit, tokens, pairs, edge_rows).to(device if device is not None else x_unit.device)


def graph_walk_tables(graph: MemoryGraph, edge_rows: Tensor | None = None) -> WalkTables:
    """:class:`WalkTables` of ``graph``: its unit embeddings, node tokens and (kept) pair table, with
    ``edge_rows`` (rows of a per-edge residual table, or None), where the embeddings are."""
    x_unit = unit_embeddings(graph)
    pairs = pair_table(graph)
    if edge_rows is not None:
        edge_pairs(graph, pairs)  # the residual reads every edge's pair
    return WalkTables(x_unit, node_tokens(graph), pairs, edge_rows)


def has_pair(tables: WalkTables, src: Tensor, dst: Tensor) -> Tensor:
    """Whether the pair ``src -> dst`` exists, elementwise (a binary search in the CSR-sorted pair keys)."""
    pairs, n = tables.pairs, max(tables.num_nodes, 1)
    keys = pairs.src * n + pairs.dst  # ascending: pairs are sorted by (src, dst)
    if keys.numel() == 0:
        return torch.zeros(src.shape, dtype=torch.bool, device=src.device)
    query = src.clamp(min=0) * n + dst.clamp(min=0)
    pos = torch.searchsorted(keys, query.flatten()).clamp(max=keys.numel() - 1).view(query.shape)
    return (keys[pos] == query) & (src >= 0) & (dst >= 0)


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
        choice = Choice(sample, temperature, generator, noise)
        return _walk(tables, scorer, q, entries, budget, choice, ctx, allow_stop, blocked)


@dataclass
class Choice:
    """How each step chooses among the ``[B, P (+1)]`` logits of the open candidates (and the stop).

    Greedy: ``argmax logits``. Sampled: the Gumbel-max draw ``argmax(logits / τ - log(-log u))``, a draw
    from ``softmax(logits / τ)``, with ``u`` the step's row of ``noise`` (``[T, B, W]``) when given, else
    uniforms drawn from ``generator`` (torch's global RNG when None)."""

    sample: bool = False
    temperature: float = 1.0
    generator: torch.Generator | None = None
    noise: Tensor | None = None

    def pick(self, logits: Tensor, t: int) -> Tensor:
        """``[B]`` chosen column of step ``t``'s logits."""
        if not self.sample:
            return logits.argmax(1)
        dev = logits.device
        if self.noise is not None:
            u = self.noise[t, :, : logits.shape[1]].to(dev)
        else:
            u = torch.rand(logits.shape, generator=self.generator, device="cpu" if self.generator is not None else dev)
            u = u.to(dev)
        return (logits / self.temperature - torch.log(-torch.log(u.clamp(1e-12, 1 - 1e-7)))).argmax(1)


@dataclass
class WalkState:
    """``B`` walks in progress (``P`` pool slots, ``T = max_nodes`` steps); the fields named as in
    :class:`WalkEpisodes`, plus what only the loop needs.

    Attributes:
        node, parent, pair, depth, slot, order, scores: ``[B, P]`` the candidate pool (``WalkEpisodes.pool_*``).
        dead: ``[B, P]`` bool, empty slots, blocked targets and targets already loaded.
        length: ``[B]`` pool slots filled (entries first, then each loaded node's out-pairs).
        loaded, loaded_depth, loaded_via: ``[B, T]`` the loads so far; children: ``[B, T]`` each load's children.
        count, used: ``[B]`` nodes loaded and tokens used; alive: ``[B]`` bool, walks that may still act.
        opens, actions: ``[T, B, P]`` and ``[T, B]``, what each step offered and chose (``WalkEpisodes``).
        blocked: ``[B, K]`` nodes never to load (``-1`` padded) or None.
    """

    node: Tensor
    parent: Tensor
    pair: Tensor
    depth: Tensor
    slot: Tensor
    order: Tensor
    scores: Tensor
    dead: Tensor
    length: Tensor
    loaded: Tensor
    loaded_depth: Tensor
    loaded_via: Tensor
    children: Tensor
    count: Tensor
    used: Tensor
    alive: Tensor
    opens: Tensor
    actions: Tensor
    blocked: Tensor | None

    @classmethod
    def start(
        cls,
        tables: WalkTables,
        scorer: CandidateScorer,
        ctx: Any,
        q: Tensor,
        entries: Tensor,
        budget: Budget,
        blocked: Tensor | None,
    ) -> WalkState:
        """The pool holding the scored entries (depth 0, no parent, ``order`` = rank), nothing loaded."""
        dev, bsz, n_ent = q.device, q.shape[0], entries.shape[1]
        entries = entries.to(dev)
        width, steps = pool_width(tables, budget, n_ent), budget.max_nodes
        full = lambda v: torch.full((bsz, width), v, dtype=torch.long, device=dev)  # noqa: E731
        node, parent, pair, depth, slot, order = full(-1), full(-1), full(-1), full(0), full(-1), full(0)
        scores = torch.full((bsz, width), float("-inf"), device=dev, dtype=q.dtype)
        node[:, :n_ent] = entries
        order[:, :n_ent] = torch.arange(n_ent, device=dev)
        qi, col = (entries >= 0).nonzero(as_tuple=True)
        none = torch.full_like(qi, -1)
        scores[qi, col] = scorer.score(ctx, Candidates(qi, none, entries[qi, col], none, 0 * qi, col))
        length = torch.full((bsz,), n_ent, dtype=torch.long, device=dev)
        dead = node < 0
        if blocked is not None:
            blocked = blocked.to(dev)
            dead |= (node[:, :, None] == blocked[:, None, :]).any(-1)
        loaded = torch.full((bsz, steps), -1, dtype=torch.long, device=dev)
        return cls(
            node=node,
            parent=parent,
            pair=pair,
            depth=depth,
            slot=slot,
            order=order,
            scores=scores,
            dead=dead,
            length=length,
            loaded=loaded,
            loaded_depth=torch.full_like(loaded, -1),
            loaded_via=torch.full_like(loaded, -1),
            children=torch.zeros(bsz, steps, dtype=torch.long, device=dev),
            count=torch.zeros(bsz, dtype=torch.long, device=dev),
            used=torch.zeros(bsz, dtype=torch.long, device=dev),
            alive=torch.ones(bsz, dtype=torch.bool, device=dev),
            opens=torch.zeros(steps, bsz, width, dtype=torch.bool, device=dev),
            actions=torch.full((steps, bsz), -1, dtype=torch.long, device=dev),
            blocked=blocked,
        )

    def open_candidates(self, tables: WalkTables, budget: Budget) -> Tensor:
        """``[B, P]`` bool: live walks' candidates whose target is new and fits the tokens, parent has room."""
        has_slot = (self.slot < 0) | (self.children.gather(1, self.slot.clamp(min=0)) < budget.top_k_neighbors)
        fits = self.used[:, None] + tables.tokens[self.node.clamp(min=0)] <= budget.max_tokens
        return ~self.dead & has_slot & fits & self.alive[:, None]

    def act(self, t: int, open_: Tensor, picked: Tensor) -> Tensor:
        """Record step ``t`` (offered candidates, choice; ``-1`` where a walk is over); ``[B]`` bool, the loads."""
        acting = self.alive & open_.any(1)
        self.opens[t] = open_ & acting[:, None]
        self.actions[t] = torch.where(acting, picked, -1)
        self.alive = acting & (picked < self.node.shape[1])  # the stop column P ends a walk
        return self.alive

    def load(self, tables: WalkTables, scorer: CandidateScorer, ctx: Any, budget: Budget, loads: Tensor, picked):
        """Load the chosen targets of the ``loads`` rows, then push their out-pairs (depth < ``max_hops``)."""
        b, a = torch.arange(loads.shape[0], device=loads.device)[loads], picked[loads]
        v = self.node[b, a]
        pos = self.count[b]
        self.loaded[b, pos], self.loaded_depth[b, pos], self.loaded_via[b, pos] = v, self.depth[b, a], a
        has_parent = self.slot[b, a] >= 0
        self.children[b[has_parent], self.slot[b, a][has_parent]] += 1
        self.used[b] += tables.tokens[v]
        self.count[b] += 1
        self.dead[b] |= self.node[b] == v[:, None]
        grow = (
            self.depth[b, a] < budget.max_hops if budget.top_k_neighbors > 0 else torch.zeros_like(v, dtype=torch.bool)
        )
        gb, gv, gpos, gdepth = b[grow], v[grow], pos[grow], self.depth[b, a][grow] + 1
        if gb.numel() > 0:
            self.push(tables, scorer, ctx, gb, gv, gpos, gdepth)

    def push(self, tables: WalkTables, scorer: CandidateScorer, ctx: Any, gb, gv, gpos, gdepth) -> None:
        """Append and score the out-pairs ``gv -> child`` of the nodes just loaded (rows ``gb``, slots ``gpos``)."""
        seg, pid = csr_positions(tables.pairs.rowptr, gv)
        if pid.numel() == 0:
            return
        deg = tables.pairs.rowptr[gv + 1] - tables.pairs.rowptr[gv]
        first = torch.cumsum(deg, 0) - deg
        qb = gb[seg]
        cols = self.length[qb] + torch.arange(seg.numel(), device=gb.device) - first[seg]
        child = tables.pairs.dst[pid]
        self.node[qb, cols], self.parent[qb, cols], self.pair[qb, cols] = child, gv[seg], pid
        self.depth[qb, cols], self.slot[qb, cols], self.order[qb, cols] = gdepth[seg], gpos[seg], gpos[seg]
        self.dead[qb, cols] = (self.loaded[qb] == child[:, None]).any(1)
        if self.blocked is not None:
            self.dead[qb, cols] |= (self.blocked[qb] == child[:, None]).any(1)
        self.scores[qb, cols] = scorer.score(ctx, Candidates(qb, gv[seg], child, pid, gdepth[seg], gpos[seg]))
        self.length[gb] += deg

    def episodes(self, stoppable: bool) -> WalkEpisodes:
        return WalkEpisodes(
            pool_node=self.node,
            pool_parent=self.parent,
            pool_pair=self.pair,
            pool_depth=self.depth,
            pool_slot=self.slot,
            pool_order=self.order,
            scores=self.scores,
            open=self.opens,
            action=self.actions,
            loaded=self.loaded,
            loaded_depth=self.loaded_depth,
            loaded_via=self.loaded_via,
            count=self.count,
            used=self.used,
            stoppable=stoppable,
        )


def _walk(
    tables: WalkTables,
    scorer: CandidateScorer,
    q: Tensor,
    entries: Tensor,
    budget: Budget,
    choice: Choice,
    ctx: Any,
    allow_stop: bool,
    blocked: Tensor | None,
) -> WalkEpisodes:
    """The walk's loop: at most ``max_nodes`` steps, each offering the open candidates (and the stop) of every
    live walk, choosing one, loading its target and pushing the target's out-pairs."""
    state = WalkState.start(tables, scorer, ctx, q, entries, budget, blocked)
    for t in range(budget.max_nodes):
        open_ = state.open_candidates(tables, budget)
        logits = state.scores.masked_fill(~open_, float("-inf"))
        stop = scorer.stop_logit(ctx, logits.max(1).values, state.count, budget) if allow_stop else None
        if stop is not None:
            logits = torch.cat([logits, stop[:, None]], 1)
        picked = choice.pick(logits, t)
        loads = state.act(t, open_, picked)
        if not bool(loads.any()):
            break
        state.load(tables, scorer, ctx, budget, loads, picked)
    return state.episodes(allow_stop)


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
