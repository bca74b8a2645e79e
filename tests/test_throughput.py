"""The training benchmark times the trainer's own update step (rl.reinforce.ReinforceStep)."""

import sys
from pathlib import Path

import torch

import rl.reinforce
from rl.reinforce import ReinforceStep, TrainConfig, train
from rl.throughput import training_throughput

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


def test_training_throughput_times_the_trainer_step():
    run = training_throughput(nodes=200, dim=8, batch=16, single=4, repeats=1)
    assert run["update"] == "rl.reinforce.ReinforceStep" and run["starts_per_question"] == 2
    assert run["batch1_questions_per_s"] > 0 and run["batched_questions_per_s"] > 0
    assert run["speedup"] == run["batched_episodes_per_s"] / run["batch1_episodes_per_s"]
    assert run["cpu_speedup"] == run["batched_questions_per_cpu_s"] / run["batch1_questions_per_cpu_s"] > 0
    # two episodes per question (starts_per_question) in both modes
    assert abs(run["batched_episodes_per_s"] / run["batched_questions_per_s"] - 2) < 1e-9
