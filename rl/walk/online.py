"""Test-time learning of the walk from each question's feedback in a stream (HAGE's weighted graph evolution).

:class:`OnlineWalk` is a learner of the streaming protocol (:class:`graphmem.streaming.Learner`): it starts
every stream (a memory) from the offline checkpoint and, after each question was scored, learns from its
:class:`~graphmem.streaming.Feedback`. What learns (``OnlineConfig.parts``):

* ``counters``: the memory's Beta counters, by GraphMemory's update (eq. 21) on the served retrieval through
  :meth:`graphmem.Memory.feedback` (helpful ids, or the judge's reward); the walk reads them with the weight
  ``κ`` (:class:`graphmem.policies.router.RouterPolicy` ``counter_weight``: a candidate gains
  ``κ · ((S + 1) / (S + F + 2) - 1/2)`` of its transition's counters, or of every transition into its target:
  ``counter_pool``);
* ``edges``: HAGE's per-edge trainable features on the memory's own edges: a residual ``δ_e ∈ R^4`` added to
  ``e_uv`` (:class:`MemoryResidual`), zero when the stream starts and grown with the memory;
* ``router``: the scorer's shared weights ``θ`` (relation intent, modulation, structural head, query/node
  interaction, stop head, inductive edge encoder), from the offline weights ``θ0``.

Per feedback, ``steps`` times (edges or router), on the memory as it is:

    K walks sampled from softmax(s / τ) from the query's entries;  R_k = feedback.score(loaded_k)
    A_k = R_k - (1 / (K - 1)) Σ_{j ≠ k} R_j                                   (leave-one-out baseline)
    L = -(1 / K) Σ_k A_k Σ_t log π(a_{k,t} | s_{k,t})  +  λ (||θ - θ0||² + mean_{e ∈ E_K} ||δ_e||²)
    θ ← Adam(θ, ∇_θ L; η_router)        δ ← δ - η_edge ∇_δ L              (gradient norm clipped to g_max)
    θ ← θ0 + (θ - θ0) · min(1, ρ / ||θ - θ0||)      δ_e ← δ_e · min(1, ρ_e / ||δ_e||)       (trust regions)

with ``E_K`` the edges of the pairs the K walks offered; no step is taken when every ``R_k`` is equal (no
advantage). Under ``answer`` feedback ``R_k`` is the answer's token recall in walk ``k``'s loaded text: no evidence
label reaches the learner. Step sizes and trust regions are chosen on validation conversations
(``scripts/studies/streaming``), never on the test ones.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from graphmem.core import Budget, Query
from graphmem.index.lexical_features import scope_lexical
from graphmem.memory import Memory, MemoryRetrieval
from graphmem.policies.base import Scope, TraversalPolicy
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.policies.ranking import query_matrix
from graphmem.policies.router import RouterPolicy
from graphmem.policies.walk import graph_walk_tables, walk
from graphmem.streaming import BetaCounters, Feedback, StreamPolicy, counter_state
from models.edge_encoder import PerEdgeResidual
from rl.walk.objectives import LeaveOneOut, reinforce_loss

PARTS = ("counters", "edges", "router")


@dataclass
class OnlineConfig:
    """What learns at test time and how far (mirrored by ``configs/streaming/default.yaml: online``; formulas:
    module docstring)."""

    parts: list[str] = field(default_factory=lambda: list(PARTS))
    """what learns: counters (Beta counters the walk reads), edges (per-edge residual δ), router (weights θ)"""
    rollouts: int = 4
    """K: walks sampled per policy-gradient step, each measured against the mean of the others
    (leave-one-out baseline; >= 2)"""
    steps: int = 1
    """policy-gradient steps per feedback"""
    temperature: float = 0.1
    """τ of the sampled walks: softmax(s / τ) over the open candidates and the stop
    (the greedy walk answers the questions)"""
    router_lr: float = 1e-3
    """η_router: Adam's step size on θ"""
    edge_lr: float = 1.0
    """η_edge: the plain gradient step size on δ (its rows appear as the memory grows,
    so it keeps no optimizer state)"""
    anchor_lambda: float = 1.0
    """λ: pull of θ to θ0 and of δ to 0"""
    trust_region: float = 0.5
    """ρ: the largest ||θ - θ0||, θ projected back onto the ball after each step
    (0: none)"""
    edge_trust_region: float = 0.5
    """ρ_e: the largest ||δ_e|| of one edge (0: none)"""
    max_grad_norm: float = 1.0
    """g_max: the gradient norm is clipped to it before a step
    (0: none)"""
    counter_weight: float = 0.5
    """κ: weight of the counters' term in the walk's score (with the counters part)"""
    counter_pool: str = "pair"
    """which counters a candidate reads: pair (its transition u -> v)
    or target (every transition into v)"""
    seed: int = 0
    """seed of the sampled walks (each stream restarts it)"""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.parts) - set(PARTS))
        if unknown or not self.parts:
            raise ValueError(f"online.parts must be a non-empty list of {PARTS}, got {self.parts!r}")
        if self.rollouts < 2 or self.steps < 0:
            raise ValueError(f"online.rollouts must be >= 2 and online.steps >= 0, got {self.rollouts}, {self.steps}")
        if self.counter_pool not in ("pair", "target"):
            raise ValueError(f"online.counter_pool must be pair or target, got {self.counter_pool!r}")
        for name in ("temperature", "router_lr", "edge_lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"online.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("anchor_lambda", "trust_region", "edge_trust_region", "max_grad_norm", "counter_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"online.{name} must be >= 0, got {getattr(self, name)!r}")


class MemoryResidual(PerEdgeResidual):
    """HAGE's per-edge table over one memory: row ``e`` is edge ``e`` of the memory's graph (edges are appended as
    the memory grows, so the rows grow with them: :meth:`grow`)."""

    def __init__(self, name: str) -> None:
        super().__init__({name: 0})

    def grow(self, num_edges: int) -> bool:
        """Rows for ``num_edges`` edges, the new ones at 0; whether the table grew (a new parameter)."""
        have = int(self.offsets[-1])
        if num_edges <= have:
            return False
        delta = torch.zeros(num_edges, self.delta.shape[1])
        delta[:have] = self.delta.detach()
        self.delta = nn.Parameter(delta)
        self.offsets[-1] = num_edges
        return True


class OnlineWalk:
    """The learned walk learning from each question's feedback on one stream at a time (module docstring).

    Args:
        offline: the trained router (its scorer, entry selector and ranking head), left unchanged.
        config: an :class:`OnlineConfig`.
        budget: the retrieval budget of the sampled walks (the stream's).
    """

    def __init__(self, offline: RouterPolicy, config: OnlineConfig, budget: Budget) -> None:
        self.offline, self.config, self.budget = offline, config, budget
        self.scorer = copy.deepcopy(offline.scorer).cpu()
        self.scorer.edges.residual = None
        self.theta0 = {n: p.detach().clone() for n, p in self.scorer.named_parameters()}
        self.learns = bool({"edges", "router"} & set(config.parts))

    # ------------------------------------------------------------------ Learner
    def start(self, memory: Memory) -> None:
        """Back to the offline weights, no residual, a fresh optimizer and generator."""
        c = self.config
        self.scorer.load_state_dict(self.theta0, strict=False)
        self.scorer.edges.residual = MemoryResidual(memory.graph.name) if "edges" in c.parts else None
        router = [p for _, p in self._router_parameters()]
        for p in router:
            p.requires_grad_("router" in c.parts)
        self.optimizer = torch.optim.Adam(router, lr=c.router_lr) if "router" in c.parts else None
        self.generator = torch.Generator().manual_seed(c.seed)

    def policy(self, memory: Memory) -> RouterPolicy:
        """The walk as it is now, with a residual row for every edge of ``memory``."""
        residual = self.scorer.edges.residual
        if residual is not None:
            residual.grow(memory.graph.num_edges)
        kappa = self.config.counter_weight if "counters" in self.config.parts else 0.0
        return RouterPolicy(
            scorer=self.scorer,
            device="cpu",
            entry_selector=self.offline.entry_selector,
            rank_head=self.offline.rank_head,
            counter_weight=kappa,
            counter_pool=self.config.counter_pool,
        )

    def learn(self, memory: Memory, query: Query, retrieval: MemoryRetrieval, feedback: Feedback) -> dict[str, float]:
        """The counters' update, then ``steps`` policy-gradient steps; returns counts and seconds."""
        out: dict[str, float] = {}
        if "counters" in self.config.parts:
            if feedback.helpful is not None:
                entry = memory.feedback(retrieval, helpful=list(feedback.helpful))
            else:
                entry = memory.feedback(retrieval, reward=feedback.reward)
            out["edges_updated"] = float(entry["edges_updated"])
        if self.learns:
            t0 = time.perf_counter()
            for _ in range(self.config.steps):
                for key, value in self.step(memory, query, feedback).items():
                    out[key] = out.get(key, 0.0) + value
            out["pg_seconds"] = time.perf_counter() - t0
        return out

    def finish(self, memory: Memory) -> dict[str, float]:
        """How far the stream moved the walk: ``||θ - θ0||``, the residual's rows that moved, the counters."""
        return {"router_drift": self.router_drift(), **self.edge_movement(), **counter_state(memory)}

    # ------------------------------------------------------------------ one policy-gradient step
    def step(self, memory: Memory, query: Query, feedback: Feedback) -> dict[str, float]:
        """One step of the module docstring's update on ``K`` walks sampled on ``memory`` as it is."""
        c, graph, k = self.config, memory.graph, self.config.rollouts
        policy = self.policy(memory)
        scope = Scope.single(graph, [query] * k, torch.device("cpu"))
        entries = policy.select_entries(scope, self.budget)
        residual = self.scorer.edges.residual
        rows = None if residual is None else residual.edge_rows([graph.name], [graph.num_edges])
        tables = graph_walk_tables(graph, rows)
        lexical = scope_lexical(scope) if self.scorer.config.lexical else None
        q = query_matrix(graph, scope.queries)
        ctx = self.scorer.prepare(tables, q, entries, lexical)
        if policy.counter_weight:
            policy.read_counters(ctx, graph, tables)
        ep = walk(tables, self.scorer, q, entries, self.budget, True, c.temperature, self.generator, ctx=ctx)
        ids = [[graph.node_ids[v] for v in row if v >= 0] for row in ep.loaded.tolist()]
        reward = torch.tensor([feedback.score(x) for x in ids], dtype=torch.float32)
        stats = {"pg_walks": float(k), "pg_reward": float(reward.mean())}
        if float(reward.max() - reward.min()) < 1e-9:
            return stats
        rewards = torch.zeros(ep.action.shape)
        last = ep.acted.long().cumsum(0).argmax(0)
        rewards[last, torch.arange(k)] = reward
        loss, _ = reinforce_loss(self.scorer, ctx, ep, rewards, LeaveOneOut(k), self.budget, c.temperature)
        total = loss + c.anchor_lambda * self.anchor(ep, tables)
        self._descend(total)
        return {**stats, "pg_steps": 1.0}

    def anchor(self, ep, tables) -> Tensor:
        """``||θ - θ0||² + mean_{e ∈ E_K} ||δ_e||²`` (module docstring)."""
        total = torch.zeros(())
        if "router" in self.config.parts:
            total = total + sum(((p - self.theta0[n]) ** 2).sum() for n, p in self._router_parameters())
        residual = self.scorer.edges.residual
        if residual is not None:
            pairs = torch.unique(ep.pool_pair[ep.pool_pair >= 0])
            offered = torch.isin(tables.pairs.edge_pair, pairs) & (tables.edge_rows >= 0)
            if bool(offered.any()):
                total = total + residual.delta[tables.edge_rows[offered]].pow(2).sum(-1).mean()
        return total

    def _descend(self, loss: Tensor) -> None:
        """One step on θ (Adam) and δ (gradient), clipped, then both trust regions (module docstring)."""
        c, residual = self.config, self.scorer.edges.residual
        params = [p for _, p in self._router_parameters() if p.requires_grad]
        if residual is not None:
            params.append(residual.delta)
        for p in params:
            p.grad = None
        loss.backward()
        if c.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
        if self.optimizer is not None:
            self.optimizer.step()
        with torch.no_grad():
            if residual is not None and residual.delta.grad is not None:
                residual.delta -= c.edge_lr * residual.delta.grad
                if c.edge_trust_region > 0:
                    norm = residual.delta.norm(dim=-1, keepdim=True)
                    residual.delta *= (c.edge_trust_region / norm.clamp(min=1e-12)).clamp(max=1.0)
            if self.optimizer is not None and c.trust_region > 0:
                drift = self.router_drift()
                if drift > c.trust_region:
                    for n, p in self._router_parameters():
                        p.copy_(self.theta0[n] + (p - self.theta0[n]) * (c.trust_region / drift))

    # ------------------------------------------------------------------ what moved
    def _router_parameters(self) -> list[tuple[str, nn.Parameter]]:
        return [(n, p) for n, p in self.scorer.named_parameters() if not n.startswith("edges.residual")]

    def router_drift(self) -> float:
        """``||θ - θ0||`` over the router's weights."""
        with torch.no_grad():
            return float(sum(((p - self.theta0[n]) ** 2).sum() for n, p in self._router_parameters()) ** 0.5)

    def edge_movement(self) -> dict[str, float]:
        """The residual's rows that moved and their mean and largest norm (zeros without one)."""
        residual = self.scorer.edges.residual
        if residual is None or residual.delta.numel() == 0:
            return {"edges_moved": 0.0, "edge_norm_mean": 0.0, "edge_norm_max": 0.0}
        norm = residual.delta.detach().norm(dim=-1)
        moved = norm > 0
        mean = float(norm[moved].mean()) if bool(moved.any()) else 0.0
        return {"edges_moved": float(moved.sum()), "edge_norm_mean": mean, "edge_norm_max": float(norm.max())}


# ---------------------------------------------------------------------------- the stream's policies
FROZEN = "_frozen"


def stream_policies(
    policies: Mapping[str, TraversalPolicy],
    feedback: str,
    online: OnlineConfig,
    budget: Budget,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[list[StreamPolicy], dict[str, str]]:
    """The streaming protocol's policies and which frozen copy each learner is paired with.

    Without feedback every policy runs frozen under its own name. With feedback, a policy that learns runs twice:
    online under its name (Beta BFS: :class:`graphmem.streaming.BetaCounters`; the router: :class:`OnlineWalk`
    with ``online``) and frozen as ``<name>_frozen``; each of ``variants`` (name -> :class:`OnlineConfig` fields
    over ``online``, e.g. one online part alone) is one more :class:`OnlineWalk` of the first router, paired with
    that router's frozen copy.
    """
    out: list[StreamPolicy] = []
    pairs: dict[str, str] = {}
    routers = [n for n, p in policies.items() if isinstance(p, RouterPolicy)]
    if variants and (feedback == "none" or not routers):
        raise ValueError("online variants need feedback other than none and a router among the policies")
    for name, policy in policies.items():
        learner = None
        if feedback != "none" and isinstance(policy, BetaBFS):
            learner = BetaCounters(policy)
        elif feedback != "none" and isinstance(policy, RouterPolicy):
            learner = OnlineWalk(policy, online, budget)
        out.append(StreamPolicy(name, policy, learner))
        if learner is not None:
            out.append(StreamPolicy(name + FROZEN, policy))
            pairs[name] = name + FROZEN
    for name, overrides in (variants or {}).items():
        router = policies[routers[0]]
        out.append(StreamPolicy(name, router, OnlineWalk(router, replace(online, **dict(overrides)), budget)))
        pairs[name] = routers[0] + FROZEN
    return out, pairs
