"""Console commands: ``graphmem-build``, ``graphmem-train``, ``graphmem-evaluate``, ``graphmem-benchmark``.

Each runs its Hydra script from ``scripts/`` (``build_graph.py``, ``train.py``, ``evaluate.py``,
``benchmark.py``) with the command-line arguments given, so ``graphmem-train trainer.epochs=2``
from any directory is ``python <checkout>/scripts/train.py trainer.epochs=2`` there: configs come
from the checkout's ``configs/``, relative paths (``out_dir``, ``graphset=``) from the working
directory. ``python scripts/<name>.py`` keeps working unchanged. The scripts live in the source
checkout, so the commands need the editable install (``pip install -e .``, what ``make setup`` does).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
COMMANDS = {"build": "build_graph", "train": "train", "evaluate": "evaluate", "benchmark": "benchmark"}


def run_script(name: str, argv: list[str] | None = None) -> None:
    """Run ``scripts/<name>.py`` as ``__main__`` with ``argv`` (default: this process's arguments)."""
    path = SCRIPTS / f"{name}.py"
    if not path.is_file():
        raise SystemExit(
            f"error: {path} not found: the graphmem commands run the scripts of a source checkout "
            "(install it with pip install -e .)"
        )
    sys.argv = [str(path), *(sys.argv[1:] if argv is None else argv)]
    runpy.run_path(str(path), run_name="__main__")


def build() -> None:
    """``graphmem-build``: build and save a graph set (``scripts/build_graph.py``)."""
    run_script(COMMANDS["build"])


def train() -> None:
    """``graphmem-train``: train the router and compare it with the baselines (``scripts/train.py``)."""
    run_script(COMMANDS["train"])


def evaluate() -> None:
    """``graphmem-evaluate``: evaluate policies on a graph set (``scripts/evaluate.py``)."""
    run_script(COMMANDS["evaluate"])


def benchmark() -> None:
    """``graphmem-benchmark``: latency and throughput of every policy (``scripts/benchmark.py``)."""
    run_script(COMMANDS["benchmark"])
