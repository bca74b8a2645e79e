"""The training benchmark times the step of the walk trainer scripts/train.py runs (rl.walk.trainer.WalkTrainer)."""

from omegaconf import OmegaConf
from train_throughput import training_throughput

import rl.walk.trainer
from rl.walk.trainer import TrainConfig as WalkConfig
from rl.walk.trainer import WalkTrainer
from tests.script_loader import compose


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


def test_thread_cliff_runs_three_modes_beside_one_busy_process_and_stops_it(monkeypatch):
    """Each mode runs in its own process with its environment (OMP_NUM_THREADS unset, or 1); the ratios are
    of the median step seconds; the busy process runs throughout and is stopped at the end."""
    import json
    import subprocess

    import train_throughput as tp

    seen, busy = [], []
    real_popen = subprocess.Popen

    def popen(args, **kw):
        busy.append(real_popen(args, **kw))
        return busy[-1]

    def run(args, env, **kw):
        mode = json.loads(args[-1])["mode"]
        assert busy[0].poll() is None  # the busy process is running during every mode
        seen.append((mode, env.get("OMP_NUM_THREADS")))
        seconds = {"forced": [4.0, 6.0], "default": [1.0, 1.0], "omp1": [1.0, 1.0]}[mode]
        out = json.dumps({"threads": 2 if mode == "forced" else 1, "interop": 1, "s": seconds})
        return subprocess.CompletedProcess(args, 0, stdout=out + "\n", stderr="")

    monkeypatch.setattr(tp.subprocess, "Popen", popen)
    monkeypatch.setattr(tp.subprocess, "run", run)
    monkeypatch.setattr(tp.time, "sleep", lambda s: None)
    got = tp.thread_cliff(steps=2, rounds=2)
    assert seen == [("forced", None), ("default", None), ("omp1", "1")] * 2
    assert busy[0].poll() is not None  # stopped
    assert got["forced_over_omp1"] == 5.0 and got["default_over_omp1"] == 1.0
    assert got["modes"]["forced"]["torch_threads"] == 2 and got["modes"]["omp1"]["step_s_rounds"] == [1.0, 1.0]


def test_step_seconds_times_real_training_steps():
    from train_throughput import step_seconds

    got = step_seconds(nodes=100, dim=8, batch=4, steps=2)
    assert len(got) == 2 and all(s > 0 for s in got)
