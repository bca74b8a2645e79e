"""Experiment tracking: runs, groups, curves, tables, artifacts and lineage (W&B, or JSONL files).

* :mod:`~graphmem.tracking.runs` — :func:`make_tracker` and the backends (one tracker = one run);
* :mod:`~graphmem.tracking.artifacts` — named, content-addressed inputs and outputs;
* :mod:`~graphmem.tracking.records` — JSONL runs read back, with the lineage between them;
* :mod:`~graphmem.tracking.secrets` — what a logged config may not contain;
* :mod:`~graphmem.tracking.tables` — per-question result tables;
* :mod:`~graphmem.tracking.jobs` — what the scripts track: group, graph-set input, checkpoints, tables.
"""

from graphmem.tracking.artifacts import (
    ArtifactRef,
    checkpoint_artifact,
    describe_artifact,
    graphset_artifact,
    read_sidecar,
)
from graphmem.tracking.jobs import (
    experiment_group,
    log_checkpoints,
    log_question_tables,
    use_graphset,
)
from graphmem.tracking.records import Edge, RunRecord, lineage, read_run, read_runs, upstream
from graphmem.tracking.runs import JOB_TYPES, JsonlTracker, LoggerConfig, Tracker, WandbTracker, make_tracker
from graphmem.tracking.secrets import config_for_logging, is_secret_name
from graphmem.tracking.tables import QUESTION_COLUMNS, question_table

__all__ = [
    "JOB_TYPES",
    "QUESTION_COLUMNS",
    "ArtifactRef",
    "Edge",
    "JsonlTracker",
    "LoggerConfig",
    "RunRecord",
    "Tracker",
    "WandbTracker",
    "checkpoint_artifact",
    "config_for_logging",
    "describe_artifact",
    "experiment_group",
    "graphset_artifact",
    "is_secret_name",
    "lineage",
    "log_checkpoints",
    "log_question_tables",
    "make_tracker",
    "question_table",
    "read_run",
    "read_runs",
    "read_sidecar",
    "upstream",
    "use_graphset",
]
