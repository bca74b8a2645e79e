"""Same seed, same thread count: two ``train.py`` runs log bit-identical numbers.

The runs are separate processes with different ``PYTHONHASHSEED`` on real LoCoMo conversations
(big enough that torch splits the backward of indexing over both threads), and every number they
log — per-epoch losses, returns, baselines, validation recall, the selected epoch, the test
metrics of the router and of a baseline — must be equal, float for float. Wall times are left out.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphmem.tracking import read_runs
from tests.small_sets import saved_locomo_set

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("time", "seconds", "wall_s", "train_wall_s", "latency_s", "latency_p50_s", "latency_p95_s")


def _numbers(value, path=""):
    """Every number in a JSON value, keyed by its path (timing fields left out)."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            leaf = k.rsplit("/", 1)[-1]  # tracker keys carry a fold/variant prefix
            if not (leaf in TIMING or leaf.startswith("latency")):
                out.update(_numbers(v, f"{path}.{k}"))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_numbers(v, f"{path}[{i}]"))
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return {path: "nan" if isinstance(value, float) and math.isnan(value) else value}
    return {}


@pytest.fixture(scope="module")
def graphset_dir(tmp_path_factory):
    return saved_locomo_set(tmp_path_factory.mktemp("det"), limit=3)


def _train(graphset_dir, out, hash_seed):
    cmd = [
        sys.executable,
        "scripts/train.py",
        f"graphset={graphset_dir}",
        "logger=wandb",
        "logger.mode=disabled",  # the JSONL tracker: each run's history.jsonl holds every logged row
        "progress=false",
        "cv.k=3",
        "cv.folds=[0]",
        "trainer.objective.imitation_epochs=2",  # two imitation epochs, then one REINFORCE epoch
        "trainer.objective.rl_epochs=1",
        "trainer.run.device=cpu",
        "baselines=[dense_topk]",
        f"out_dir={out}",
        f"hydra.run.dir={out}/hydra",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": str(hash_seed), "OMP_NUM_THREADS": "2"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted(read_runs(out / "tracking"), key=lambda r: r.name)  # one run per (fold, variant) + summary
    metrics = {r.name: {"history": [{k: v for k, v in row.items() if k != "_time"} for row in r.history]} for r in runs}
    metrics |= {f"{r.name}.summary": r.summary for r in runs}
    results = json.loads((out / "results.json").read_text())
    return _numbers(metrics), _numbers({k: results[k] for k in ("records", "summary")})


def test_two_training_runs_log_identical_numbers(graphset_dir, tmp_path):
    first = _train(graphset_dir, tmp_path / "a", hash_seed=1)
    second = _train(graphset_dir, tmp_path / "b", hash_seed=2)
    logged, results = first
    assert len([k for k in logged if ".history[" in k and k.endswith("loss")]) == 3  # one loss per epoch was logged
    assert any("best_epoch" in k for k in results) and any("evidence_recall" in k for k in results)
    differing = {k: (v, second[0].get(k)) for k, v in logged.items() if second[0].get(k) != v}
    assert differing == {} and logged.keys() == second[0].keys()
    differing = {k: (v, second[1].get(k)) for k, v in results.items() if second[1].get(k) != v}
    assert differing == {} and results.keys() == second[1].keys()


def test_the_deterministic_block_switches_torch_and_restores_it_without_loading_inductor():
    code = """
import sys, torch
from rl.common.seeding import deterministic_algorithms
with deterministic_algorithms():
    inside = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
after = torch.are_deterministic_algorithms_enabled()
loaded = "torch._inductor" in sys.modules
import torch._inductor.config as inductor
with deterministic_algorithms():
    flag = inductor.deterministic
print(inside, after, loaded, flag, inductor.deterministic)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["(True,", "True)", "False", "False", "True", "False"], proc.stdout
