"""Data parallelism of the walk trainer over ``torch.distributed`` (``torchrun``; gloo on CPU, nccl on CUDA).

Every rank holds the scorer and all training graphs and questions. An optimizer step takes one
global batch of questions, the same on every rank (one permutation per epoch from the generator
seeded by ``run.seed``, which every rank advances alike), and rank ``r`` walks the ``r``-th
contiguous slice of it (:meth:`rl.common.distributed.World.shard`; sizes differ by at most one):

* **sampling**: the uniforms of a batch's draws are drawn for the whole global batch
  (``[T, B, W]``, :func:`batch_noise`) on every rank, and each rank walks with its rows of them,
  so a question's sampled walk is the one it gets in one process, whatever the split;
* **losses**: every mean over the batch (supervised steps, episodes, acted steps, the baseline's
  per-step means) takes its sums and counts summed over the ranks (``reduce`` of
  :mod:`rl.walk.objectives`), so rank ``r``'s loss ``L_r`` is its share of the one-process loss
  ``L = Σ_r L_r`` of the batch, also for slices of unequal size, and the baselines stay equal. The
  anchor ``L_anchor`` is taken on every rank over the pairs the whole batch touched (their union);
* **gradients**: :class:`torch.nn.parallel.DistributedDataParallel` around :class:`WalkLoss`, the
  module whose ``forward`` is the step's loss. DDP averages the ranks' gradients, so each rank
  back-propagates ``N · L_r + λ · L_anchor`` (``N`` ranks): the average is
  ``∇(Σ_r L_r) + λ ∇L_anchor``, the one-process gradient. Clipping and Adam then see the same
  gradient on every rank, and the replicas stay identical.

Rank 0 logs and writes the checkpoints; validation is sharded the same way and its recall summed.
One process sums the batch's terms in one reduction, ``N`` ranks in ``N`` parts added by the
all-reduce: the results agree to float rounding, not bit for bit (``tests/test_distributed.py``
checks the tolerance against one process at the same global batch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from graphmem.core import Budget
from graphmem.policies.walk import WalkTables, pool_width
from rl.common.distributed import World
from rl.walk.objectives import HageMDP, discounted_returns, imitation_loss, ppo_loss, recall_of, reinforce_loss


def batch_noise(tables: WalkTables, budget: Budget, entries: int, rows: int, generator: torch.Generator) -> Tensor:
    """``[T, rows, W]`` uniforms of one global batch's draws (``T = max_nodes``, ``W`` the pool and the stop)."""
    return torch.rand((budget.max_nodes, rows, pool_width(tables, budget, entries) + 1), generator=generator)


def summed(world: World, device: torch.device):
    """``reduce`` of :mod:`rl.walk.objectives`: a tensor summed over the ranks (a copy; the identity in one process)."""
    if not world.distributed:
        return lambda t: t

    def reduce(t: Tensor) -> Tensor:
        return world.all_reduce_sum(t.detach().to(device).clone())

    return reduce


class WalkLoss(nn.Module):
    """One step's loss of a rank: ``N · L_r + λ_anchor · L_anchor`` (module docstring), the module DDP wraps.

    Args:
        scorer: the trained :class:`models.walk_scorer.WalkScorer`.
        tables: the training graphs' tables.
        budget: the walk's budget.
        objective: the trainer's :class:`rl.walk.trainer.ObjectiveConfig`.
        world: this process's place among the ranks.
    """

    def __init__(self, scorer: nn.Module, tables: WalkTables, budget: Budget, objective, world: World):
        super().__init__()
        self.scorer, self.tables, self.budget, self.objective, self.world = scorer, tables, budget, objective, world
        self.mdp: HageMDP = objective.hage_mdp()
        self.reduce = summed(world, tables.x.device)

    def forward(self, batch, phase: str, baseline) -> tuple[Tensor, dict[str, Any]]:
        o, ep, reduce = self.objective, batch.episodes, self.reduce
        tau = o.tau(phase)
        if phase == "imitation":
            loss, _ = imitation_loss(self.scorer, batch.ctx, ep, batch.gold, self.tables, self.budget, tau, reduce)
            recall = recall_of(ep, batch.gold)
            total, n = (float(x) for x in reduce(torch.stack([recall.sum(), torch.tensor(float(len(recall)))])))
            stats = {"return": total / max(n, 1.0)}
        elif phase == "reinforce" and o.estimator == "ppo":
            if batch.advantage is None:  # fixed for the batch's epochs, as π_old
                batch.advantage = baseline.advantage(
                    discounted_returns(batch.rewards, ep.acted, o.gamma), ep.acted, reduce
                )
            loss, stats, logp = ppo_loss(
                self.scorer,
                batch.ctx,
                ep,
                batch.advantage,
                batch.old_logp,
                self.budget,
                tau,
                o.clip,
                o.kl_coef,
                o.entropy_coef,
                reduce,
            )
            batch.old_logp = logp if batch.old_logp is None else batch.old_logp
            n, total = (float(x) for x in reduce(torch.tensor([float(ep.acted.shape[1]), float(batch.rewards.sum())])))
            stats["return"] = total / max(n, 1.0)
        elif phase == "reinforce":
            loss, stats = reinforce_loss(
                self.scorer,
                batch.ctx,
                ep,
                batch.rewards,
                baseline,
                self.budget,
                tau,
                o.gamma,
                o.entropy_coef,
                reduce,
            )
        else:
            loss, stats = self.mdp.loss(self.scorer, batch.ctx, ep, batch.gold, batch.visited, baseline, tau, reduce)
        touched = torch.zeros(self.tables.pairs.num_pairs, dtype=torch.float64, device=ep.pool_pair.device)
        touched[ep.pool_pair[ep.pool_pair >= 0]] = 1.0
        pairs = (reduce(touched) > 0).nonzero().flatten()  # the pairs of the whole batch
        anchor = self.scorer.anchor_loss(batch.ctx, pairs)
        global_loss = float(reduce(loss.detach().double().reshape(1))[0])
        own = self.world.size * loss if self.world.distributed else loss
        total = own + o.anchor_lambda * anchor
        a = float(anchor.detach())
        return total, {**stats, "loss": global_loss + o.anchor_lambda * a, "anchor": a}
