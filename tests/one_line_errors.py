"""Run a script as the command line would and take its one ``error:`` line (exit status 2, no traceback)."""

import os
import sys
from pathlib import Path

from tests import script_runner

ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str, *overrides: str, tmp_path: Path):
    """``python scripts/<script> <overrides> logger=none``, its Hydra folder under ``tmp_path``, no GPU."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, f"scripts/{script}", *overrides, f"hydra.run.dir={tmp_path / 'hydra'}", "logger=none"]
    return script_runner.run(cmd, cwd=ROOT, env=env, timeout=300)


def error_line(proc) -> str:
    """The single ``error:`` line of a run that exited with status 2 and printed no traceback."""
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]
