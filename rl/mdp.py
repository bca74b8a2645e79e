"""The traversal MDP (HAGE §3, Appendix B), stepped for many episodes at once as tensors.

An episode walks one memory graph for one question, starting at one of the question's entry
nodes. All graphs of a run are joined into one disjoint union, the
:class:`~graphmem.graph_batch.GraphBatch` the policies walk too, so episodes over different graphs
share one batch; node and edge ids below are global union ids (edge ``edge_ptr[g] + k`` is edge ``k``
of graph ``g``, the row order of :class:`models.edge_features.EdgeFeatures` over the same graphs).

* State ``s_t = (q, v_t, V_t, t)``: the query, the current node, the visited set (the question's
  entry nodes plus every node walked so far) and the hop count.
* Actions: with ``action_space="frontier"`` (default) the out-edges ``v -> u`` of every visited
  node ``v ∈ V_t`` with ``u ∉ V_t``, so one step compares edges leaving different entries, as the
  question-time walk does when it ranks the candidates of all frontier nodes together; with
  ``action_space="node"`` only the out-edges of the current node ``v_t`` (a single path).
* Reward of a step reaching ``u``:  ``r_t = R_hit · |{u} ∩ (G \\ reached)| - λ_step``,
  minus ``λ_timeout`` more when ``t + 1 = H_max`` and some gold node is still unreached.
* Termination: every gold node reached, a dead end (no unvisited out-neighbor), or ``H_max`` hops.

Gold node ids enter only :class:`TraversalMDP`'s reward and termination; the policy never sees them.
Defaults: ``H_max = 5``, ``R_hit = 10``, ``λ_step = 0.05``, ``λ_timeout = 1.0``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import torch
from torch import Tensor

from graphmem.graph_batch import GraphBatch
from graphmem.policies.batched import csr_values
from graphmem.policies.tables import unit_embeddings

ACTION_SPACES = ("frontier", "node")


@dataclass(frozen=True)
class MDPConfig:
    max_hops: int = 5
    """H_max: hops before an episode times out"""
    hit_reward: float = 10.0
    """R_hit: reward per newly reached gold node"""
    step_penalty: float = 0.05
    """λ_step: cost of every hop"""
    timeout_penalty: float = 1.0
    """λ_timeout: extra cost when H_max is hit with gold left unreached"""
    action_space: str = "frontier"
    """frontier: out-edges of every visited node; node: out-edges of the current node only"""

    def __post_init__(self) -> None:
        if self.action_space not in ACTION_SPACES:
            raise ValueError(f"action_space {self.action_space!r} is not one of {ACTION_SPACES}")


class UnionTensors(NamedTuple):
    """The tensors of a :class:`GraphBatch` union that episodes read, on one device: unit node
    embeddings ``x`` ``[N, D]`` (in the trainer's dtype), ``edge_index``, ``edge_type`` and the CSR
    ``(rowptr, perm)`` of out-edges."""

    x: Tensor
    edge_index: Tensor
    edge_type: Tensor
    rowptr: Tensor
    perm: Tensor


def union_tensors(batch: GraphBatch, device: str | torch.device, dtype: torch.dtype = torch.float32) -> UnionTensors:
    """:class:`UnionTensors` of ``batch`` on ``device``, cached on the union graph."""
    g = batch.graph

    def build() -> UnionTensors:
        rowptr, perm = g.csr()
        return UnionTensors(unit_embeddings(g).to(dtype), g.edge_index, g.edge_type, rowptr, perm)

    return g.cached(f"rl.union_tensors:{dtype}", build, (g.embeddings, g.edge_index), device)


@dataclass
class TraversalState:
    """Per-episode state: current node ``[B]``, visited ``[B, L]`` (-1 padded), hop, done ``[B]``,
    reached ``[B, G]``."""

    current: Tensor
    visited: Tensor
    hop: int
    done: Tensor
    reached: Tensor


class TraversalMDP:
    """Batched environment over a :class:`GraphBatch`, on the device of the gold ids ``[B, G]`` (-1 padded)."""

    def __init__(self, batch: GraphBatch, gold: Tensor, config: MDPConfig = MDPConfig()):
        self.batch, self.config = batch, config
        self.union = union_tensors(batch, gold.device)
        self._gold = gold
        self._gold_valid = self._gold >= 0

    def out_edges(self, nodes: Tensor) -> tuple[Tensor, Tensor]:
        """All out-edges of ``nodes`` ``[K]``: ``(seg [C], edges [C])``, ``seg`` indexing into ``nodes``."""
        return csr_values(self.union.rowptr, self.union.perm, nodes)

    def _all_reached(self, reached: Tensor) -> Tensor:
        return (reached | ~self._gold_valid).all(1)

    def reset(self, start: Tensor, visited0: Tensor) -> TraversalState:
        """Episodes start at ``start`` ``[B]`` with ``visited0`` ``[B, L0]`` already visited (the entries)."""
        b = start.numel()
        pad = torch.full((b, self.config.max_hops), -1, dtype=torch.long, device=start.device)
        visited0 = visited0.to(start.device)
        visited0 = torch.where(visited0 == start[:, None], -1, visited0)  # each node listed once
        visited = torch.cat([start[:, None], visited0, pad], 1)
        reached = (self._gold[:, :, None] == visited[:, None, :]).any(-1) & self._gold_valid
        done = self._all_reached(reached)
        return TraversalState(start.clone(), visited, 0, done, reached)

    def actions(self, state: TraversalState) -> tuple[Tensor, Tensor, Tensor]:
        """Legal actions of unfinished episodes: ``(episode [C], edge [C], target [C])``."""
        if self.config.action_space == "frontier":
            live, slot = ((state.visited >= 0) & ~state.done[:, None]).nonzero(as_tuple=True)
            seg, edges = self.out_edges(state.visited[live, slot])
        else:
            live = (~state.done).nonzero().flatten()
            seg, edges = self.out_edges(state.current[live])
        ep = live[seg]
        target = self.union.edge_index[1, edges]
        fresh = ~(state.visited[ep] == target[:, None]).any(1)
        return ep[fresh], edges[fresh], target[fresh]

    def step(self, state: TraversalState, target: Tensor) -> tuple[Tensor, TraversalState]:
        """Move every unfinished episode to ``target`` ``[B]`` (-1: no legal action, a dead end)."""
        cfg = self.config
        acting = ~state.done & (target >= 0)
        hits = (self._gold == target[:, None]) & ~state.reached & self._gold_valid & acting[:, None]
        reward = cfg.hit_reward * hits.sum(1).float() - cfg.step_penalty * acting.float()
        reached = state.reached | hits
        hop = state.hop + 1
        visited = state.visited.clone()
        visited[acting, state.hop - cfg.max_hops] = target[acting]
        finished = self._all_reached(reached)
        timeout = acting & ~finished & (hop >= cfg.max_hops)
        reward = reward - cfg.timeout_penalty * timeout.float()
        done = state.done | ~acting | finished | timeout
        current = torch.where(acting, target, state.current)
        return reward, replace(state, current=current, visited=visited, hop=hop, done=done, reached=reached)

    def success(self, state: TraversalState) -> Tensor:
        """``[B]`` bool: every gold node reached (episodes with no gold count as failures)."""
        return self._all_reached(state.reached) & self._gold_valid.any(1)
