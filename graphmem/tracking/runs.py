"""Tracking runs: the interface every script logs through, a W&B backend and a local JSONL backend.

One :class:`Tracker` is one run, as W&B recommends: one run per job (per fold and variant of a
training experiment, per evaluation), all runs of one experiment sharing a ``group`` and each
labelled with its ``job_type`` (``build``, ``train``, ``evaluate``, ``benchmark``). The run's
config is the resolved Hydra config with secrets removed (:func:`config_for_logging`).

Curves: :meth:`Tracker.define_metric` declares a step metric (``epoch``) and the metrics drawn
against it (``train/*``, ``val/*``), so rows carry their own x value and never collide on W&B's
internal step. A row logged with an explicit ``step`` below the run's current step is refused
with an error (W&B would drop it with a warning).

Backends, chosen by :func:`make_tracker` from a :class:`LoggerConfig`:

* ``wandb`` — a W&B run, **offline unless configured** (``mode``, else ``$WANDB_MODE``, else
  ``offline``): ``wandb/offline-run-*`` under the run directory, synced later with ``wandb sync``.
  W&B refuses ``use_artifact`` offline; an offline run keeps its inputs in its config
  (``inputs``: name, type, digest), online runs also declare them with ``use_artifact``.
* ``jsonl`` — the same records as files under ``<dir>/tracking/<run name>-<run id>/``
  (:mod:`graphmem.tracking.records` reads them back); also the fallback when wandb is not
  installed or ``mode`` is ``disabled``.
* ``none`` — a no-op.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import logging
import os
import time
import uuid
import warnings
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.store.io import write_json
from graphmem.tracking.artifacts import ArtifactRef, artifact_name, describe_artifact, write_sidecar
from graphmem.tracking.secrets import config_for_logging

log = logging.getLogger(__name__)

BACKENDS = ("wandb", "jsonl", "none")
MODES = ("offline", "online", "disabled")
JOB_TYPES = ("build", "train", "evaluate", "benchmark")
SUMMARIES = ("min", "max", "mean", "last", "first", "none")


@dataclass
class LoggerConfig:
    """Where and how runs are tracked (the schema of ``configs/logger/*.yaml``)."""

    backend: str = "wandb"
    """wandb, jsonl (local files) or none"""
    project: str = "graphmem"
    """W&B project"""
    entity: str | None = None
    """W&B entity (user or team); null = the account's default"""
    mode: str | None = None
    """offline, online or disabled (= JSONL files); null = $WANDB_MODE, else offline"""
    dir: str | None = None
    """where wandb/ and tracking/ go; null = the script's output directory"""
    group: str | None = None
    """run group; null = the script's experiment name (every run of one invocation shares it)"""
    job_type: str | None = None
    """null = the script's own job type (build, train, evaluate, benchmark)"""
    name: str | None = None
    """run name; null = the script's name for the job"""
    tags: list[str] = field(default_factory=list)
    """W&B tags"""

    def __post_init__(self) -> None:
        self.tags = [str(t) for t in (self.tags or [])]
        if self.backend not in BACKENDS:
            raise ValueError(f"logger.backend {self.backend!r} is unknown; use one of {BACKENDS}")
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"logger.mode {self.mode!r} is unknown; use one of {MODES}")
        if self.job_type is not None and self.job_type not in JOB_TYPES:
            raise ValueError(f"logger.job_type {self.job_type!r} is unknown; use one of {JOB_TYPES}")

    @classmethod
    def from_mapping(cls, values: Any) -> LoggerConfig:
        """From a dict, an OmegaConf node or a ``LoggerConfig``; unknown keys are an error."""
        if isinstance(values, LoggerConfig):
            return values
        if values is None:
            return cls(backend="none")
        if not isinstance(values, Mapping):
            from omegaconf import OmegaConf

            values = OmegaConf.to_container(values, resolve=True)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"LoggerConfig: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**values)


class Tracker:
    """One tracked run; this base class is the no-op backend (``backend: none``).

    Args:
        name: run name.
        group: run group (the experiment).
        job_type: build, train, evaluate or benchmark.
        config: the run's config (logged through :func:`config_for_logging`).
        tags: labels.
    """

    backend = "none"

    def __init__(
        self,
        name: str = "run",
        group: str | None = None,
        job_type: str | None = None,
        config: Any = None,
        tags: Sequence[str] = (),
    ):
        self.name, self.group, self.job_type, self.tags = name, group, job_type, list(tags)
        self.config = config_for_logging(config or {})
        self.id = uuid.uuid4().hex[:8]
        self.step = -1
        self.inputs: list[ArtifactRef] = []
        self.outputs: list[ArtifactRef] = []
        self.finished = False

    # ------------------------------------------------------------------ metrics
    def define_metric(self, name: str, step_metric: str | None = None, summary: str | None = None) -> None:
        """Draw ``name`` (a glob such as ``train/*`` allowed) against ``step_metric``; ``summary`` keeps
        its min / max / mean / last in the run summary (W&B ``define_metric``)."""
        if summary is not None and summary not in SUMMARIES:
            raise ValueError(f"define_metric({name!r}): summary {summary!r} is not one of {SUMMARIES}")

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Record one row of metrics (at ``step``; default: the next step)."""
        if step is not None and step < self.step:
            raise ValueError(
                f"run {self.name!r}: step {step} is below the current step {self.step}; "
                "log curves against a defined step metric (define_metric) instead of W&B's step"
            )
        self.step = self.step + 1 if step is None else step

    def update_summary(self, values: Mapping[str, Any]) -> None:
        """Set run-summary values (best validation, test figures)."""

    def log_table(self, name: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Record a table (each row aligned with ``columns``)."""

    # ------------------------------------------------------------------ artifacts
    def log_artifact(
        self,
        path: str | Path | ArtifactRef,
        type: str | None = None,
        name: str | None = None,
        aliases: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
    ) -> ArtifactRef | None:
        """Record ``path`` (or a described :class:`ArtifactRef`) as an output of this run.

        ``name`` defaults to ``run-<run id>-<file stem>``: a run's results never version another
        run's artifact. Model artifacts also get a sidecar (``<file>.artifact.json``) so a later
        run that reads the file declares the same name. Returns the reference (``None`` here).
        """
        return None

    def use_artifact(self, ref: ArtifactRef) -> ArtifactRef:
        """Record ``ref`` as an input of this run (see :mod:`graphmem.tracking.artifacts`)."""
        self.inputs.append(ref)
        return ref

    def run_artifact_name(self, label: str) -> str:
        """``run-<run id>-<label>``: the per-run name of a result artifact (W&B's own pattern)."""
        return artifact_name(f"run-{self.id}-{label}")

    def _output(self, path, type, name, aliases, metadata) -> ArtifactRef:
        if isinstance(path, ArtifactRef):
            ref = dataclasses.replace(path, aliases=tuple(aliases) or path.aliases)
        else:
            if type is None:
                raise ValueError("log_artifact: give the artifact type")
            default = self.run_artifact_name(Path(path).stem) if type != "model" else None
            ref = describe_artifact(path, type, name or default, metadata, aliases=aliases)
        if ref.type == "model" and Path(ref.path).is_file():
            write_sidecar(ref, {"id": self.id, "name": self.name, "group": self.group})
        self.outputs.append(ref)
        return ref

    # ------------------------------------------------------------------ lifecycle
    def finish(self, exit_code: int = 0) -> None:
        """Flush and close the run (``exit_code`` != 0 marks it failed)."""
        self.finished = True

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)


class JsonlTracker(Tracker):
    """The run as files under ``root/<name>-<id>/``::

    run.json        id, name, group, job_type, tags, config, state, defined metrics, summary
    history.jsonl   one metrics row per line, with ``_step`` and ``_time``
    tables/<name>.json   {"name", "columns", "rows"}
    artifacts.jsonl      {"direction": "output" | "input", **ArtifactRef}
    """

    backend = "jsonl"

    def __init__(self, root: str | Path, **kwargs: Any):
        super().__init__(**kwargs)
        self.dir = Path(root) / artifact_name(f"{self.name}-{self.id}")
        (self.dir / "tables").mkdir(parents=True, exist_ok=True)
        self.summary: dict[str, Any] = {}
        self.metrics: list[dict[str, Any]] = []
        self.started = time.time()
        self.state = "running"
        self._write_run()

    def _write_run(self) -> None:
        payload = {
            "id": self.id,
            "name": self.name,
            "group": self.group,
            "job_type": self.job_type,
            "tags": self.tags,
            "state": self.state,
            "started": self.started,
            "config": self.config,
            "metrics": self.metrics,
            "summary": self.summary,
        }
        write_json(self.dir / "run.json", payload)

    def _append(self, file: str, record: Mapping[str, Any]) -> None:
        with open(self.dir / file, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(record), default=str) + "\n")

    def define_metric(self, name, step_metric=None, summary=None):
        super().define_metric(name, step_metric, summary)
        self.metrics.append({"name": name, "step_metric": step_metric, "summary": summary})
        self._write_run()

    def log(self, metrics, step=None):
        super().log(metrics, step)
        row = {"_step": self.step, "_time": time.time(), **dict(metrics)}
        self._append("history.jsonl", row)
        for key, value in metrics.items():  # the summary W&B keeps: last value, or the defined aggregate
            rule = next((m["summary"] for m in self.metrics if m["summary"] and fnmatch.fnmatch(key, m["name"])), None)
            if rule in ("min", "max") and isinstance(value, (int, float)):
                old = self.summary.get(key, {}).get(rule) if isinstance(self.summary.get(key), dict) else None
                self.summary[key] = {rule: value if old is None else (min if rule == "min" else max)(old, value)}
            elif rule != "none":
                self.summary[key] = value
        self._write_run()

    def update_summary(self, values):
        self.summary.update(dict(values))
        self._write_run()

    def log_table(self, name, columns, rows):
        payload = {"name": name, "columns": list(columns), "rows": [list(r) for r in rows]}
        write_json(self.dir / "tables" / f"{artifact_name(name)}.json", payload, indent=None)

    def log_artifact(self, path, type=None, name=None, aliases=(), metadata=None):
        ref = self._output(path, type, name, aliases, metadata)
        self._append("artifacts.jsonl", {"direction": "output", **ref.to_json()})
        return ref

    def use_artifact(self, ref):
        super().use_artifact(ref)
        self._append("artifacts.jsonl", {"direction": "input", **ref.to_json()})
        return ref

    def finish(self, exit_code=0):
        if not self.finished:
            self.state = "finished" if exit_code == 0 else "failed"
            self._write_run()
        super().finish(exit_code)


class WandbTracker(Tracker):
    """A W&B run (``wandb`` is imported here, never at module import).

    Args:
        project, entity, mode, dir: as in :class:`LoggerConfig`.
        **kwargs: name, group, job_type, config, tags (:class:`Tracker`).
    """

    backend = "wandb"

    def __init__(
        self,
        project: str = "graphmem",
        entity: str | None = None,
        mode: str = "offline",
        dir: str | Path | None = None,
        **kwargs: Any,
    ):
        import wandb

        super().__init__(**kwargs)
        self._wandb = wandb
        if dir is not None:
            Path(dir).mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=project,
            entity=entity,
            mode=mode,
            dir=str(dir) if dir else None,
            name=self.name,
            group=self.group,
            job_type=self.job_type,
            tags=self.tags or None,
            config=self.config,
            reinit="finish_previous",
        )
        self.id = self.run.id

    def define_metric(self, name, step_metric=None, summary=None):
        super().define_metric(name, step_metric, summary)
        self.run.define_metric(name, step_metric=step_metric, summary=summary)

    def log(self, metrics, step=None):
        super().log(metrics, step)
        self.run.log(dict(metrics), step=step)

    def update_summary(self, values):
        self.run.summary.update(dict(values))

    def log_table(self, name, columns, rows):
        self.log({name: self._wandb.Table(columns=list(columns), data=[list(r) for r in rows])})

    def _artifact(self, ref: ArtifactRef):
        """A W&B artifact holding ``ref``'s files; datasets (graph sets) by ``file://`` reference, not copied."""
        art = self._wandb.Artifact(ref.name, type=ref.type, metadata={**ref.metadata, "sha256": ref.digest})
        root = Path(ref.path)
        for rel in ref.files:
            target = root if root.is_file() else root / rel
            if ref.type == "dataset":
                art.add_reference(target.as_uri(), name=rel)
            else:
                art.add_file(str(target), name=rel)
        return art

    def log_artifact(self, path, type=None, name=None, aliases=(), metadata=None):
        ref = self._output(path, type, name, aliases, metadata)
        self.run.log_artifact(self._artifact(ref), aliases=list(ref.aliases) or None)
        return ref

    def use_artifact(self, ref):
        super().use_artifact(ref)
        inputs = [{"name": r.name, "type": r.type, "digest": r.digest} for r in self.inputs]
        self.run.config.update({"inputs": inputs}, allow_val_change=True)
        if not self.run.offline:  # W&B refuses use_artifact offline; the config keeps the record
            self.run.use_artifact(self._artifact(ref))
        return ref

    def finish(self, exit_code=0):
        if self.run is not None:
            self.run.finish(exit_code=exit_code)
            self.run = None
        super().finish(exit_code)


def make_tracker(
    logger_cfg: Any,
    run_config: Any = None,
    out_dir: str | Path = ".",
    name: str | None = None,
    job_type: str | None = None,
    group: str | None = None,
    tags: Sequence[str] = (),
) -> Tracker:
    """Start the run ``logger_cfg`` asks for (see module docstring).

    Args:
        logger_cfg: a :class:`LoggerConfig` or mapping (``configs/logger/*.yaml``).
        run_config: the run's config; sanitised by :func:`config_for_logging` before logging.
        out_dir: the script's output directory; home of ``wandb/`` and ``tracking/`` unless
            ``logger.dir`` is set.
        name: run name (default: ``logger.name``, else ``run``).
        job_type: the script's job type, used when ``logger.job_type`` is null.
        group: the script's experiment name, used when ``logger.group`` is null.
        tags: added to ``logger.tags``.
    """
    cfg = LoggerConfig.from_mapping(logger_cfg)
    if job_type is not None and job_type not in JOB_TYPES:
        raise ValueError(f"job_type {job_type!r} is unknown; use one of {JOB_TYPES}")
    common = {
        "name": name or cfg.name or "run",
        "group": cfg.group or group,
        "job_type": cfg.job_type or job_type,
        "config": run_config,
        "tags": [*cfg.tags, *tags],
    }
    if cfg.backend == "none":
        return Tracker(**common)
    root = Path(cfg.dir or out_dir)
    mode = (cfg.mode or os.environ.get("WANDB_MODE") or "offline").lower()
    if mode not in MODES:
        raise ValueError(f"logger.mode / $WANDB_MODE {mode!r} is unknown; use one of {MODES}")
    if cfg.backend == "jsonl" or mode == "disabled":
        return JsonlTracker(root / "tracking", **common)
    try:
        import wandb  # noqa: F401
    except ImportError:
        warnings.warn("wandb is not installed; tracking to JSONL files under the run directory instead", stacklevel=2)
        return JsonlTracker(root / "tracking", **common)
    return WandbTracker(project=cfg.project, entity=cfg.entity, mode=mode, dir=root, **common)
