"""Paired per-question comparisons of two policies of a finished run, from its question files.

Reads ``questions_<policy>.jsonl`` of a ``scripts/train.py`` (or ``scripts/evaluate.py``) results folder
and writes the comparisons of ``--policy`` against ``--reference`` (graphmem.eval.stats.compare_policies:
mean difference, 95% percentile-bootstrap CI, paired t-test p, n) as JSON, with the per-fold means
of both where the rows carry a fold. E.g. the lexical-feature ablation of a LoCoMo run:

    .venv/bin/python scripts/paired_from_run.py outputs/train/locomo --policy router --reference router_nolex \\
        --out docs/results/lexical_ablation_locomo.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.errors import InputError
from graphmem.eval.metrics import in_overall
from graphmem.eval.runs import question_rows
from graphmem.eval.stats import STAT_METRICS, compare_policies
from graphmem.io import atomic_write


def fold_means(rows: list[dict], metric: str) -> dict[int, float]:
    by_fold: dict[int, list[float]] = {}
    for r in rows:
        value = r.get("metrics", {}).get(metric)
        if "fold" in r and value is not None and in_overall(r.get("category", "")):
            by_fold.setdefault(int(r["fold"]), []).append(float(value))
    return {k: sum(v) / len(v) for k, v in sorted(by_fold.items())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--policy", required=True)
    p.add_argument("--reference", required=True)
    p.add_argument("--n-boot", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        rows = {name: question_rows(args.folder, name) for name in (args.policy, args.reference)}
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    comps = compare_policies(rows, args.reference, n_boot=args.n_boot, seed=args.seed)
    metrics = [m for m in STAT_METRICS if any(c.metric == m for c in comps)]
    payload = {
        "command": " ".join([".venv/bin/python scripts/paired_from_run.py", *(argv or sys.argv[1:])]),
        "folder": str(args.folder),
        "policy": args.policy,
        "reference": args.reference,
        "paired": [c.to_json() for c in comps],
        "per_fold": {name: {m: fold_means(rs, m) for m in metrics} for name, rs in rows.items()},
    }
    text = json.dumps(payload, indent=1)
    if args.out is not None:
        atomic_write(args.out, lambda tmp: tmp.write_text(text + "\n"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
