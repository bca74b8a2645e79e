"""Training runs of ``scripts/train_gnn.py`` gathered into one JSON file (what ``docs/bounded.md`` renders).

    python scripts/collect_train_runs.py --out docs/results/bounded_gnn_train.json \\
        --run global "neighbourhood: false" outputs/gnn/global \\
        --run neighbourhoods "neighbourhood: true" outputs/gnn/neighbourhoods

Each ``--run NAME CODE DIR`` names a ``train_gnn.py`` output folder (its ``results.json``) and says what
differs (``CODE``). The file holds, per run, the training seconds, the per-epoch history (loss,
train-only seconds, validation recall), the best validation recall and the test recall of the
selected reader; ``--command`` records how the runs were made.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from graphmem.eval.report import write_json

FIELDS = ("train_seconds", "val_recall_gnn", "test_recall_gnn")


def run_entry(name: str, code: str, out_dir: Path) -> dict:
    """One run's entry from ``out_dir/results.json``."""
    path = out_dir / "results.json"
    if not path.is_file():
        raise SystemExit(f"error: {path}: no such file (run scripts/train_gnn.py with out_dir={out_dir})")
    results = json.loads(path.read_text())
    metrics = results.get("metrics") if isinstance(results.get("metrics"), dict) else {}
    missing = [f"metrics.{f}" for f in FIELDS if f not in metrics] + (["history"] if "history" not in results else [])
    if missing:
        raise SystemExit(f"error: {path}: no field {missing[0]!r} (not a finished scripts/train_gnn.py run)")
    return {
        "name": name,
        "code": code,
        "dir": str(out_dir),
        "train_seconds": metrics["train_seconds"],
        "history": results["history"],
        "val_recall": metrics["val_recall_gnn"],
        "test_recall": metrics["test_recall_gnn"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--run", nargs=3, action="append", metavar=("NAME", "CODE", "DIR"), required=True)
    parser.add_argument("--command", default=None, help="how the runs were made (recorded in the file)")
    args = parser.parse_args(argv)
    runs = [run_entry(name, code, Path(d)) for name, code, d in args.run]
    payload = {"runs": runs, "command": args.command or " ".join(sys.argv)}
    write_json(payload, args.out)
    print(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
