"""A user's class plugs in as ``policy._target_=<dotted path>`` and runs in ``scripts/evaluate.py``;
the Hydra job log of that run is not empty."""

import json
import os
import subprocess
import sys
from pathlib import Path

from test_example_policy import saved_graphset

from tests import script_runner

ROOT = Path(__file__).resolve().parents[1]
TARGET = "tests.user_policy.EntriesOnly"


def run_evaluate(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "scripts/evaluate.py", f"graphset={saved_graphset(tmp_path / 'set')}", *overrides]
    return script_runner.run(cmd, cwd=ROOT, env=env, timeout=300)


def test_a_user_class_given_as_target_runs_in_evaluate_and_the_job_log_is_written(tmp_path):
    run_dir = tmp_path / "run"
    proc = run_evaluate(
        tmp_path,
        f"policy._target_={TARGET}",
        "+policy.max_entries=2",  # a parameter of the user's class that the default policy lacks
        "stats.reference=beta_bfs",
        "sweep_tokens=[]",
        "logger=jsonl",
        "progress=false",
        f"hydra.run.dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = json.loads((run_dir / "results.json").read_text())
    assert set(payload["policies"]) == {"EntriesOnly", "beta_bfs"}
    assert payload["meta"]["policy_configs"]["EntriesOnly"]["_target_"] == TARGET
    rows = [json.loads(line) for line in (run_dir / "questions_EntriesOnly.jsonl").read_text().splitlines()]
    assert len(rows) == 24
    for row in rows:  # the user's algorithm ran: at most 2 nodes, all entries, no edge walked
        trace = row["trace"]
        assert 0 < len(row["loaded"]) <= 2 and set(row["loaded"]) <= set(trace["entries"])
        assert trace["edges_traversed"] == [] and row["metrics"]["hops"] == 0
    beta = json.loads((run_dir / "questions_beta_bfs.jsonl").read_text().splitlines()[0])
    assert len(beta["loaded"]) > 2  # the reference is the real Beta BFS, not the user's class
    log = (run_dir / "evaluate.log").read_text()
    assert "24 questions" in log and "| EntriesOnly |" in log and f"results written to {run_dir}" in log


def test_a_target_that_is_not_a_policy_is_one_clear_error(tmp_path):
    proc = run_evaluate(tmp_path, "policy._target_=collections.OrderedDict", "logger=none", f"out_dir={tmp_path / 'o'}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: 'collections.OrderedDict' is not a policy class"
    assert not (tmp_path / "o").exists()
