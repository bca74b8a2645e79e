"""kill -9 during an in-place rebuild never leaves a set that loads with mixed configs (issue 17, item 1).

Five rebuilds of a HotpotQA set with another ``graph.semantic_k``, each killed after a random
number of graph files, each followed by a rerun of the original build (``scripts/kill_rebuild.py``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_kill_during_in_place_rebuild_never_yields_a_mixed_set(tmp_path):
    cmd = [
        sys.executable,
        "scripts/kill_rebuild.py",
        "--data=hotpotqa",
        "--limit=8",
        "--encoder=hashing",
        "--runs=5",
        f"--out={tmp_path}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    print(proc.stdout)
    result = json.loads((tmp_path / "kill_rebuild.json").read_text())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert result["base"]["edges"] != result["other"]["edges"]  # the two configs are told apart by their edges
    runs = result["runs"]
    assert len(runs) == 5 and not any(r["mixed"] for r in runs)
    assert sum(r["killed"] for r in runs) >= 3  # most runs were interrupted, not finished before the kill
    assert all(r["rerun_edges"] == result["base"]["edges"] for r in runs)
