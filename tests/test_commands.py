"""Console commands in pyproject.toml: each names a function that runs its script, from any directory."""

import json
import os
import sys
import tomllib
from importlib import import_module
from pathlib import Path

from graphmem.commands import COMMANDS, SCRIPTS
from tests import script_runner
from tests.test_evaluate_script import saved_graphset

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_names_a_function_and_a_script():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {f"graphmem-{c}" for c in ("build", "train", "evaluate", "benchmark")}
    for command, target in scripts.items():
        module, func = target.split(":")
        assert callable(getattr(import_module(module), func)), target
        assert (SCRIPTS / f"{COMMANDS[command.removeprefix('graphmem-')]}.py").is_file()


def test_evaluate_command_runs_from_another_directory(tmp_path):
    """What the installed ``graphmem-evaluate`` wrapper does, run with a working directory outside the checkout."""
    gs_dir = saved_graphset(tmp_path / "set")
    work = tmp_path / "elsewhere"
    work.mkdir()
    args = [f"graphset={gs_dir}", "out_dir=results", "policies=[beta_bfs]", "sweep_tokens=[]", "logger=none"]
    wrapper = "import sys; from graphmem.commands import evaluate; sys.exit(evaluate())"
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    proc = script_runner.run(
        [sys.executable, "-c", wrapper, *args, "progress=false", "hydra.run.dir=hydra"], cwd=work, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((work / "results" / "results.json").read_text())["meta"]["questions"] == 10
    assert (work / "hydra" / ".hydra" / "config.yaml").is_file()  # Hydra's run folder, relative to the caller
