"""Paired comparison of two evaluation runs of one policy (e.g. exact vs ANN entry selection).

    python scripts/compare_selectors.py <exact out_dir> <ann out_dir> --policy beta_bfs

Reads each run's ``questions_<policy>.jsonl`` (``scripts/evaluate.py`` writes them), keeps the
questions of the ``overall`` group (:func:`graphmem.eval.metrics.in_overall`) and prints, for
evidence recall, both runs' means, the paired difference (second - first) with its bootstrap CI
and paired t-test p-value (:func:`graphmem.eval.stats.paired_comparison`), n, and the share of
entry slots that agree.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from graphmem.eval.metrics import in_overall
from graphmem.eval.stats import paired_comparison


def read_rows(out_dir: Path, policy: str) -> dict[str, dict]:
    path = out_dir / f"questions_{policy}.jsonl"
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file (run scripts/evaluate.py with out_dir={out_dir})")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["qid"]: r for r in rows if in_overall(r["category"])}


def compare(first: Path, second: Path, policy: str, metric: str = "evidence_recall") -> dict:
    a, b = read_rows(first, policy), read_rows(second, policy)
    if set(a) != set(b):
        raise SystemExit(f"error: {first} and {second} hold different questions ({len(set(a) ^ set(b))} differ)")
    cmp = paired_comparison(
        "second",
        {q: r["metrics"][metric] for q, r in b.items()},
        "first",
        {q: r["metrics"][metric] for q, r in a.items()},
        metric,
    )
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=Path)
    ap.add_argument("second", type=Path)
    ap.add_argument("--policy", required=True)
    ap.add_argument("--metric", default="evidence_recall")
    args = ap.parse_args()
    print(json.dumps(compare(args.first, args.second, args.policy, args.metric)))


if __name__ == "__main__":
    main()
