"""Reading JSONL-tracked runs back: runs, groups, curves, tables, artifacts and the lineage between them.

:func:`read_runs` loads every run written by :class:`graphmem.tracking.runs.JsonlTracker` under a
folder; :func:`lineage` joins them: an edge ``producer run -> artifact -> consumer run`` for
every input whose (name, digest) is some run's output. :func:`upstream` walks those edges back
from one artifact (results -> checkpoint -> graph set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphmem.tracking.artifacts import ArtifactRef


@dataclass
class RunRecord:
    """One tracked run as read from disk."""

    dir: Path
    id: str
    name: str
    group: str | None
    job_type: str | None
    state: str
    config: dict[str, Any]
    summary: dict[str, Any]
    metrics: list[dict[str, Any]]
    history: list[dict[str, Any]] = field(default_factory=list)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: list[ArtifactRef] = field(default_factory=list)
    outputs: list[ArtifactRef] = field(default_factory=list)

    def curve(self, key: str, step_metric: str = "epoch") -> list[tuple[Any, Any]]:
        """``(step value, value)`` of every history row that has ``key``."""
        return [(row.get(step_metric), row[key]) for row in self.history if key in row]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as err:
                raise ValueError(f"{path}:{i}: not a JSON line ({err})") from None
    return rows


def read_run(directory: str | Path) -> RunRecord:
    """The run stored in ``directory`` (its ``run.json``, history, tables and artifacts)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{directory / 'run.json'}: unreadable run record ({err})") from None
    artifacts = _jsonl(directory / "artifacts.jsonl")
    tables = {}
    for path in sorted((directory / "tables").glob("*.json")):
        table = json.loads(path.read_text(encoding="utf-8"))
        tables[table["name"]] = table
    return RunRecord(
        dir=directory,
        id=meta["id"],
        name=meta["name"],
        group=meta.get("group"),
        job_type=meta.get("job_type"),
        state=meta.get("state", "unknown"),
        config=meta.get("config", {}),
        summary=meta.get("summary", {}),
        metrics=meta.get("metrics", []),
        history=_jsonl(directory / "history.jsonl"),
        tables=tables,
        inputs=[
            ArtifactRef.from_json({k: v for k, v in a.items() if k != "direction"})
            for a in artifacts
            if a["direction"] == "input"
        ],
        outputs=[
            ArtifactRef.from_json({k: v for k, v in a.items() if k != "direction"})
            for a in artifacts
            if a["direction"] == "output"
        ],
    )


def read_runs(*roots: str | Path) -> list[RunRecord]:
    """Every run under ``roots`` (searched recursively for ``run.json``), oldest first."""
    dirs = sorted({p.parent for root in roots for p in Path(root).rglob("run.json")})
    runs = [read_run(d) for d in dirs]
    return sorted(runs, key=lambda r: (json.loads((r.dir / "run.json").read_text()).get("started", 0), r.name))


@dataclass(frozen=True)
class Edge:
    """``producer`` wrote ``artifact`` and ``consumer`` read it (same name and digest)."""

    producer: RunRecord
    artifact: ArtifactRef
    consumer: RunRecord


def lineage(runs: list[RunRecord]) -> list[Edge]:
    """Every producer -> artifact -> consumer edge among ``runs``."""
    producers: dict[tuple[str, str], tuple[RunRecord, ArtifactRef]] = {}
    for run in runs:
        for ref in run.outputs:
            producers.setdefault(ref.key, (run, ref))
    return [Edge(*producers[ref.key], run) for run in runs for ref in run.inputs if ref.key in producers]


def upstream(runs: list[RunRecord], artifact: ArtifactRef) -> list[ArtifactRef]:
    """The chain of artifacts ``artifact`` was made from, nearest first: the producing run's inputs,
    then theirs (first input of each run; a run with several inputs lists them all at its level)."""
    producer = {ref.key: run for run in runs for ref in run.outputs}
    chain, frontier, seen = [], [artifact], {artifact.key}
    while frontier:
        nxt = []
        for ref in frontier:
            run = producer.get(ref.key)
            for inp in run.inputs if run else []:
                if inp.key not in seen:
                    seen.add(inp.key)
                    chain.append(inp)
                    nxt.append(inp)
        frontier = nxt
    return chain
