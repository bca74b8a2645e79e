"""kill -9 during an in-place rebuild never leaves a set that loads with mixed configs.

Rebuilds of a HotpotQA set with another ``graph.semantic_k``, each killed after a random number of
graph files, each followed by a rerun of the original build (``scripts/reliability/kill_rebuild.py``): two in
the default run, five with ``-m slow``.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("n_runs", [2, pytest.param(5, marks=pytest.mark.slow)])
def test_kill_during_in_place_rebuild_never_yields_a_mixed_set(tmp_path, n_runs):
    cmd = [
        sys.executable,
        "scripts/reliability/kill_rebuild.py",
        "--data=hotpotqa",
        "--limit=8",
        "--encoder=hashing",
        f"--runs={n_runs}",
        f"--out={tmp_path}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    result = json.loads((tmp_path / "kill_rebuild.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["base"]["edges"] != result["other"]["edges"]  # the two configs are told apart by their edges
    runs = result["runs"]
    assert len(runs) == n_runs and not any(r["mixed"] for r in runs)
    assert sum(r["killed"] for r in runs) >= (n_runs + 1) // 2  # most runs were interrupted, not finished first
    assert all(r["rerun_edges"] == result["base"]["edges"] for r in runs)
