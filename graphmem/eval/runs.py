"""Reading the files of finished runs: per-question JSONL rows, paired comparisons of two runs, node-sweep curves.

``scripts/evaluate.py`` and ``scripts/train.py`` write ``questions_<policy>.jsonl`` (one JSON object per
question: ``qid``, ``category``, ``metrics``, ``trace``; ``fold`` in training runs). ``scripts/results.py``
(``merge``, ``paired``, ``compare``, ``curves``, ``collect``) reads them here; ``train.py`` and ``results.py
merge`` assemble the paired groups and the node-sweep plot of a results file with the same functions
(:func:`paired_groups`, :func:`sweep_recall`, :func:`plot_node_sweep`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from graphmem.core.errors import InputError
from graphmem.eval.metrics import in_overall
from graphmem.eval.plots import plot_recall_vs_budget
from graphmem.eval.provenance import check_same, checked_rows, counted_policies, finished_results
from graphmem.eval.stats import (
    PairedComparison,
    bootstrap_ci,
    compare_policies,
    comparisons_markdown,
    paired_comparison,
)


def read_jsonl(path: Path) -> list[dict]:
    """The JSON objects of ``path``, one per non-empty line; a bad line is an error naming file and line."""
    path = Path(path)
    rows = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{i}: not a JSON line ({err.msg})") from None
    return rows


def results_file(out_dir: str | Path, script: str) -> dict[str, Any]:
    """``out_dir/results.json`` of a run of ``scripts/<script>`` as a mapping; an error naming it when it is
    missing, unreadable or not a mapping."""
    path = Path(out_dir) / "results.json"
    if not path.is_file():
        raise InputError(f"{path}: no such file (run scripts/{script} with out_dir={out_dir})")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(results, dict):
        raise InputError(f"{path}: not a results file of scripts/{script} (not a mapping)")
    return results


def read_fold_runs(folders: list[Path], intended: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The ``results.json`` of each folder (``scripts/train.py`` runs of disjoint folds), in order. A folder
    without a finished run's (:func:`graphmem.eval.provenance.finished_results`), a run whose data file, graph
    set or config differs from the first's other than as ``intended`` (:func:`~graphmem.eval.provenance.check_same`),
    whose dataset, budget or reference differs, or one that repeats a fold already read is an error naming the
    folder."""
    runs, folds = [], set()
    for f in folders:
        path = Path(f) / "results.json"
        run = finished_results(f, "train.py")
        missing = [k for k in ("dataset", "budget", "folds", "records") if k not in run]
        if missing:
            raise InputError(f"{path}: missing field(s) {missing} (not a results.json of scripts/train.py)")
        if runs and (run["dataset"] != runs[0]["dataset"] or run["budget"] != runs[0]["budget"]):
            raise InputError(f"{f}: dataset or budget differs from {folders[0]}")
        if runs and run.get("reference") != runs[0].get("reference"):
            raise InputError(f"{f}: reference {run.get('reference')!r} differs from {runs[0].get('reference')!r}")
        shared = folds & set(run["folds"])
        if shared:
            raise InputError(f"{f}: fold(s) {sorted(shared)} already merged from another run")
        folds |= set(run["folds"])
        runs.append(run)
    check_same([Path(f) for f in folders], runs, intended)
    return runs


def fold_rows(folders: list[Path], kind: str, policy: str) -> list[dict]:
    """The rows of ``<kind>_<policy>.jsonl`` (``kind``: ``questions`` or ``node_sweep``) of every folder, in
    order; a folder without the file is an error naming it, and question rows are :func:`question_rows`."""
    rows = []
    for f in folders:
        path = Path(f) / f"{kind}_{policy}.jsonl"
        if kind == "questions":
            rows += question_rows(f, policy)
            continue
        if not path.is_file():
            raise InputError(f"{path}: missing ({policy!r} has no {kind} rows in this run)")
        rows += read_jsonl(path)
    return rows


def question_rows(out_dir: Path, policy: str) -> list[dict]:
    """``out_dir/questions_<policy>.jsonl`` of a finished run, holding as many rows as its ``results.json`` counts
    (:func:`graphmem.eval.provenance.checked_rows`); an error naming the file or folder otherwise."""
    results = finished_results(out_dir, "evaluate.py or scripts/train.py")
    path = Path(out_dir) / f"questions_{policy}.jsonl"
    if not path.is_file():
        counted = f", though results.json counts {policy!r}" if policy in counted_policies(results) else ""
        raise InputError(f"{path}: no question file for policy {policy!r} in this run{counted}")
    return checked_rows(out_dir, policy, results, read_jsonl(path))


def compare_runs(
    first: Path, second: Path, policy: str, metric: str = "evidence_recall", intended: Sequence[str] = ()
) -> dict[str, Any]:
    """``policy`` in two finished runs over the same questions (``overall`` group) that differ in nothing but
    ``intended`` (:func:`graphmem.eval.provenance.check_same`): means, second − first with its bootstrap CI and
    paired t-test p (:func:`graphmem.eval.stats.paired_comparison`), n, and the share of entry slots the two runs
    agree on."""
    check_same([Path(first), Path(second)], [finished_results(d, "evaluate.py") for d in (first, second)], intended)
    a, b = ({r["qid"]: r for r in question_rows(d, policy) if in_overall(r["category"])} for d in (first, second))
    if set(a) != set(b):
        raise InputError(f"{first} and {second} hold different questions ({len(set(a) ^ set(b))} differ)")
    cmp = paired_comparison(
        "second",
        {q: r["metrics"].get(metric) for q, r in b.items()},
        "first",
        {q: r["metrics"].get(metric) for q, r in a.items()},
        metric,
    )
    if cmp is None:
        raise InputError(f"{first} and {second}: fewer than two questions with {metric!r} in both runs to pair")
    slots = sum(len(r["trace"]["entries"]) for r in a.values())
    same = sum(len(set(a[q]["trace"]["entries"]) & set(b[q]["trace"]["entries"])) for q in a)
    return {
        "policy": policy,
        "metric": metric,
        "n": cmp.n,
        "first": cmp.reference_mean,
        "second": cmp.mean,
        "diff": cmp.mean_diff,
        "ci": [cmp.ci_low, cmp.ci_high],
        "p": cmp.p_value,
        "entry_agreement": same / max(slots, 1),
        "entry_slots": slots,
    }


def node_sweep_payload(rows: dict[str, dict[int, list[dict]]], reference: str | None, n_boot: int, seed: int) -> dict:
    """Per policy and node budget: mean evidence recall over the overall group, its 95% bootstrap interval
    and n; per budget, every policy against ``reference`` (paired)."""
    curves: dict[str, dict[int, dict]] = {}
    paired: dict[int, list[dict]] = {}
    for policy, levels in rows.items():
        for n, level_rows in levels.items():
            vals = [
                float(r["metrics"]["evidence_recall"])
                for r in level_rows
                if in_overall(r.get("category", "")) and r["metrics"].get("evidence_recall") is not None
            ]
            lo, hi = bootstrap_ci(vals, n_boot=n_boot, seed=seed) if vals else (None, None)
            curves.setdefault(policy, {})[n] = {"mean": sum(vals) / max(len(vals), 1), "ci95": [lo, hi], "n": len(vals)}
    if reference in rows:
        for n in rows[reference]:
            at = {p: levels[n] for p, levels in rows.items() if n in levels}
            comps = compare_policies(at, reference, metrics=("evidence_recall",), n_boot=n_boot, seed=seed)
            paired[n] = [c.to_json() for c in comps]
    return {"curves": curves, "paired": paired}


def paired_groups(
    rows: dict[str, list[dict]], reference: str | None, variants: list[str], also: list[str], n_boot: int, seed: int
) -> list[list[PairedComparison]]:
    """The paired comparisons of a results file, one group per reference: every policy of ``rows`` (policy ->
    question rows) against ``reference`` (no group without one), then the trained ``variants`` against each
    policy of ``also`` that ``rows`` holds, other than ``reference`` (:func:`graphmem.eval.stats.compare_policies`)."""
    groups = [compare_policies(rows, reference, n_boot=n_boot, seed=seed)] if reference else []
    for other in also:
        if other in rows and other != reference:
            pair = {**{v: rows[v] for v in variants if v in rows}, other: rows[other]}
            groups.append(compare_policies(pair, other, n_boot=n_boot, seed=seed))
    return groups


SOURCE_METRICS = ("evidence_recall", "all_evidence_hit", "passage_recall_2", "passage_recall_5", "loaded_tokens")
"""The per-question means :func:`source_results` reports for each source."""


def source_results(
    rows: dict[str, list[dict]],
    source_of: dict[str, str],
    reference: str | None,
    variants: list[str],
    also: list[str],
    n_boot: int,
    seed: int,
) -> tuple[dict[str, Any], str]:
    """Each source's part of a run's test rows (policy -> question rows; ``source_of``: graph -> source): per
    policy its question count and the mean of each of :data:`SOURCE_METRICS` over the ``overall`` group, and the
    paired groups of :func:`paired_groups` on that source's questions alone. Returns ``source -> {questions,
    means, paired}`` and its markdown (a section per source)."""
    out, text = {}, []
    for source in sorted({source_of[r["graph"]] for rs in rows.values() for r in rs}):
        mine = {
            p: [r for r in rs if source_of[r["graph"]] == source and in_overall(r.get("category", ""))]
            for p, rs in rows.items()
        }
        means = {p: {m: _mean([r["metrics"].get(m) for r in rs]) for m in SOURCE_METRICS} for p, rs in mine.items()}
        groups = paired_groups(mine, reference, variants, also, n_boot, seed)
        out[source] = {
            "questions": {p: len(rs) for p, rs in mine.items()},
            "means": means,
            "paired": [c.to_json() for g in groups for c in g],
        }
        head = "| policy | questions | " + " | ".join(SOURCE_METRICS) + " |\n|---|---:|" + "---:|" * len(SOURCE_METRICS)
        lines = [
            f"| `{p}` | {len(mine[p])} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in ms.values()) + " |"
            for p, ms in means.items()
        ]
        text.append(f"### {source}\n\n{head}\n" + "\n".join(lines))
        text += [comparisons_markdown(g) for g in groups if g]
    return out, "\n\n".join(text)


def _mean(values: list) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def sweep_recall(rows: dict[str, dict[int, list[dict]]]) -> dict[str, dict[int, list[float]]]:
    """Policy -> node budget -> the evidence recall of each row of the ``overall`` group that has one."""
    return {
        policy: {
            n: [
                r["metrics"]["evidence_recall"]
                for r in level
                if r["metrics"].get("evidence_recall") is not None and in_overall(r.get("category", ""))
            ]
            for n, level in levels.items()
        }
        for policy, levels in rows.items()
    }


def plot_node_sweep(rows: dict[str, dict[int, list[dict]]], path: Path, title: str) -> Path:
    """The PNG of evidence recall against the node budget (``max_nodes``) of node-sweep ``rows``, one line per
    policy with its 95% band (:func:`graphmem.eval.plots.plot_recall_vs_budget` over :func:`sweep_recall`)."""
    values = {"evidence recall": sweep_recall(rows)}
    return plot_recall_vs_budget(values, path, title=title, xlabel="nodes loaded (max_nodes)")


def hydra_value(v: Any) -> str:
    """``v`` in Hydra's override grammar: flow mappings and lists, ``true``/``false``/``null``, numbers, bare
    words, and other strings (or strings that would read as another type) in double quotes."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {hydra_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, bool) or v is None:
        return {True: "true", False: "false", None: "null"}[v]
    if isinstance(v, str):
        bare = re.fullmatch(r"[A-Za-z_/][\w\-./]*", v) and v.lower() not in ("true", "false", "null", "inf", "nan")
        return v if bare else '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(v)


def run_overrides(recorded: Any, default: Any, prefix: str = "") -> list[str]:
    """The Hydra overrides that turn the ``default`` config into the ``recorded`` one (both plain dicts, e.g.
    a run's ``run.json`` ``config`` and the composed defaults): ``key=value`` for a changed value, ``++key=value``
    for a key the default lacks, ``~key`` for one the run lacks; mappings compared key by key."""
    if isinstance(recorded, dict) and isinstance(default, dict):
        out = []
        for k, v in recorded.items():
            path = f"{prefix}{k}"
            if k not in default:
                out.append(f"++{path}={hydra_value(v)}")
            else:
                out += run_overrides(v, default[k], f"{path}.")
        out += [f"~{prefix}{k}" for k in default if k not in recorded]
        return out
    return [] if recorded == default else [f"{prefix.rstrip('.')}={hydra_value(recorded)}"]


def shell_word(word: str) -> str:
    """``word`` as one shell word: as is when plain, else in single quotes."""
    return word if re.fullmatch(r"[\w\-./=+:,@%]+", word) else "'" + word.replace("'", "'\\''") + "'"
