"""A training that diverges stops in one line naming fold, epoch and step, writes no best.pt and no results, and
exits non-zero; a checkpoint holding non-finite tensors, or written by a training that never finished, is refused;
learning rates and the ranking head's settings are checked before any work."""

import math

import pytest
import torch
from script_loader import load_script

import rl.walk.parallel
from graphmem.config.bounds import BoundsError, check_bounds
from graphmem.config.cli import run_or_exit
from graphmem.config.schemas import compose
from graphmem.core.errors import DivergedError
from graphmem.policies.router import RouterPolicy
from graphmem.store.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.rank import RankConfig
from rl.walk.trainer import TrainConfig
from tests.small_sets import saved_locomo_set
from tests.test_walk_trainer import config, trainer

GIB = 1 << 30


def nan_after(calls: int, forward):
    """``WalkLoss.forward`` whose loss turns NaN from its ``calls + 1``-th call on (as Adam at a huge step would)."""
    seen = []

    def diverging(self, *args, **kwargs):
        total, stats = forward(self, *args, **kwargs)
        seen.append(1)
        return (total * math.nan if len(seen) > calls else total), stats

    return diverging


def test_a_diverged_train_py_run_stops_naming_fold_epoch_and_step(tmp_path, monkeypatch, capsys):
    s = saved_locomo_set(tmp_path, limit=3)
    out = tmp_path / "run"
    cfg = compose(
        "train",
        [
            f"graphset={s}",
            "cv.k=3",
            "cv.folds=[0]",
            "baselines=[dense_topk]",
            "stats.n_boot=100",
            "trainer.run.device=cpu",
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=1",
            "trainer.optim.batch_size=8",
            "logger=none",
            "progress=false",
            f"out_dir={out}",
        ],
    )
    monkeypatch.setattr(rl.walk.parallel.WalkLoss, "forward", nan_after(1, rl.walk.parallel.WalkLoss.forward))
    with pytest.raises(SystemExit) as stop:
        run_or_exit(load_script("train").run, cfg)
    assert stop.value.code == 3
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: fold 0 router: loss is nan in imitation epoch 0 step 1"), (
        lines
    )
    assert "nothing promoted to best.pt" in lines[0] and "no results.json written" in lines[0]
    assert not (out / "results.json").exists() and not (out / "fold0" / "router" / "best.pt").exists()
    assert not list(out.glob("questions_*.jsonl"))


def test_non_finite_weights_after_a_step_stop_the_trainer(monkeypatch):
    t = trainer(config(objective={"imitation_epochs": 1, "rl_epochs": 0}))
    step = torch.optim.Adam.step

    def poisoned(self, *args, **kwargs):
        result = step(self, *args, **kwargs)
        with torch.no_grad():
            self.param_groups[0]["params"][0].fill_(math.inf)
        return result

    monkeypatch.setattr(torch.optim.Adam, "step", poisoned)
    with pytest.raises(
        DivergedError, match=r"holds \d+ non-finite values after the optimizer step of imitation epoch 0"
    ):
        t.learn()


def test_a_checkpoint_with_a_non_finite_tensor_is_refused(tmp_path):
    scorer = WalkScorer(ScorerConfig(dim=4)).checkpoint()
    name = next(k for k, v in scorer["state_dict"].items() if v.is_floating_point())
    scorer["state_dict"][name] = torch.full_like(scorer["state_dict"][name], math.nan)  # the checksum is restamped
    path = save_checkpoint(tmp_path / "nan.pt", "walk", {"scorer": scorer, "finished": True})
    with pytest.raises(CheckpointError, match=rf"tensor 'scorer/state_dict/{name}' holds \d+ NaN or infinite values"):
        load_checkpoint(path, "walk")
    with pytest.raises(CheckpointError, match="NaN or infinite"):
        RouterPolicy(checkpoint=path, device="cpu")


def test_a_killed_trainings_best_pt_is_refused_and_a_finished_one_loads(tmp_path, monkeypatch):
    t = trainer(config(objective={"imitation_epochs": 2, "rl_epochs": 0}, run={"checkpoint_dir": str(tmp_path)}))
    save = t.save

    def killed_after_best(name, phase, epoch):
        path = save(name, phase, epoch)
        if name == "best.pt":
            raise KeyboardInterrupt  # the process dies after its first best.pt
        return path

    monkeypatch.setattr(t, "save", killed_after_best)
    with pytest.raises(KeyboardInterrupt):
        t.learn()
    with pytest.raises(CheckpointError, match=r"best.pt: written by a training that never finished \(saved at phase 0"):
        RouterPolicy(checkpoint=tmp_path / "best.pt", device="cpu")
    done = tmp_path / "done"
    trainer(config(objective={"imitation_epochs": 2, "rl_epochs": 0}, run={"checkpoint_dir": str(done)})).learn()
    assert load_checkpoint(done / "best.pt", "walk")["finished"] is True
    assert RouterPolicy(checkpoint=done / "best.pt", device="cpu").scorer is not None


@pytest.mark.parametrize(
    "override, message",
    [
        ("trainer.optim.lr=1e20", "trainer.optim.lr=1e+20: must be a finite number in (0, 10]"),
        ("trainer.optim.rl_lr=1e38", "trainer.optim.rl_lr=1e+38: must be a finite number in (0, 10]"),
        ("trainer.optim.weight_decay=-1", "trainer.optim.weight_decay=-1.0: must be a finite number in [0, 10]"),
        ("trainer.rank.lr=inf", "trainer.rank.lr=inf: must be a finite number in (0, 10]"),
    ],
)
def test_learning_rates_are_bounded_when_the_config_is_composed(override, message):
    with pytest.raises(BoundsError) as refused:
        check_bounds("train", compose("train", [override]), memory=64 * GIB)
    assert str(refused.value) == message


def test_a_variants_learning_rate_meets_the_same_bound():
    with pytest.raises(BoundsError, match=r"trainer.optim.rl_lr=1e\+38: must be a finite number in \(0, 10\]"):
        TrainConfig.merged({}, {"optim": {"rl_lr": 1e38}})


@pytest.mark.parametrize("epochs", [0, 30])
def test_a_bogus_rank_residual_is_refused_before_the_walk_trains(epochs):
    with pytest.raises(ValueError, match=r"trainer.rank.residual='bogus': must be one of \['cosine', 'load_order'"):
        RankConfig(epochs=epochs, residual="bogus")
    with pytest.raises(ValueError, match="trainer.rank.residual='bogus'"):
        load_script("train").check(compose("train", [f"trainer.rank.epochs={epochs}", "trainer.rank.residual=bogus"]))
