"""Paired comparisons of evaluation runs of one policy that differ in one setting, written as one JSON file.

    python scripts/compare_runs.py --policy ppr --out docs/results/bounded_ppr.json \\
        --pair locomo outputs/ppr/locomo/power outputs/ppr/locomo/push \\
        --pair hotpotqa-pooled outputs/ppr/hotpotqa-pooled/power outputs/ppr/hotpotqa-pooled/push

Each ``--pair NAME FIRST SECOND`` names two ``scripts/evaluate.py`` output folders over the same
questions. For each pair the file holds both runs' overall evidence recall, the paired difference
(second - first) with its bootstrap CI and paired t-test p-value over the ``overall`` questions
(:func:`graphmem.eval.runs.compare_runs`), the share of questions whose loaded lists are identical,
and each run's served latency (p50 / p95 ms, each
question served alone) and batched questions/s from its ``results.json``. ``--command`` records
how the runs were made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.eval.metrics import in_overall
from graphmem.eval.report import write_json
from graphmem.eval.runs import compare_runs, question_rows


def run_summary(out_dir: Path, policy: str) -> dict:
    """Served latency, throughput and overall recall of one run (its ``results.json``)."""
    path = out_dir / "results.json"
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file (run scripts/evaluate.py with out_dir={out_dir})")
    entry = json.loads(path.read_text())["policies"].get(policy)
    if entry is None:
        raise SystemExit(f"error: {path}: no results for policy {policy!r}")
    overall = entry["summary"]["overall"]
    return {
        "dir": str(out_dir),
        "evidence_recall": overall["evidence_recall"],
        "served_p50_ms": overall["latency_ms_p50"],
        "served_p95_ms": overall["latency_ms_p95"],
        "batched_questions_per_s": entry["info"]["batched_questions_per_s"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--pair", nargs=3, action="append", metavar=("NAME", "FIRST", "SECOND"), required=True)
    parser.add_argument("--command", default=None, help="how the runs were made (recorded in the file)")
    args = parser.parse_args(argv)
    pairs = {}
    for name, first, second in args.pair:
        a, b = Path(first), Path(second)
        pairs[name] = {"first": run_summary(a, args.policy), "second": run_summary(b, args.policy)}
        pairs[name]["paired"] = compare_runs(a, b, args.policy)
        rows_a, rows_b = (
            {r["qid"]: r for r in question_rows(d, args.policy) if in_overall(r["category"])} for d in (a, b)
        )
        same = sum(rows_a[q]["loaded"] == rows_b[q]["loaded"] for q in rows_a)
        pairs[name]["identical_loaded_share"] = same / max(len(rows_a), 1)
    payload = {"policy": args.policy, "pairs": pairs, "command": args.command or " ".join(sys.argv)}
    write_json(payload, args.out)
    print(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
