"""Read a W&B offline run (``wandb/offline-run-*/run-<id>.wandb``) back, for tests.

The file is W&B's transaction log: a 7-byte header (``:W&B``, magic, version), then LevelDB-log
records (32 KiB blocks; each chunk a 7-byte header of CRC32C, length, chunk type) whose payloads
are ``wandb_internal_pb2.Record`` protobufs. We keep what a test checks: the run (name, group,
job type, config), every history row, the final summary, defined metrics and logged artifacts.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _records(path: Path):
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B transaction log")
    pos, buf = _HEADER, b""
    while pos + _HEADER <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < _HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + _HEADER])
        pos += _HEADER
        if kind == 0 and length == 0:
            continue
        buf += data[pos : pos + length]
        pos += length
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(buf)
            buf = b""
            yield record


def _key(item) -> str:
    return "/".join(item.nested_key) if item.nested_key else item.key


def read_offline_run(run_dir: str | Path) -> dict[str, Any]:
    """{"run": {...}, "history": [row, ...], "summary": {...}, "metrics": [...], "artifacts": [...]}."""
    run_dir = Path(run_dir)
    (path,) = run_dir.glob("run-*.wandb")
    out: dict[str, Any] = {"run": {}, "history": [], "summary": {}, "metrics": [], "artifacts": []}
    for r in _records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run = r.run
            config = {u.key: json.loads(u.value_json) for u in run.config.update if u.key != "_wandb"}
            out["run"] = {
                "id": run.run_id,
                "name": run.display_name,
                "group": run.run_group,
                "job_type": run.job_type,
                "config": config,
            }
        elif kind == "config":
            for u in r.config.update:
                out["run"].setdefault("config", {})[_key(u)] = json.loads(u.value_json)
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in r.history.item})
        elif kind == "summary":
            for u in r.summary.update:
                out["summary"][_key(u)] = json.loads(u.value_json)
        elif kind == "metric":
            m = r.metric
            out["metrics"].append({"name": m.name or m.glob_name, "step_metric": m.step_metric})
        elif kind == "artifact":
            a = r.artifact
            out["artifacts"].append(
                {
                    "name": a.name,
                    "type": a.type,
                    "aliases": list(a.aliases),
                    "metadata": json.loads(a.metadata) if a.metadata else {},
                }
            )
    return out


def offline_runs(wandb_dir: str | Path) -> list[dict[str, Any]]:
    """Every offline run under ``wandb_dir`` (the folder holding ``offline-run-*``)."""
    return [read_offline_run(d) for d in sorted(Path(wandb_dir).glob("offline-run-*"))]
