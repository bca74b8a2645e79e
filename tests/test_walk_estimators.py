"""Policy-gradient estimators (rl/walk/objectives.py) on a bandit walk: each estimator's gradient, averaged
over many sampled walks, against the analytic gradient of the expected reward; PPO's first epoch is
REINFORCE's step; its clipping stops the ratio's pull; the trainer runs every estimator."""

from __future__ import annotations

import pytest
import torch

from graphmem.core import Budget
from graphmem.policies.walk import rescore, step_logits, walk
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.objectives import LeaveOneOut, MovingBaseline, ppo_loss, reinforce_loss
from rl.walk.rewards import evidence_rewards
from tests.test_walk_objectives import bridge_part
from tests.test_walk_trainer import config, trainer, unseen_recall

ARMS = 4
BANDIT = Budget(max_entries=ARMS, top_k_neighbors=0, max_hops=0, max_nodes=1)  # one load among the entries
TAU = 1.0
WALKS = 6000


def bandit():
    """One question, its ``ARMS`` best-cosine nodes as entries; the third of them is the gold arm."""
    torch.manual_seed(0)
    tables, q, _, _ = bridge_part(0)
    q = q[:1]
    entries = (torch.nn.functional.normalize(q, dim=1) @ tables.x.T).topk(ARMS).indices
    scorer = WalkScorer(ScorerConfig(dim=32, rank=0, stop=False, lexical=False))
    with torch.no_grad():  # a policy that is not uniform over the arms through every parameter group
        for p in scorer.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return scorer, tables, q, entries, entries[:, 2:3]


def grad_of(scorer, loss) -> torch.Tensor:
    scorer.zero_grad(set_to_none=True)
    loss.backward()
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in scorer.parameters()])


def analytic(scorer, tables, q, entries, gold) -> torch.Tensor:
    """``∇_θ J`` with ``J = Σ_a π_θ(a) r(a)``, from the step-0 logits of the bandit (no sampling in the value)."""
    ctx = scorer.prepare(tables, q, entries)
    ep = walk(tables, scorer, q, entries, BANDIT, ctx=ctx)
    logits = step_logits(scorer, ctx, ep, BANDIT, rescore(scorer, ctx, ep))[0, 0] / TAU
    arms = ep.pool_node[0, : logits.shape[0]]
    reward = (arms == gold[0, 0]).float()
    return grad_of(scorer, -(torch.softmax(logits, -1) * reward).sum())  # the gradient of -J, as the losses


def sampled(scorer, tables, q, entries, gold, seed=1):
    rep = WALKS
    gen = torch.Generator().manual_seed(seed)
    qq, ee, gg = q.expand(rep, -1), entries.expand(rep, -1), gold.expand(rep, -1)
    ctx = scorer.prepare(tables, qq, ee)
    ep = walk(tables, scorer, qq, ee, BANDIT, sample=True, temperature=TAU, generator=gen, ctx=ctx)
    return ctx, ep, evidence_rewards(ep, gg), gg


@pytest.mark.parametrize("estimator", ["moving_average", "leave_one_out", "ppo"])
def test_estimator_gradient_matches_the_analytic_one(estimator):
    scorer, tables, q, entries, gold = bandit()
    want = analytic(scorer, tables, q, entries, gold)
    ctx, ep, rewards, _ = sampled(scorer, tables, q, entries, gold)
    assert 0.05 < float(rewards.sum()) / WALKS < 0.95  # the gold arm is neither certain nor never drawn
    if estimator == "ppo":
        adv = LeaveOneOut(WALKS).advantage(rewards, ep.acted)
        loss, _, _ = ppo_loss(scorer, ctx, ep, adv, None, BANDIT, TAU, clip=0.2)
    else:
        baseline = MovingBaseline(0.9) if estimator == "moving_average" else LeaveOneOut(WALKS)
        loss, _ = reinforce_loss(scorer, ctx, ep, rewards, baseline, BANDIT, TAU)
    got = grad_of(scorer, loss)
    assert want.norm() > 1e-3
    assert torch.nn.functional.cosine_similarity(got, want, dim=0) > 0.97
    assert (got - want).norm() / want.norm() < 0.15


def test_leave_one_out_advantage_by_hand():
    returns = torch.tensor([[1.0, 0.0, 0.5, 3.0, 1.0, 2.0]])  # two questions, three walks each
    adv = LeaveOneOut(3).advantage(returns, torch.ones_like(returns, dtype=torch.bool))
    assert torch.allclose(adv, torch.tensor([[0.75, -0.75, 0.0, 1.5, -1.5, 0.0]]))
    with pytest.raises(ValueError, match="groups of 4"):
        LeaveOneOut(4).advantage(returns, torch.ones_like(returns, dtype=torch.bool))


def test_ppo_first_epoch_is_reinforce_and_clipping_stops_the_pull():
    scorer, tables, q, entries, gold = bandit()
    ctx, ep, rewards, _ = sampled(scorer, tables, q, entries, gold)
    adv = LeaveOneOut(WALKS).advantage(rewards, ep.acted)
    ppo, _, old = ppo_loss(scorer, ctx, ep, adv, None, BANDIT, TAU)
    g_ppo = grad_of(scorer, ppo)
    ctx = scorer.prepare(tables, q.expand(WALKS, -1), entries.expand(WALKS, -1))
    pg, _ = reinforce_loss(scorer, ctx, ep, rewards, LeaveOneOut(WALKS), BANDIT, TAU)
    assert torch.allclose(g_ppo, grad_of(scorer, pg), atol=1e-6)
    # a π_old far from π: every ratio is outside [1 - ε, 1 + ε] on the side the advantage pushes, so no gradient
    ctx = scorer.prepare(tables, q.expand(WALKS, -1), entries.expand(WALKS, -1))
    far = old - torch.where(adv > 0, 1.0, -1.0) * ep.acted
    loss, stats, _ = ppo_loss(scorer, ctx, ep, adv, far, BANDIT, TAU, clip=0.2)
    assert stats["clip_fraction"] > 0.99
    assert grad_of(scorer, loss).abs().max() < 1e-8


@pytest.mark.parametrize(
    "objective",
    [
        {"estimator": "leave_one_out", "group_size": 4},
        {"estimator": "ppo", "group_size": 4, "ppo_epochs": 3, "kl_coef": 0.1},
        {"estimator": "ppo", "group_size": 1, "ppo_epochs": 2},
    ],
    ids=["leave_one_out", "ppo_group", "ppo_moving"],
)
def test_trainer_learns_the_bridge_with_each_estimator(objective):
    cfg = config(objective={"imitation_epochs": 0, "rl_epochs": 5, "temperature": 1.0, **objective})
    result = trainer(cfg).learn()
    assert unseen_recall(result.scorer) >= 0.9
    if objective["estimator"] == "ppo":
        assert all("clip_fraction" in r for r in result.history)


def test_policy_gradient_phase_temperature():
    o = config(objective={"temperature": 0.1, "rl_temperature": 1.0}).objective
    assert (o.tau("imitation"), o.tau("reinforce"), o.tau("hage_mdp")) == (0.1, 1.0, 1.0)
    assert config().objective.tau("reinforce") == 0.5  # unset: the one temperature
    with pytest.raises(ValueError, match="rl_temperature"):
        config(objective={"rl_temperature": 0.0})
