"""Merge ``scripts/train.py`` runs of disjoint folds (e.g. one process per fold) into one results file.

Each folder holds a finished run (``results.json``, ``questions_<policy>.jsonl``, and with a node sweep
``node_sweep_<policy>.jsonl``). The merged file has the keys of a one-run ``results.json`` that the
reports read: ``summary`` (mean and ddof-1 std over the folds), ``records``, ``questions``, ``paired``
(every policy against ``reference``, and the trained variants against each of ``--also``, over all
folds' test questions) and ``node_sweep``. Runs that share a fold, or differ in dataset or budget,
are refused.

    .venv/bin/python scripts/merge_fold_runs.py outputs/train/locomo_fold{0,1,2,3,4} \\
        --out docs/results/learned_vs_hybrid_locomo.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.errors import InputError
from graphmem.eval.runs import node_sweep_payload, read_fold_runs, read_jsonl
from graphmem.eval.stats import compare_policies, fold_summary
from graphmem.io import atomic_write

METRICS = ("evidence_recall", "all_evidence_hit", "precision", "loaded_tokens")


def merge(folders: list[Path], also: list[str], n_boot: int) -> dict:
    runs = read_fold_runs(folders)
    first = runs[0]
    folds = [k for run in runs for k in run["folds"]]
    records = [r for run in runs for r in run["records"]]
    per_fold: dict[int, dict[str, dict]] = {}
    for r in records:
        per_fold.setdefault(int(r["fold"]), {})[r["policy"]] = r["test"]
    summary = fold_summary([per_fold[k] for k in sorted(per_fold)], METRICS)
    variants = list(dict.fromkeys(r["policy"] for r in records if "best_epoch" in r))
    rows: dict[str, list[dict]] = {}
    sweep: dict[str, dict[int, list[dict]]] = {}
    for f in folders:
        for path in sorted(f.glob("questions_*.jsonl")):
            rows.setdefault(path.stem.removeprefix("questions_"), []).extend(read_jsonl(path))
        for path in sorted(f.glob("node_sweep_*.jsonl")):
            for r in read_jsonl(path):
                sweep.setdefault(path.stem.removeprefix("node_sweep_"), {}).setdefault(int(r["max_nodes"]), []).append(
                    r
                )
    reference, seed = first.get("reference"), 0
    groups = [compare_policies(rows, reference, n_boot=n_boot, seed=seed)] if reference else []
    for other in also:
        if other in rows and other != reference:
            pair = {**{v: rows[v] for v in variants if v in rows}, other: rows[other]}
            groups.append(compare_policies(pair, other, n_boot=n_boot, seed=seed))
    node_sweep = None
    if sweep:
        budgets = next((run["node_sweep"]["budgets"] for run in runs if run.get("node_sweep")), [])
        node_sweep = {"budgets": budgets, **node_sweep_payload(sweep, reference, n_boot, seed)}
    return {
        "dataset": first["dataset"],
        "graphset": first.get("graphset"),
        "budget": first["budget"],
        "folds": sorted(folds),
        "runs": [run.get("run_id") for run in runs],
        "summary": summary,
        "questions": {p: len(rs) for p, rs in rows.items()},
        "reference": reference,
        "paired": [c.to_json() for g in groups for c in g],
        "records": sorted(records, key=lambda r: (r["fold"], r["policy"])),
        "node_sweep": node_sweep,
        "wall_s": [run.get("wall_s") for run in runs],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--also", nargs="*", default=["dense_topk", "ppr", "gnn"])
    p.add_argument("--n-boot", type=int, default=10_000)
    p.add_argument("--plot", type=Path, default=None, help="PNG of evidence recall against the node budget")
    p.add_argument(
        "--plot-extra",
        type=Path,
        nargs="*",
        default=[],
        help="runs of the same folds whose other policies join the plot",
    )
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        payload = merge(args.folders, args.also, args.n_boot)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    payload = {"command": " ".join([".venv/bin/python scripts/merge_fold_runs.py", *(argv or sys.argv[1:])]), **payload}
    atomic_write(args.out, lambda tmp: tmp.write_text(json.dumps(payload, indent=1, default=str) + "\n"))
    if args.plot is not None and payload["node_sweep"]:
        plot_sweep(args.folders, args.plot, payload, args.plot_extra)
    print(f"{args.out}: folds {payload['folds']}, {len(payload['paired'])} paired comparisons")
    return 0


def plot_sweep(folders: list[Path], path: Path, payload: dict, extra: list[Path] = ()) -> None:
    from graphmem.eval.metrics import in_overall
    from graphmem.plots import plot_recall_vs_budget

    values: dict[str, dict[int, list[float]]] = {}
    own = {p.stem.removeprefix("node_sweep_") for f in folders for p in f.glob("node_sweep_*.jsonl")}
    for f in [*folders, *extra]:
        for p in sorted(f.glob("node_sweep_*.jsonl")):
            if f in extra and p.stem.removeprefix("node_sweep_") in own:
                continue
            for r in read_jsonl(p):
                v = r["metrics"].get("evidence_recall")
                if v is not None and in_overall(r.get("category", "")):
                    values.setdefault(p.stem.removeprefix("node_sweep_"), {}).setdefault(
                        int(r["max_nodes"]), []
                    ).append(v)
    title = f"{payload['dataset']}: evidence recall at a node budget, folds {payload['folds']} (test questions)"
    plot_recall_vs_budget({"evidence recall": values}, path, title=title, xlabel="nodes loaded (max_nodes)")


if __name__ == "__main__":
    sys.exit(main())
