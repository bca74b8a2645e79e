"""What the scripts track, written once: the experiment group, graph-set inputs, checkpoints, per-question tables."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from graphmem.tracking.artifacts import ArtifactRef, artifact_name, graphset_artifact
from graphmem.tracking.runs import Tracker
from graphmem.tracking.tables import question_table

CHECKPOINT_ALIASES = (("best.pt", "best"), ("last.pt", "latest"))
"""Checkpoint files of a training run and the alias each version of the model artifact gets."""


def experiment_group(job_type: str, dataset: str) -> str:
    """``<job>-<dataset>[-<experiment>]-<stamp>``: the group every run of one invocation shares.

    Under Hydra the experiment is the selected ``+experiment=`` option. The stamp is the start
    time, except in a multirun, where it is a hash of the sweep folder, which every job of one
    sweep (local or on SLURM) shares, so a whole sweep lands in one group.
    """
    experiment, stamp = None, time.strftime("%Y%m%d-%H%M%S")
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized():
            hc = HydraConfig.get()
            experiment = hc.runtime.choices.get("experiment")
            if hc.mode == RunMode.MULTIRUN:
                stamp = "sweep-" + hashlib.sha1(str(Path(hc.sweep.dir).resolve()).encode()).hexdigest()[:8]
    except ImportError:  # pragma: no cover - hydra is a core dependency
        pass
    return artifact_name("-".join(p for p in (job_type, dataset, experiment, stamp) if p))


def use_graphset(tracker: Tracker, directory: str | Path | None) -> ArtifactRef | None:
    """Declare the saved graph set in ``directory`` an input of the run (nothing when it has no manifest)."""
    if directory is None or not (Path(directory) / "manifest.json").is_file():
        return None
    return tracker.use_artifact(graphset_artifact(directory))


def log_checkpoints(
    tracker: Tracker, directory: str | Path, name: str, metadata: Mapping[str, Any] | None = None
) -> list[ArtifactRef]:
    """Log ``best.pt`` (alias ``best``) then ``last.pt`` (alias ``latest``) of ``directory`` as versions of
    the model artifact ``name``; missing files are skipped. Returns the logged references."""
    refs = []
    for file, alias in CHECKPOINT_ALIASES:
        path = Path(directory) / file
        if path.is_file():
            refs.append(tracker.log_artifact(path, "model", name=name, aliases=[alias], metadata=metadata))
    return [r for r in refs if r is not None]


def log_question_tables(tracker: Tracker, results: Iterable[Any], prefix: str = "questions") -> None:
    """One table ``<prefix>/<policy>`` per :class:`~graphmem.eval.harness.EvalResult` (:func:`question_table`)."""
    for result in results:
        tracker.log_table(f"{prefix}/{result.policy}", *question_table(result.policy, result.rows))
