"""Data-parallel training of the walk (rl/walk/parallel.py): ``torchrun --nproc_per_node=2 scripts/train.py``
(2 gloo ranks on CPU) writes the checkpoint one process writes at the same global batch, to float rounding.

Tolerance: one process sums a batch's gradient terms in one reduction, two ranks in two halves that the
all-reduce adds, so gradients agree to float32 rounding. Adam divides each gradient by its running
RMS, so a weight whose true gradient is at rounding level (a bias of a ReLU unit that is off on
almost every input) takes steps of up to ``lr`` in a direction the rounding picks. So: all but
0.1% of the weights agree to 1e-6 and every weight to 10 lr, while what is discrete is equal: every
sampled walk (the epochs' returns and validation recalls), the selected epoch, the test recall, the
files written (rank 0 only).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

from graphmem.policies.walk import walk
from rl.common.checkpoint import load_checkpoint
from rl.common.distributed import World
from rl.walk.parallel import batch_noise
from tests.small_sets import saved_locomo_set
from tests.test_walk_trainer import config, trainer

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE, OUTLIERS = 1e-6, 1e-3
LR = 3e-3  # configs/trainer/default.yaml: optim.lr (the larger of the two phases' rates)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _train_args(graphset: Path, out: Path) -> list[str]:
    # 1 + 1 epochs; batches of 45 questions (ranks: 23 + 22), the last one smaller: unequal slices
    return [
        "scripts/train.py",
        f"graphset={graphset}",
        f"out_dir={out}",
        "logger=none",
        "progress=false",
        "baselines=[]",
        "stats.reference=null",
        "cv.k=3",
        "cv.folds=[0]",
        "trainer.run.device=cpu",
        "trainer.objective.imitation_epochs=1",
        "trainer.objective.rl_epochs=1",
        "trainer.optim.batch_size=45",
        "hydra.run.dir=" + str(out / "hydra"),
    ]


def test_torchrun_two_ranks_write_the_one_process_checkpoint(tmp_path):
    graphset = saved_locomo_set(tmp_path, limit=3)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2"]
    torchrun += ["--master_addr=127.0.0.1", f"--master_port={_free_port()}"]
    runs = {
        "ddp": subprocess.Popen(
            torchrun + _train_args(graphset, tmp_path / "ddp"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "one": subprocess.Popen(
            [sys.executable, *_train_args(graphset, tmp_path / "one")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
    for name, proc in runs.items():
        log = proc.communicate(timeout=240)[0]
        assert proc.returncode == 0, f"{name}:\n{log[-4000:]}"
    results = {name: json.loads((tmp_path / name / "results.json").read_text()) for name in runs}
    assert results["ddp"]["world_size"] == 2 and results["one"]["world_size"] == 1
    ckpt = {name: tmp_path / name / "fold0" / "router" for name in runs}
    assert sorted(p.name for p in ckpt["ddp"].glob("*.pt")) == ["best.pt", "last.pt"]
    for file in ("last.pt", "best.pt"):
        ddp, one = (load_checkpoint(ckpt[name] / file, "walk") for name in ("ddp", "one"))
        assert ddp["phase"] == one["phase"] and ddp["epoch"] == one["epoch"]
        assert ddp["best"][:2] == one["best"][:2]
        a, b = ddp["scorer"]["state_dict"], one["scorer"]["state_dict"]
        assert a.keys() == b.keys()
        diff = torch.cat([(a[k] - b[k]).abs().flatten() for k in a])
        assert float((diff > TOLERANCE).float().mean()) <= OUTLIERS and float(diff.max()) < 10 * LR, (file, diff.max())
        moved = float(b["head.2.weight"].abs().max())  # zero at initialisation
        assert moved > 1000 * TOLERANCE  # training moved the weights far beyond the tolerance
        for got, want in zip(ddp["history"], one["history"]):  # the same sampled walks, epoch by epoch
            assert got["phase"] == want["phase"] and got["epoch"] == want["epoch"]
            assert abs(got["return"] - want["return"]) < 1e-6 and abs(got["val_return"] - want["val_return"]) < 1e-6
        assert len(ddp["history"]) == len(one["history"]) == (2 if file == "last.pt" else len(ddp["history"]))
    test = {name: r["summary"]["router"]["evidence_recall"]["mean"] for name, r in results.items()}
    assert abs(test["ddp"] - test["one"]) < 1e-6


def perturbed(t):
    """``t`` with its scorer's weights randomised (zero-initialised layers included), so the walks read the
    lexical features of their questions."""
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in t.scorer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return t


def other_questions_lexical(t):
    """The rollouts' lexical inputs moved one question on (each row reads another question's terms)."""
    lex = t.train.lexical
    t.train.lexical = dataclasses.replace(lex, queries=lex.queries[torch.roll(torch.arange(len(lex.queries)), 1)])
    return lex


def test_each_rank_walks_its_rows_of_the_batch_walk():
    t = perturbed(trainer(config(run={"device": "cpu"})))
    rows = torch.arange(len(t.train))[: 2 * (len(t.train) // 2) - 1]  # odd: slices of unequal size
    state = t.generator.get_state()
    whole = t.rollout(rows, "reinforce").episodes
    parts = []
    for rank in range(2):
        t.world = World(rank, 2)
        t.generator.set_state(state)
        parts.append(t.rollout(rows, "reinforce").episodes)
    assert sum(p.loaded.shape[0] for p in parts) == whole.loaded.shape[0]
    assert {p.loaded.shape[0] for p in parts} == {len(rows) // 2, len(rows) // 2 + 1}
    assert torch.equal(torch.cat([p.loaded for p in parts]), whole.loaded)
    assert torch.equal(torch.cat([p.action for p in parts], 1), whole.action)
    # and the draws are what sampled them: other noise walks otherwise
    d = t.train
    noise = batch_noise(d.tables, t.budget, d.entries.shape[1], len(rows), torch.Generator().manual_seed(99))
    other = walk(
        d.tables, t.scorer, d.q[rows], d.entries[rows], t.budget, True, 1.0, noise=noise, lexical=d.lexical[rows]
    )
    assert not torch.equal(other.loaded, whole.loaded)
    # ... and each row's lexical inputs are its question's: another question's walk otherwise
    t.world = World(0, 1)
    own = other_questions_lexical(t)
    t.generator.set_state(state)
    moved = t.rollout(rows, "reinforce").episodes
    assert not torch.allclose(moved.scores, whole.scores, equal_nan=True)  # (small walks: the actions may agree)
    t.train.lexical = own


def test_each_rank_walks_its_rows_of_the_hage_mdp_episodes():
    """HAGE's MDP episodes of a batch, split over two ranks (each preparing its episodes with their
    questions' lexical inputs), are the episodes of the whole batch."""
    t = perturbed(trainer(config(run={"device": "cpu"}, objective={"rl": "hage_mdp"})))
    assert t.scorer.config.lexical
    rows = torch.arange(len(t.train))[: 2 * (len(t.train) // 2) - 1]
    state = t.generator.get_state()
    whole = t.rollout(rows, "hage_mdp").episodes
    own = other_questions_lexical(t)  # the features of other questions walk otherwise: the slices must be right
    t.generator.set_state(state)
    assert not torch.equal(t.rollout(rows, "hage_mdp").episodes.action, whole.action)
    t.train.lexical = own
    parts = []
    for rank in range(2):
        t.world = World(rank, 2)
        t.generator.set_state(state)
        parts.append(t.rollout(rows, "hage_mdp").episodes)
    assert all(p.loaded.shape[0] > 0 for p in parts)
    assert torch.equal(torch.cat([p.loaded for p in parts]), whole.loaded)
    assert torch.equal(torch.cat([p.action for p in parts], 1), whole.action)
