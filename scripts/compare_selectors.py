"""Paired comparison of two evaluation runs of one policy (e.g. exact vs ANN entry selection).

    python scripts/compare_selectors.py <exact out_dir> <ann out_dir> --policy beta_bfs

Reads each run's ``questions_<policy>.jsonl`` (``scripts/evaluate.py`` writes them), keeps the
questions of the ``overall`` group (:func:`graphmem.eval.metrics.in_overall`) and prints, for
evidence recall, both runs' means, the paired difference (second - first) with its bootstrap CI
and paired t-test p-value (:func:`graphmem.eval.runs.compare_runs`), n, and the share of
entry slots that agree.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from graphmem.errors import InputError
from graphmem.eval.runs import compare_runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--metric", default="evidence_recall")
    args = ap.parse_args()
    try:
        print(json.dumps(compare_runs(args.first, args.second, args.policy, args.metric)))
    except InputError as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
