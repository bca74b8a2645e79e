"""Training objectives on walk episodes (:mod:`graphmem.policies.walk`): rewards, imitation of oracle walks, REINFORCE.

Gold rows enter here only (rewards and positives), never the walk or the scorer.

* Reward of step ``t`` of query ``b`` that loads node ``v_t``:

      r_t = 1(v_t ∈ G_b) / |G_b|  -  c_node                       (0 for the stop action)

  so ``Σ_t r_t`` is the evidence recall of the loaded set minus ``c_node`` per loaded node
  (:func:`rl.walk.rewards.evidence_rewards` minus :func:`rl.walk.rewards.costs`).
* Imitation (supervised warm start, DAgger-style: on the states the current policy visits): at
  step ``t`` the oracle's choices ``O_t`` are the open candidates whose target is gold, or, when
  none is, those whose target can still have children and has an out-pair to a gold node not yet
  loaded (a bridge). With the step logits ``l`` (:func:`graphmem.policies.walk.step_logits`, over ``τ``):

      L_SL = mean_{t, b : O_t ≠ ∅} [ logsumexp_a l_a - logsumexp_{a ∈ O_t} l_a ]

* REINFORCE with a moving-average baseline per step index:

      G_t = Σ_{k ≥ t} γ^{k-t} r_k,   b_t ← β b_t + (1 - β) mean_b G_t,   A_t = G_t - b_t
      L_PG = -(1/B) Σ_{b, t} log π(a_t | s_t) A_t  -  c_H mean H(π(· | s_t))

  (``B`` walks; other rewards: :mod:`rl.walk.rewards`).
* A group-relative baseline (RLOO; GRPO's group without its std scaling): each question is walked
  ``K`` times and walk ``i`` of a group is measured against the mean of the other ``K - 1``,

      A_{i,t} = G_{i,t} - (1 / (K - 1)) Σ_{j ≠ i} G_{j,t}

  which depends on no action of walk ``i``, so the estimator stays unbiased (:class:`LeaveOneOut`).
* PPO-clip: the batch's walks, advantages ``A`` and log-probabilities ``log π_old`` are kept and the
  loss is minimised for several epochs, with ``ρ_t = π(a_t | s_t) / π_old(a_t | s_t)``,

      L_PPO = -(1/B) Σ_{b, t} min(ρ_t A_t, clip(ρ_t, 1 - ε, 1 + ε) A_t)
              + β_KL (1/B) Σ_{b, t} [(ρ_t - 1) - log ρ_t]  -  c_H mean H(π(· | s_t))

  the middle term the non-negative estimator of KL(π_old || π). At ``ρ = 1`` (the first epoch)
  its gradient is REINFORCE's with the same advantages (:func:`ppo_loss`).

* HAGE's MDP (:class:`HageMDP`) as a selectable objective on episodes of the same walk and scorer.

Every batch mean above (over supervised steps, episodes, acted steps, and the baseline's means)
takes its sums and counts through ``reduce``: the identity in one process; under data parallelism
a sum over the ranks (:meth:`rl.common.distributed.World.all_reduce_sum`), so each rank's loss is
its share of the one-process loss of the whole batch and the baselines stay equal on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from graphmem.core import Budget
from graphmem.policies.walk import (
    CandidateScorer,
    WalkEpisodes,
    WalkTables,
    has_pair,
    rescore,
    step_log_probs,
    step_logits,
)
from rl.walk.rewards import evidence_rewards

Reduce = Callable[[Tensor], Tensor]


def local(t: Tensor) -> Tensor:
    """The ``reduce`` of one process: the tensor itself."""
    return t


def recall_of(ep: WalkEpisodes, gold: Tensor) -> Tensor:
    """``[B]`` evidence recall ``|L ∩ G| / |G|`` of each walk's loaded set: the summed evidence rewards."""
    return evidence_rewards(ep, gold).sum(0)


def oracle_positives(ep: WalkEpisodes, gold: Tensor, tables: WalkTables, budget: Budget) -> Tensor:
    """``[T, B, P]`` bool: the oracle's choices ``O_t`` (module docstring) among the open candidates."""
    node, real = ep.pool_node, gold >= 0
    is_gold = ((node[..., None] == gold[:, None, :]) & real[:, None, :]).any(-1)  # [B, P]
    # gold still pending before step t: not among the nodes loaded at steps < t  -> [T, B, G]
    loaded_at = (ep.loaded[:, :, None] == gold[:, None, :]) & real[:, None, :]  # [B, T, G]
    pending = ((torch.cumsum(loaded_at.long(), 1) - loaded_at.long()) == 0).transpose(0, 1) & real[None]
    shape = (*node.shape, gold.shape[1])
    near = has_pair(tables, node[:, :, None].expand(shape), gold[:, None, :].expand(shape))  # [B, P, G]
    can_grow = ep.pool_depth < budget.max_hops
    bridge = (near[None] & pending[:, :, None, :]).any(-1) & can_grow[None]  # [T, B, P]
    gold_open = ep.open & is_gold[None]
    bridge_open = ep.open & bridge & ~gold_open.any(-1, keepdim=True)
    return gold_open | bridge_open


def imitation_loss(
    scorer: CandidateScorer,
    ctx,
    ep: WalkEpisodes,
    gold: Tensor,
    tables: WalkTables,
    budget: Budget,
    temperature: float,
    reduce: Reduce = local,
) -> tuple[Tensor, Tensor]:
    """``(L_SL, number of supervised steps)`` (module docstring; both over ``reduce``), with gradients
    through the scorer."""
    positive = oracle_positives(ep, gold, tables, budget)
    logits = step_logits(scorer, ctx, ep, budget, rescore(scorer, ctx, ep)) / temperature
    if logits.shape[-1] > positive.shape[-1]:  # the stop action is never the oracle's choice
        positive = torch.cat([positive, torch.zeros_like(positive[..., :1])], -1)
    supervised = positive.any(-1)
    count = reduce(supervised.sum().double())
    if not bool(supervised.any()):
        return logits.sum() * 0.0, count
    lg = logits[supervised]
    all_lse = torch.logsumexp(lg, -1)
    pos_lse = torch.logsumexp(lg.masked_fill(~positive[supervised], float("-inf")), -1)
    return (all_lse - pos_lse).sum() / count.clamp(min=1).to(lg.dtype), count


def discounted_returns(rewards: Tensor, acted: Tensor, gamma: float) -> Tensor:
    """``[T, B]`` ``G_t = Σ_{k ≥ t} γ^{k-t} r_k`` (0 where the walk did not act)."""
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out * acted.float()


@dataclass
class MovingBaseline:
    """``b_t ← β b_t + (1 - β) mean_b G_t``, one value per step index ``t`` (``per_step=False``: one
    value for all steps, as HAGE's); it starts at the first batch's means."""

    beta: float = 0.99
    per_step: bool = True
    values: Tensor | None = None

    def advantage(self, returns: Tensor, acted: Tensor, reduce: Reduce = local) -> Tensor:
        """``[T, B]`` ``(G_t - b_t)`` on the acted steps (0 elsewhere), then the update of ``b`` (means over
        ``reduce``)."""
        mask = acted.float()
        if self.per_step:
            n, total = mask.sum(1), (returns * mask).sum(1)
        else:
            n, total = mask.sum()[None], (returns * mask).sum()[None]
        n, total = reduce(torch.stack([n, total]).double()).to(returns.dtype)
        mean = total / n.clamp(min=1)
        if self.values is None:
            self.values = mean.detach().clone()
        b = self.values[:, None] if self.per_step else self.values
        adv = (returns - b) * mask
        self.values = torch.where(n > 0, self.beta * self.values + (1 - self.beta) * mean.detach(), self.values)
        return adv


@dataclass
class LeaveOneOut:
    """The group-relative baseline (module docstring): the walks of a batch come in groups of ``group``
    consecutive columns, the walks of one question."""

    group: int

    def advantage(self, returns: Tensor, acted: Tensor, reduce: Reduce = local) -> Tensor:
        """``[T, B]`` ``G_{i,t} - mean_{j ≠ i} G_{j,t}`` on the acted steps (0 elsewhere)."""
        k = self.group
        if k < 2 or returns.shape[1] % k:
            raise ValueError(f"LeaveOneOut: {returns.shape[1]} walks do not form groups of {k} >= 2")
        g = returns.view(returns.shape[0], -1, k)
        others = (g.sum(-1, keepdim=True) - g) / (k - 1)
        return (g - others).view_as(returns) * acted.float()


def ppo_loss(
    scorer: CandidateScorer,
    ctx,
    ep: WalkEpisodes,
    advantage: Tensor,
    old_logp: Tensor | None,
    budget: Budget,
    temperature: float,
    clip: float = 0.2,
    kl_coef: float = 0.0,
    entropy_coef: float = 0.0,
    reduce: Reduce = local,
) -> tuple[Tensor, dict[str, float], Tensor]:
    """``(L_PPO, stats, log π)`` (module docstring) of recorded walks ``ep`` with fixed ``advantage``
    ``[T, B]``; ``old_logp`` ``None`` takes ``π_old`` as the current policy (the first epoch)."""
    acted = ep.acted
    logp, entropy = step_log_probs(scorer, ctx, ep, budget, temperature)
    old = logp.detach() if old_logp is None else old_logp
    log_ratio = (logp - old).masked_fill(~acted, 0.0)
    ratio = log_ratio.exp()
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage) * acted
    kl = ((ratio - 1) - log_ratio) * acted
    sums = reduce(torch.stack([torch.tensor(float(acted.shape[1])), acted.sum().cpu()]).double())
    bsz, steps = (max(float(x), 1.0) for x in sums)
    ent = (entropy * acted).sum() / steps
    loss = -surrogate.sum() / bsz + kl_coef * kl.sum() / bsz - entropy_coef * ent
    clipped = ((ratio - 1).abs() > clip) & acted
    extra = reduce(torch.stack([kl.sum(), clipped.sum().float(), (entropy * acted).sum()]).detach().double().cpu())
    stats = {"kl": float(extra[0]) / bsz, "clip_fraction": float(extra[1]) / steps, "entropy": float(extra[2]) / steps}
    return loss, stats, logp.detach()


def reinforce_loss(
    scorer: CandidateScorer,
    ctx,
    ep: WalkEpisodes,
    rewards: Tensor,
    baseline: MovingBaseline,
    budget: Budget,
    temperature: float,
    gamma: float = 1.0,
    entropy_coef: float = 0.0,
    reduce: Reduce = local,
) -> tuple[Tensor, dict[str, float]]:
    """``L_PG`` (module docstring) for sampled episodes ``ep`` and their rewards ``[T, B]``."""
    acted = ep.acted
    returns = discounted_returns(rewards, acted, gamma)
    adv = baseline.advantage(returns, acted, reduce)
    logp, entropy = step_log_probs(scorer, ctx, ep, budget, temperature)
    sums = reduce(torch.stack([torch.tensor(float(acted.shape[1])), acted.sum().cpu(), rewards.sum().cpu()]).double())
    bsz, steps, total = (float(x) for x in sums)
    pg = -(logp * adv.detach()).sum() / max(bsz, 1.0)
    ent_sum = (entropy * acted).sum()
    ent = ent_sum / max(steps, 1.0)
    ent_all = float(reduce(ent_sum.detach().double().reshape(1))[0]) / max(steps, 1.0)
    stats = {"return": total / max(bsz, 1.0), "entropy": ent_all}
    return pg - entropy_coef * ent, stats


# ---------------------------------------------------------------------------- HAGE's MDP on the walk
@dataclass(frozen=True)
class HageMDP:
    """HAGE's traversal MDP (§3, Appendix B) as episodes of the same walk, for the same scorer.

    An episode starts at one of the question's entries (one episode for each of its best
    ``starts_per_question``); the other entries count as visited. Each step moves along an
    out-pair of any visited node (the ``frontier`` action space) to an unvisited node:

        r_t = R_hit · |{v_t} ∩ (G \\ reached)| - λ_step    (- λ_timeout at t = H_max with gold unreached)

    and the episode ends when every gold node is reached, at a dead end, or after ``H_max`` steps.
    As a walk: one entry, no fan-out cap, depth and steps up to ``H_max``, no token cap, no stop
    action; steps after the end carry no reward and no log-probability. HAGE's baseline is one
    moving average over all steps (``baseline_beta``).
    """

    max_hops: int = 5
    """H_max: steps before an episode times out"""
    hit_reward: float = 10.0
    """R_hit: reward per newly reached gold node"""
    step_penalty: float = 0.05
    """λ_step: cost of every step"""
    timeout_penalty: float = 1.0
    """λ_timeout: extra cost when H_max is hit with gold left unreached"""
    starts_per_question: int = 2
    """episodes per question, one from each of its best entries"""
    gamma: float = 0.99
    """return discount"""
    baseline_beta: float = 0.99
    """decay of the one moving-average baseline over all steps"""

    def budget(self) -> Budget:
        return Budget(
            max_entries=1,
            top_k_neighbors=1 << 30,
            max_hops=self.max_hops,
            max_nodes=self.max_hops + 1,
            max_tokens=1 << 62,
        )

    def episodes(self, entries: Tensor, gold: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(question row [M], start [M, 1], blocked [M, E], gold [M, G])`` of the episodes of ``B`` questions."""
        k = min(self.starts_per_question, entries.shape[1])
        row, col = (entries[:, :k] >= 0).nonzero(as_tuple=True)
        start = entries[row, col][:, None]
        blocked = entries[row].masked_fill(entries[row] == start, -1)
        return row, start, blocked, gold[row]

    def rewards(self, ep: WalkEpisodes, gold: Tensor, visited: Tensor) -> tuple[Tensor, Tensor]:
        """``(rewards [T, B], live [T, B])``: the MDP's rewards and the steps inside the episode.

        ``visited`` ``[B, V]`` holds the nodes visited at the start (the start and the other entries).
        Step 0 only places the episode at its start: it is not an action.
        """
        real = gold >= 0
        reached = ((gold[:, :, None] == visited[:, None, :]) & (visited[:, None, :] >= 0)).any(-1) & real
        steps, bsz = ep.action.shape
        rewards = torch.zeros(steps, bsz, device=gold.device)
        live = torch.zeros(steps, bsz, dtype=torch.bool, device=gold.device)
        done = (reached | ~real).all(1)
        for t in range(1, steps):
            v = ep.loaded[:, t]
            acting = ~done & (v >= 0)
            hit = (gold == v[:, None]) & real & ~reached & acting[:, None]
            reached = reached | hit
            finished = (reached | ~real).all(1)
            timeout = acting & ~finished & (t >= self.max_hops)
            rewards[t] = self.hit_reward * hit.sum(1) - self.step_penalty * acting - self.timeout_penalty * timeout
            live[t] = acting
            done = done | ~acting | finished | timeout
        return rewards, live

    def loss(
        self,
        scorer: CandidateScorer,
        ctx,
        ep: WalkEpisodes,
        gold: Tensor,
        visited: Tensor,
        baseline,
        temperature,
        reduce: Reduce = local,
    ) -> tuple[Tensor, dict[str, float]]:
        """REINFORCE on the MDP episodes: ``-(1/M) Σ log π(a_t|s_t) (G_t - b)`` over the live steps."""
        rewards, live = self.rewards(ep, gold, visited)
        returns = discounted_returns(rewards, live, self.gamma)
        adv = baseline.advantage(returns, live, reduce)
        logp, _ = step_log_probs(scorer, ctx, ep, self.budget(), temperature)
        sums = reduce(torch.tensor([float(live.shape[1]), float(rewards.sum())], dtype=torch.float64))
        episodes, total = (float(x) for x in sums)
        loss = -(logp * adv.detach() * live).sum() / max(episodes, 1.0)
        return loss, {"return": total / max(episodes, 1.0)}
