"""Results files assembled from finished runs: one command, five sub-commands.

    results.py merge FOLDER... --out FILE [--also P...] [--n-boot N] [--plot PNG] [--plot-extra FOLDER...]
    results.py paired FOLDER --policy P --reference R [--n-boot N] [--seed S] [--out FILE]
    results.py compare FIRST SECOND --policy P [--metric M] [--out FILE]
    results.py compare --policy P --out FILE --pair NAME FIRST SECOND [--pair ...] [--command TEXT]
    results.py curves SOURCE... [--out-dir DIR] [--prefix TEXT]
    results.py collect --out FILE --run NAME CODE DIR [--run ...] [--command TEXT]

Every sub-command reads finished runs only and checks what they rest on (:mod:`graphmem.eval.provenance`):
a folder without ``results.json`` (a killed run's leftovers), a ``results.json`` without a finished
``provenance`` record, a question file missing or holding another count of rows than ``results.json`` says,
and runs whose data file, graph set or config (less the fold choice and output paths) differ are refused in one
line naming the folders and each difference; ``--differ WHAT`` (repeatable: ``data``, ``graphset`` or a config
key pattern such as ``budget.max_nodes`` or ``trainer.*``) names a difference as intended, as a ``compare`` of
two settings needs. ``--out`` is always a new file: never an input's ``results.json``, never a folder.

* ``merge``: ``scripts/train.py`` runs of disjoint folds (e.g. one process per fold) in one results file with
  the keys of a one-run ``results.json``: ``summary`` (mean and ddof-1 std over the folds), ``records``,
  ``questions``, ``paired`` (every policy against ``reference``, and the trained variants against each of
  ``--also``, over all folds' test questions: :func:`graphmem.eval.runs.paired_groups`, as ``train.py``
  assembles them), ``node_sweep`` and ``provenance`` (each run's). Runs that share a fold, or differ in dataset,
  budget or reference, are refused.
* ``paired``: ``--policy`` against ``--reference`` from the question files of one run
  (:func:`graphmem.eval.stats.compare_policies`: mean difference, 95% percentile-bootstrap CI, paired t-test
  p, n), with the per-fold means of both where the rows carry a fold; a policy against itself, or fewer than two
  questions to pair, is refused.
* ``compare``: one policy in ``scripts/evaluate.py`` runs that differ in one setting
  (:func:`graphmem.eval.runs.compare_runs`: both means over the ``overall`` questions, second − first with its
  bootstrap CI and p, n, the share of entry slots that agree). Two folders print that; each
  ``--pair NAME FIRST SECOND`` adds both runs' served latency (p50 / p95 ms) and batched questions/s from
  their ``results.json`` and the share of questions whose loaded lists are identical, written to ``--out``.
* ``curves``: per group of trained variants (:mod:`graphmem.eval.variants`), the training and validation
  return per epoch, a thin line per fold and the mean in bold, at ``<out-dir>/<prefix><group>.png``, from
  fold run folders or one merged file.
* ``collect``: ``scripts/train_gnn.py`` runs in one file: per ``--run NAME CODE DIR`` (``CODE``: what
  differs; each ``NAME`` once) the training seconds, the per-epoch history, the best validation recall and the
  test recall.

A folder, file or field that cannot be used is one ``error:`` line naming it, and exit status 2.

    .venv/bin/python scripts/results.py merge outputs/train/locomo_fold{0,1,2,3,4} \\
        --out docs/results/learned_vs_hybrid_locomo.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.core.errors import InputError
from graphmem.eval.metrics import in_overall
from graphmem.eval.plots import plot_learning_curves
from graphmem.eval.provenance import COMPARED, check_merged, check_same, counted_policies, finished_results
from graphmem.eval.runs import (
    compare_runs,
    node_sweep_payload,
    paired_groups,
    plot_node_sweep,
    question_rows,
    read_fold_runs,
    read_jsonl,
    source_results,
)
from graphmem.eval.stats import STAT_METRICS, compare_policies, fold_summary
from graphmem.eval.variants import GROUPS, trained_variants
from graphmem.store.io import read_json, write_json
from graphmem.store.paths import check_name, run_path

METRICS = ("evidence_recall", "all_evidence_hit", "precision", "loaded_tokens")
SCRIPT = ".venv/bin/python scripts/results.py"


# ---------------------------------------------------------------------------------------------- merge
def folder_rows(folders: list[Path]) -> tuple[dict[str, list[dict]], dict[str, dict[int, list[dict]]]]:
    """Policy -> question rows (of every policy each finished run's ``results.json`` counts, each file checked
    against its count: :func:`graphmem.eval.runs.question_rows`), and policy -> node budget -> node-sweep rows,
    of every folder in order."""
    rows: dict[str, list[dict]] = {}
    sweep: dict[str, dict[int, list[dict]]] = {}
    for f in folders:
        for policy in counted_policies(finished_results(f, "train.py")):
            rows.setdefault(policy, []).extend(question_rows(f, policy))
        for path in sorted(Path(f).glob("node_sweep_*.jsonl")):
            levels = sweep.setdefault(path.stem.removeprefix("node_sweep_"), {})
            for r in read_jsonl(path):
                levels.setdefault(int(r["max_nodes"]), []).append(r)
    return rows, sweep


def merge(folders: list[Path], also: list[str], n_boot: int, intended: list[str] = ()) -> dict:
    runs = read_fold_runs(folders, intended)
    first = runs[0]
    records = [r for run in runs for r in run["records"]]
    per_fold: dict[int, dict[str, dict]] = {}
    for r in records:
        per_fold.setdefault(int(r["fold"]), {})[r["policy"]] = r["test"]
    variants = list(dict.fromkeys(r["policy"] for r in records if "best_epoch" in r))
    rows, sweep = folder_rows(folders)
    reference, seed = first.get("reference"), 0
    groups = paired_groups(rows, reference, variants, also, n_boot, seed)
    node_sweep = None
    if sweep:
        budgets = next((run["node_sweep"]["budgets"] for run in runs if run.get("node_sweep")), [])
        node_sweep = {"budgets": budgets, **node_sweep_payload(sweep, reference, n_boot, seed)}
    return {
        "dataset": first["dataset"],
        "graphset": first.get("graphset"),
        "budget": first["budget"],
        "by_source": merged_sources(runs, rows, reference, variants, also, n_boot, seed),
        "cv_sets": first.get("cv_sets") or [],
        "folds": sorted(k for run in runs for k in run["folds"]),
        "runs": [run.get("run_id") for run in runs],
        "summary": fold_summary([per_fold[k] for k in sorted(per_fold)], METRICS),
        "questions": {p: len(rs) for p, rs in rows.items()},
        "reference": reference,
        "paired": [c.to_json() for g in groups for c in g],
        "records": sorted(records, key=lambda r: (r["fold"], r["policy"])),
        "node_sweep": node_sweep,
        "wall_s": [run.get("wall_s") for run in runs],
        "provenance": {
            **{k: v for k, v in first["provenance"].items() if k in COMPARED},
            "finished": True,
            "intended": list(intended),
            "runs": [run["provenance"] for run in runs],
        },
    }


def merged_sources(runs: list[dict], rows, reference, variants, also, n_boot: int, seed: int) -> dict | None:
    """Per source, the runs' rows apart (:func:`graphmem.eval.runs.source_results`) when the runs cross-validated
    several (``cv_sets``: their ``sources`` map graphs to sources); one such run's own ``by_source`` when it
    records no map; ``None`` for runs of one source."""
    sources = {g: s for run in runs for g, s in (run.get("sources") or {}).items()}
    if sources:
        return source_results(rows, sources, reference, variants, also, n_boot, seed)[0]
    return runs[0].get("by_source") if len(runs) == 1 else None


def run_merge(args: argparse.Namespace, argv: list[str]) -> int:
    out = new_file(args.out)
    payload = {"command": " ".join([SCRIPT, *argv]), **merge(args.folders, args.also, args.n_boot, args.differ)}
    write_json(out, payload)
    if args.plot is not None and payload["node_sweep"]:
        sweep = folder_rows(args.folders)[1]
        extra = folder_rows(args.plot_extra)[1]  # other policies of runs of the same folds join the plot
        sweep |= {p: levels for p, levels in extra.items() if p not in sweep}
        title = f"{payload['dataset']}: evidence recall at a node budget, folds {payload['folds']} (test questions)"
        plot_node_sweep(sweep, args.plot, title)
    print(f"{args.out}: folds {payload['folds']}, {len(payload['paired'])} paired comparisons")
    return 0


# --------------------------------------------------------------------------------------------- paired
def fold_means(rows: list[dict], metric: str) -> dict[int, float]:
    """Fold -> mean of ``metric`` over the ``overall`` rows of that fold (rows without a fold left out)."""
    by_fold: dict[int, list[float]] = {}
    for r in rows:
        value = r.get("metrics", {}).get(metric)
        if "fold" in r and value is not None and in_overall(r.get("category", "")):
            by_fold.setdefault(int(r["fold"]), []).append(float(value))
    return {k: sum(v) / len(v) for k, v in sorted(by_fold.items())}


def run_paired(args: argparse.Namespace, argv: list[str]) -> int:
    if args.policy == args.reference:
        raise InputError(f"--policy and --reference are both {args.policy!r}: a policy paired with itself says nothing")
    out = None if args.out is None else new_file(args.out)
    rows = {name: question_rows(args.folder, name) for name in (args.policy, args.reference)}
    comps = compare_policies(rows, args.reference, n_boot=args.n_boot, seed=args.seed)
    if not comps:
        raise InputError(
            f"{args.folder}: fewer than two questions with a metric in both {args.policy!r} and {args.reference!r} "
            "to pair: nothing to compare"
        )
    metrics = [m for m in STAT_METRICS if any(c.metric == m for c in comps)]
    payload = {
        "command": " ".join([SCRIPT, *argv]),
        "folder": str(args.folder),
        "policy": args.policy,
        "reference": args.reference,
        "paired": [c.to_json() for c in comps],
        "per_fold": {name: {m: fold_means(rs, m) for m in metrics} for name, rs in rows.items()},
    }
    if out is not None:
        write_json(out, payload)
    print(json.dumps(payload, indent=1))
    return 0


# -------------------------------------------------------------------------------------------- compare
def run_summary(out_dir: Path, policy: str) -> dict:
    """Served latency, throughput and overall recall of ``policy`` in one run (its ``results.json``)."""
    path = Path(out_dir) / "results.json"
    entry = (finished_results(out_dir, "evaluate.py").get("policies") or {}).get(policy)
    if entry is None:
        raise InputError(f"{path}: no results for policy {policy!r}")
    try:
        overall = entry["summary"]["overall"]
        return {
            "dir": str(out_dir),
            "evidence_recall": overall["evidence_recall"],
            "served_p50_ms": overall["latency_ms_p50"],
            "served_p95_ms": overall["latency_ms_p95"],
            "batched_questions_per_s": entry["info"]["batched_questions_per_s"],
        }
    except (KeyError, TypeError) as err:
        raise InputError(f"{path}: policy {policy!r} has no field {err} (not a scripts/evaluate.py run)") from None


def compare_pair(first: Path, second: Path, policy: str, metric: str, intended: list[str] = ()) -> dict:
    """Both runs' summaries, their paired comparison and the share of questions loading the same nodes."""
    pair = {"first": run_summary(first, policy), "second": run_summary(second, policy)}
    pair["paired"] = compare_runs(first, second, policy, metric, intended)
    rows_a, rows_b = (
        {r["qid"]: r for r in question_rows(d, policy) if in_overall(r["category"])} for d in (first, second)
    )
    same = sum(rows_a[q]["loaded"] == rows_b[q]["loaded"] for q in rows_a)
    pair["identical_loaded_share"] = same / max(len(rows_a), 1)
    return pair


def run_compare(args: argparse.Namespace, argv: list[str]) -> int:
    if bool(args.runs) == bool(args.pair):
        raise InputError("compare takes either two run folders (FIRST SECOND) or --pair NAME FIRST SECOND, not both")
    out = None if args.out is None else new_file(args.out)
    if args.runs:
        if len(args.runs) != 2:
            raise InputError(f"compare takes two run folders, got {len(args.runs)}: {[str(r) for r in args.runs]}")
        payload = compare_runs(args.runs[0], args.runs[1], args.policy, args.metric, args.differ)
        if out is not None:
            write_json(out, {**payload, "command": args.command or " ".join([SCRIPT, *argv])})
        print(json.dumps(payload))
        return 0
    if out is None:
        raise InputError("compare --pair needs --out FILE")
    pairs = {name: compare_pair(Path(a), Path(b), args.policy, args.metric, args.differ) for name, a, b in args.pair}
    payload = {"policy": args.policy, "pairs": pairs, "command": args.command or " ".join([SCRIPT, *argv])}
    write_json(out, payload)
    print(json.dumps(payload, indent=1))
    return 0


# --------------------------------------------------------------------------------------------- curves
def read_records(sources: list[Path], intended: list[str] = ()) -> tuple[list[dict], str, list[int]]:
    """The records of one merged file (its runs' provenance checked where it records it:
    :func:`graphmem.eval.provenance.check_merged`), or of the finished runs of the given folders; the dataset;
    the folds."""
    if len(sources) == 1 and sources[0].is_file():
        payload = read_json(sources[0])
        try:
            check_merged(sources[0], payload)
            return payload["records"], payload["dataset"], payload["folds"]
        except (KeyError, TypeError, AttributeError) as err:
            raise InputError(f"{sources[0]}: not a merged results file ({err})") from None
    runs = read_fold_runs(sources, intended)
    return (
        [r for run in runs for r in run["records"]],
        runs[0]["dataset"],
        sorted(k for run in runs for k in run["folds"]),
    )


def grouped_curves(records: list[dict], where: str) -> dict[str, dict[str, dict]]:
    """group -> variant -> fold -> history rows; a trained record without a history is an error."""
    out: dict[str, dict[str, dict]] = {}
    for name, info in trained_variants(records, where).items():
        for fold, rows in info["history"].items():
            if not rows:
                raise InputError(f"{where}: fold {fold} variant {name!r} has no history (a run of an older train.py)")
        out.setdefault(info["group"], {})[name] = info["history"]
    return {g: out[g] for g in GROUPS if g in out}


def run_curves(args: argparse.Namespace, argv: list[str]) -> int:
    if args.prefix:
        check_name("--prefix", args.prefix)  # a part of each PNG's name: no folder, nothing outside --out-dir
    records, dataset, folds = read_records(args.sources, args.differ)
    groups = grouped_curves(records, str(args.sources[0]) if len(args.sources) == 1 else "the runs")
    if not groups:
        raise InputError(f"{args.sources[0]}: no trained variant in the records")
    for group, curves in groups.items():
        path = run_path(args.out_dir, f"{args.prefix}{group}.png", key="--out-dir")
        plot_learning_curves(curves, path, title=f"{dataset}, folds {folds}: {GROUPS[group]}")
        print(f"wrote {path} ({', '.join(curves)})")
    return 0


# -------------------------------------------------------------------------------------------- collect
GNN_FIELDS = ("train_seconds", "val_recall_gnn", "test_recall_gnn")


def run_entry(name: str, code: str, out_dir: Path) -> dict:
    """One ``scripts/train_gnn.py`` run's entry from ``out_dir/results.json``."""
    results = finished_results(out_dir, "train_gnn.py")
    metrics = results.get("metrics") if isinstance(results.get("metrics"), dict) else {}
    missing = [f"metrics.{f}" for f in GNN_FIELDS if f not in metrics] + ([] if "history" in results else ["history"])
    if missing:
        path = Path(out_dir) / "results.json"
        raise InputError(f"{path}: no field {missing[0]!r} (not a finished scripts/train_gnn.py run)")
    return {
        "name": name,
        "code": code,
        "dir": str(out_dir),
        "train_seconds": metrics["train_seconds"],
        "history": results["history"],
        "val_recall": metrics["val_recall_gnn"],
        "test_recall": metrics["test_recall_gnn"],
    }


def run_collect(args: argparse.Namespace, argv: list[str]) -> int:
    names = [name for name, _, _ in args.run]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(f"--run {repeated[0]!r} is given {names.count(repeated[0])} times: each run has one name")
    out = new_file(args.out)
    folders = [Path(d) for _, _, d in args.run]
    check_same(folders, [finished_results(d, "train_gnn.py") for d in folders], args.differ)
    runs = [run_entry(name, code, Path(d)) for name, code, d in args.run]
    payload = {"runs": runs, "command": args.command or " ".join([SCRIPT, *argv])}
    write_json(out, payload)
    print(json.dumps(payload, indent=1))
    return 0


# ------------------------------------------------------------------------------------------------ CLI
def new_file(path: Path, flag: str = "--out") -> Path:
    """``path`` when nothing is there yet: results go to a new file, never over one (an input run's results.json
    among them) and never onto a folder; :class:`InputError` naming the flag otherwise."""
    if path.exists() or path.is_symlink():
        what = "a folder" if path.is_dir() else "an existing file"
        raise InputError(f"{flag} {path} is {what}: results go to a new file, never over one; choose a new name")
    return path


DIFFER = "an intended difference between the runs: data, graphset, or a config key (pattern), e.g. budget.max_nodes"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command_name", required=True, metavar="{merge,paired,compare,curves,collect}")
    m = sub.add_parser("merge", help="train.py runs of disjoint folds in one results file")
    m.add_argument("folders", type=Path, nargs="+")
    m.add_argument("--also", nargs="*", default=["dense_topk", "ppr", "gnn"])
    m.add_argument("--n-boot", type=int, default=10_000)
    m.add_argument("--plot", type=Path, default=None, help="PNG of evidence recall against the node budget")
    m.add_argument(
        "--plot-extra",
        type=Path,
        nargs="*",
        default=[],
        help="runs of the same folds whose other policies join the plot",
    )
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--differ", action="append", default=[], metavar="WHAT", help=DIFFER)
    m.set_defaults(handler=run_merge)
    q = sub.add_parser("paired", help="paired comparison of two policies of one run")
    q.add_argument("folder", type=Path)
    q.add_argument("--policy", required=True)
    q.add_argument("--reference", required=True)
    q.add_argument("--n-boot", type=int, default=10_000)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", type=Path, default=None)
    q.set_defaults(handler=run_paired)
    c = sub.add_parser("compare", help="one policy in evaluate.py runs that differ in one setting")
    c.add_argument("runs", type=Path, nargs="*", metavar="FIRST SECOND")
    c.add_argument("--policy", required=True)
    c.add_argument("--metric", default="evidence_recall")
    c.add_argument("--pair", nargs=3, action="append", default=[], metavar=("NAME", "FIRST", "SECOND"))
    c.add_argument("--out", type=Path, default=None)
    c.add_argument("--command", default=None, help="how the runs were made (recorded in the file)")
    c.add_argument("--differ", action="append", default=[], metavar="WHAT", help=DIFFER)
    c.set_defaults(handler=run_compare)
    v = sub.add_parser("curves", help="learning curves of the trained variants, one PNG per group")
    v.add_argument("sources", type=Path, nargs="+", help="fold run folders, or one merged results file")
    v.add_argument("--out-dir", type=Path, default=Path("docs"))
    v.add_argument("--prefix", default="policy_gradients_", help="PNG names: <prefix><group>.png")
    v.add_argument("--differ", action="append", default=[], metavar="WHAT", help=DIFFER)
    v.set_defaults(handler=run_curves)
    g = sub.add_parser("collect", help="train_gnn.py runs in one file")
    g.add_argument("--out", required=True, type=Path)
    g.add_argument("--run", nargs=3, action="append", metavar=("NAME", "CODE", "DIR"), required=True)
    g.add_argument("--command", default=None, help="how the runs were made (recorded in the file)")
    g.add_argument("--differ", action="append", default=[], metavar="WHAT", help=DIFFER)
    g.set_defaults(handler=run_collect)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    def run(args: argparse.Namespace) -> int:
        set_threads(None)  # $OMP_NUM_THREADS, else one thread (graphmem.config.cli.set_threads)
        if getattr(args, "n_boot", 1) < 1:
            raise InputError(f"--n-boot {args.n_boot}: must be a positive number of bootstrap draws")
        return args.handler(args, argv)

    return command(parser(), run, argv)


if __name__ == "__main__":
    sys.exit(main())
