"""Learning curves of the trained variants, one PNG per group, from fold runs or a merged results file.

The sources are ``scripts/train.py`` run folders of disjoint folds, or one file written by
``scripts/merge_fold_runs.py``; each trained variant's record carries its per-epoch ``history``. The
variants are grouped by their trainer config (:mod:`graphmem.eval.variants`: SL and SL+RL per
estimator, RL only per estimator, answer or judge reward, token cost); each group's PNG shows the
training return and the validation return per epoch, a thin line per fold and the mean over folds in
bold (:func:`graphmem.plots.plot_learning_curves`), at ``<out-dir>/<prefix><group>.png``.

    .venv/bin/python scripts/learning_curves.py docs/results/policy_gradients_locomo.json \\
        --out-dir docs --prefix policy_gradients_
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.errors import InputError
from graphmem.eval.runs import read_fold_runs
from graphmem.eval.variants import GROUPS, trained_variants
from graphmem.paths import check_name, run_path


def read_records(sources: list[Path]) -> tuple[list[dict], str, list[int]]:
    """The records of one merged file, or of the runs of the given folders; the dataset; the folds."""
    if len(sources) == 1 and sources[0].is_file():
        try:
            payload = json.loads(sources[0].read_text(encoding="utf-8"))
            return payload["records"], payload["dataset"], payload["folds"]
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise InputError(f"{sources[0]}: not a merged results file ({err})") from None
    runs = read_fold_runs(sources)
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


def main(argv: list[str] | None = None) -> int:
    from graphmem.plots import plot_learning_curves

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sources", type=Path, nargs="+", help="fold run folders, or one merged results file")
    p.add_argument("--out-dir", type=Path, default=Path("docs"))
    p.add_argument("--prefix", default="policy_gradients_", help="PNG names: <prefix><group>.png")
    args = p.parse_args(argv)
    try:
        if args.prefix:
            check_name("--prefix", args.prefix)  # a part of each PNG's name: no folder, nothing outside --out-dir
        records, dataset, folds = read_records(args.sources)
        groups = grouped_curves(records, str(args.sources[0]) if len(args.sources) == 1 else "the runs")
        if not groups:
            raise InputError(f"{args.sources[0]}: no trained variant in the records")
    except InputError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    for group, curves in groups.items():
        path = run_path(args.out_dir, f"{args.prefix}{group}.png", key="--out-dir")
        plot_learning_curves(curves, path, title=f"{dataset}, folds {folds}: {GROUPS[group]}")
        print(f"wrote {path} ({', '.join(curves)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
