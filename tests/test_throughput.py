"""The training benchmark times the step of the walk trainer scripts/train.py runs (rl.walk.trainer.WalkTrainer)."""

from omegaconf import OmegaConf

import rl.walk.trainer
from graphmem.config import compose
from rl.walk.throughput import training_throughput
from rl.walk.trainer import TrainConfig as WalkConfig
from rl.walk.trainer import WalkTrainer


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
