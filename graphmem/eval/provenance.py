"""What a run's results rest on, recorded in its ``results.json`` and checked by everything that reads runs.

``scripts/train.py``, ``scripts/evaluate.py`` and ``scripts/train_gnn.py`` write, as the last file of a run,
``results.json`` with a ``provenance`` record (:func:`run_provenance`):

    data_sha256     SHA-256 of the data file the graph set was built from
    graphset_hash   the graph set's config hash (its data file's bytes and every build setting)
    config_sha256   SHA-256 of the run's config less fold choice, output paths and bookkeeping (:data:`NOT_COMPARED`)
    question_rows   policy -> rows written to ``questions_<policy>.jsonl``
    finished        true: written once the run's every other file was

``scripts/results.py`` (``merge``, ``paired``, ``compare``, ``curves``, ``collect``) reads runs through
:func:`finished_results` and :func:`checked_rows`, and compares them with :func:`check_same`: a run without
``results.json`` (killed), one without a finished record (killed, or made before runs recorded one), a question
file that is missing or holds another count of rows than ``results.json`` says, and two runs that differ in
data file, graph set or config are refused in one line naming the folders and what differs, unless the caller
names the difference as intended (``--differ data``, ``--differ graphset``, ``--differ <config key>``: the
keys are read from each run's ``run.json``). A merged results file carries the provenance of each run it
merged; ``scripts/make_docs.py`` refuses one whose runs differ or did not finish (:func:`check_merged`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from graphmem.core.errors import InputError
from graphmem.store.io import read_json
from graphmem.store.run_folder import flatten

NOT_COMPARED = (
    "cv.folds",
    "split.fold",
    "graphs",
    "graphs_part",
    "out_dir",
    "checkpoint",
    "graphset",
    "graphset_dir",
    "data.root",
    "graph.cache_dir",
    "*.checkpoint_dir",
    "*.run_id",
    "*.resume",
    "device",
    "*.device",
    "threads",
    "progress",
    "logger",
    "logger.*",
    "hydra",
    "hydra.*",
)
"""Config keys (``fnmatch`` patterns over dotted paths) left out of ``config_sha256``: the fold choice (which
fold, which graphs), where outputs go and what records them, and where the run ran. Runs of one experiment
differ in these only; the graph set itself is compared by ``graphset_hash``, not its path."""
COMPARED = ("data_sha256", "graphset_hash", "config_sha256")
WHAT = {"data_sha256": "data", "graphset_hash": "graphset", "config_sha256": "config"}


def compared_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The leaves (dotted key -> value) of ``config`` that results are compared by: all but :data:`NOT_COMPARED`."""
    return {k: v for k, v in flatten(config).items() if not any(fnmatch.fnmatchcase(k, p) for p in NOT_COMPARED)}


def config_sha256(config: Mapping[str, Any]) -> str:
    """SHA-256 of :func:`compared_config` (sorted JSON)."""
    text = json.dumps(compared_config(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_provenance(config: Mapping[str, Any], graphset, question_rows: Mapping[str, int]) -> dict[str, Any]:
    """The ``provenance`` record of a finished run of ``config`` on ``graphset`` (module docstring)."""
    data = (graphset.provenance or {}).get("data") or {}
    return {
        "data_sha256": data.get("sha256"),
        "graphset_hash": graphset.config_hash,
        "config_sha256": config_sha256(config),
        "question_rows": dict(question_rows),
        "finished": True,
    }


def finished_results(out_dir: str | Path, script: str) -> dict[str, Any]:
    """``out_dir/results.json`` of a finished run of ``scripts/<script>`` (its ``provenance.finished`` is true);
    :class:`InputError` naming the folder when the run has none (killed before it), or records none."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        leftovers = sorted(p.name for p in Path(out_dir).glob("questions_*.jsonl"))
        what = f" ({', '.join(leftovers[:3])} are a killed run's leftovers)" if leftovers else ""
        raise InputError(f"{path}: no such file: the run never finished{what}; rerun scripts/{script} there")
    results = read_json(path)
    if not isinstance(results, dict):
        raise InputError(f"{path}: not a results file of scripts/{script} (not a mapping)")
    provenance = results.get("provenance")
    if not isinstance(provenance, dict) or provenance.get("finished") is not True:
        raise InputError(
            f"{path}: records no finished run (field 'provenance.finished'): a run cut short, or made before results "
            f"recorded their data, graph set and config; rerun scripts/{script} there"
        )
    return results


def checked_rows(out_dir: str | Path, policy: str, results: Mapping[str, Any], rows: list[dict]) -> list[dict]:
    """``rows`` of ``out_dir/questions_<policy>.jsonl`` when their count is the one ``results`` records
    (``provenance.question_rows``); :class:`InputError` naming the file otherwise."""
    counted = ((results.get("provenance") or {}).get("question_rows") or {}).get(policy)
    if len(rows) == counted:
        return rows
    counts = "none of its rows" if counted is None else counted
    raise InputError(
        f"{Path(out_dir) / f'questions_{policy}.jsonl'}: {len(rows)} rows, but results.json counts {counts} (field "
        "'provenance.question_rows'): cut short or written by another run; rerun the run"
    )


def counted_policies(results: Mapping[str, Any]) -> list[str]:
    """The policies whose question rows ``results`` counts (``provenance.question_rows``), in order."""
    return list(((results.get("provenance") or {}).get("question_rows") or {}))


def _run_config(folder: Path) -> dict[str, Any] | None:
    try:
        record = read_json(Path(folder) / "run.json")
    except InputError:
        return None
    return record.get("config") if isinstance(record, dict) and isinstance(record.get("config"), dict) else None


def differences(first: Path, a: Mapping[str, Any], other: Path, b: Mapping[str, Any]) -> list[str]:
    """What two finished runs' provenance records differ in: ``data``, ``graphset`` and, for the config, each
    differing key of their ``run.json`` configs (:func:`compared_config`), or ``config`` when a run has none."""
    pa, pb = a.get("provenance") or {}, b.get("provenance") or {}
    out = [WHAT[k] for k in COMPARED[:2] if pa.get(k) != pb.get(k)]
    if pa.get("config_sha256") != pb.get("config_sha256"):
        ca, cb = _run_config(first), _run_config(other)
        if ca is None or cb is None:
            return [*out, "config"]
        la, lb = compared_config(ca), compared_config(cb)
        out += sorted(k for k in set(la) | set(lb) if la.get(k, "(absent)") != lb.get(k, "(absent)")) or ["config"]
    return out


def check_same(folders: Sequence[Path], results: Sequence[Mapping[str, Any]], intended: Sequence[str] = ()) -> None:
    """Refuse runs whose :func:`differences` from the first are not all ``intended`` (``data``, ``graphset``,
    ``config``, or config key patterns such as ``budget.max_nodes`` or ``trainer.*``), naming both folders and
    every unintended difference."""
    for folder, run in zip(folders[1:], results[1:]):
        differ = differences(folders[0], results[0], folder, run)
        left = [d for d in differ if not any(fnmatch.fnmatchcase(d, p) for p in intended)]
        if left:
            shown = ", ".join(left[:6]) + (" ..." if len(left) > 6 else "")
            raise InputError(
                f"{folder} and {folders[0]} differ in {shown}: runs of other data, graph sets or settings are not "
                f"one experiment (name an intended difference with --differ {left[0]})"
            )


def check_merged(path: Path, payload: Mapping[str, Any]) -> None:
    """Refuse a merged results file (one with a ``provenance`` record) whose runs did not all finish or differ
    in data file, graph set or config (``provenance.runs``); a file without the record predates it."""
    provenance = payload.get("provenance")
    if not isinstance(provenance, dict):
        return
    runs = provenance.get("runs") or []
    unfinished = [i for i, r in enumerate(runs) if not isinstance(r, dict) or r.get("finished") is not True]
    if provenance.get("finished") is not True or unfinished:
        raise InputError(f"{path}: field 'provenance' records a run that did not finish (runs {unfinished})")
    intended = set(provenance.get("intended") or [])
    config_keys = intended - {"data", "graphset"}  # a merge told of config keys that differ: its runs' hashes may
    for key in COMPARED:
        seen = {r.get(key) for r in runs} | ({provenance[key]} if key in provenance else set())
        allowed = WHAT[key] in intended or (key == "config_sha256" and config_keys)
        if len(seen) > 1 and not allowed:
            raise InputError(f"{path}: field 'provenance.runs' holds runs of {len(seen)} different {WHAT[key]} hashes")
