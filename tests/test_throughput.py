"""HAGE's trainer takes every step through rl.reinforce.ReinforceStep; the training benchmark times
the step of the walk trainer scripts/train.py runs (rl.walk.trainer.WalkTrainer)."""

import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

import rl.reinforce
import rl.walk.trainer
from graphmem.config import compose
from rl.reinforce import ReinforceStep, TrainConfig, train
from rl.walk.throughput import training_throughput
from rl.walk.trainer import TrainConfig as WalkConfig
from rl.walk.trainer import WalkTrainer

sys.path.insert(0, str(Path(__file__).parent))
from bridge_tasks import BRIDGE_BUDGET, bridge_tasks  # noqa: E402


def test_train_takes_every_step_through_reinforce_step(monkeypatch):
    graphs, questions, emb = bridge_tasks(range(20))
    calls = []
    real = ReinforceStep.__call__

    def counted(self, rows, epoch, step):
        calls.append((epoch, step, len(rows)))
        return real(self, rows, epoch, step)

    monkeypatch.setattr(rl.reinforce.ReinforceStep, "__call__", counted)
    cfg = TrainConfig(epochs=2, batch_size=8, device="cpu", starts_per_question=1, eval_every=2)
    result = train(cfg, graphs, questions, emb, budget=BRIDGE_BUDGET)
    # 20 questions in batches of 8: steps of 8, 8 and 4 questions in each epoch
    assert calls == [(e, s, n) for e in range(2) for s, n in enumerate([8, 8, 4])]
    assert all(row["episodes"] == 20 for row in result.history)


def test_a_step_moves_the_router_the_edge_features_and_the_baseline():
    graphs, questions, emb = bridge_tasks(range(8))
    cfg = TrainConfig(device="cpu", starts_per_question=1, anchor_lambda=1.0)
    from graphmem.graph_batch import GraphBatch
    from graphmem.policies.base import Budget
    from graphmem.policies.selectors import make_entry_selector
    from rl.reinforce import build_modules, prepare_questions

    batch = GraphBatch.from_graphs(graphs)
    data = prepare_questions(batch, graphs, questions, emb, Budget(), make_entry_selector("embedding"))
    torch.manual_seed(0)
    step = ReinforceStep(cfg, *build_modules(cfg, graphs, emb.shape[1]), batch, data)
    before = [p.detach().clone() for p in step.trained]
    out = step(torch.arange(len(data["q"])), 0, 0)
    assert step.baseline is not None and out["episodes"] == len(data["q"])
    moved = [not torch.equal(a, p) for a, p in zip(before, step.trained)]
    assert moved[-1] and any(moved[:-1])  # the edge features (last) and the router / intent head


def test_training_throughput_times_the_walk_trainers_rollout_and_update(monkeypatch):
    """The timed step is train.py's trainer's own, with train.py's default trainer config."""
    calls, configs = [], []
    real_rollout, real_update = WalkTrainer.rollout, WalkTrainer.update

    def rollout(self, rows, phase):
        calls.append(("rollout", phase, len(rows)))
        return real_rollout(self, rows, phase)

    def update(self, batch, phase):
        calls.append(("update", phase, len(batch.rows)))
        configs.append(self.cfg)
        return real_update(self, batch, phase)

    monkeypatch.setattr(rl.walk.trainer.WalkTrainer, "rollout", rollout)
    monkeypatch.setattr(rl.walk.trainer.WalkTrainer, "update", update)
    run = training_throughput(nodes=200, dim=8, batch=16, single=4, repeats=1)
    # per phase: the warm-up step of 8, one round of 4 batch-1 steps, one batched round, the peak-memory round
    sizes = [8, 1, 1, 1, 1, 16, 16]
    assert calls == [(k, p, n) for p in ("imitation", "reinforce") for n in sizes for k in ("rollout", "update")]
    train_py = WalkConfig.from_mapping(OmegaConf.to_container(compose("train").trainer, resolve=True))
    assert all((c.model, c.objective, c.optim) == (train_py.model, train_py.objective, train_py.optim) for c in configs)
    assert run["update"] == "rl.walk.trainer.WalkTrainer.rollout+update" and run["phase"] == "reinforce"
    for rates in run["phases"].values():
        assert rates["batch1_questions_per_s"] > 0 and rates["batched_questions_per_s"] > 0
        assert rates["speedup"] == rates["batched_episodes_per_s"] / rates["batch1_episodes_per_s"]
        assert rates["cpu_speedup"] == rates["batched_questions_per_cpu_s"] / rates["batch1_questions_per_cpu_s"] > 0
        # one walk episode per question in both modes
        assert rates["batched_episodes_per_s"] == rates["batched_questions_per_s"]
    assert run["speedup"] == run["phases"]["reinforce"]["speedup"]
