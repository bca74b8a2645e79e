"""docs/bounded.md renders every results file it is given, and says which are missing."""

import json
import sys
from pathlib import Path

from docgen import bounded

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402


def pair(first, second, diff):
    run = {"evidence_recall": first, "served_p50_ms": 174.0, "served_p95_ms": 200.0, "batched_questions_per_s": 9.0}
    return {
        "first": run,
        "second": {**run, "evidence_recall": second, "served_p50_ms": 2.5},
        "paired": {"n": 200, "first": first, "second": second, "diff": diff, "ci": [-0.01, 0.02], "p": 0.3},
        "identical_loaded_share": 0.9,
    }


def test_render_tables_and_missing_files(tmp_path):
    (tmp_path / "bounded_ppr.json").write_text(
        json.dumps({"policy": "ppr", "pairs": {"hotpotqa-pooled": pair(0.88, 0.8925, 0.0125)}, "command": "cmd-a"})
    )
    sweep = {
        "sizes": {
            "1000": {
                "policies": {
                    "ppr+ann": {"end_to_end_p50_ms": 2.0, "end_to_end_p95_ms": 3.0, "end_to_end_cpu_p50_ms": 1.9}
                }
            },
            "1000000": {
                "policies": {
                    "ppr+ann": {"end_to_end_p50_ms": 3.0, "end_to_end_p95_ms": 4.0, "end_to_end_cpu_p50_ms": 2.9}
                }
            },
        },
        "growth": {"ppr+ann": {"p50_largest_over_smallest": 1.5, "cpu_p50_largest_over_smallest": 1.526}},
        "load_average_at_start": [2.0, 2.0, 2.0],
        "load_average_at_end": [3.0, 3.0, 3.0],
        "command": "cmd-b",
    }
    (tmp_path / "bounded_scaling.json").write_text(json.dumps(sweep))
    page = bounded.render(tmp_path)
    assert (
        "| hotpotqa-pooled | 200 | 0.8800 | 0.8925 | +0.0125 [-0.0100, +0.0200] | 0.300 | 90.0% | 174 → 2.50 |" in page
    )
    assert "| `ppr+ann` | 2.00 / 3.00 (1.90) | 3.00 / 4.00 (2.90) | 1.50×, 1.53× |" in page
    assert "`cmd-a`" in page and "`cmd-b`" in page
    assert "(bounded_gnn.json not present: not measured)" in page
    assert "(bounded_gnn_train.json not present: not measured)" in page


def test_training_runs_are_collected_and_rendered(tmp_path, capsys):
    """scripts/results.py collect gathers finished train_gnn.py runs and the page renders them; an
    unfinished run is refused in one line naming its path, with exit status 2."""
    results_main = load_script("results").main

    def main(args):
        return results_main(["collect", *args])

    for name, seconds in (("global", 12.0), ("local", 9.0)):
        run = tmp_path / name
        run.mkdir()
        history = [{"epoch": e, "loss": 1.0, "train_s": seconds / 4, "val_recall": 0.5} for e in range(3)]
        metrics = {"train_seconds": seconds, "val_recall_gnn": 0.5, "test_recall_gnn": 0.6}
        provenance = {"data_sha256": "d", "graphset_hash": "g", "config_sha256": "c", "finished": True}
        results = {"metrics": metrics, "history": history, "provenance": provenance}
        (run / "results.json").write_text(json.dumps(results))
    out = tmp_path / "results" / "bounded_gnn_train.json"
    args = ["--out", str(out), "--command", "cmd-c"]
    assert main([*args, "--run", "global", "neighbourhood: false", str(tmp_path / "global"),
                 "--run", "local", "neighbourhood: true", str(tmp_path / "local")]) == 0  # fmt: skip
    page = bounded.render(out.parent)
    assert "| global | neighbourhood: false | 3 | 12.0 | 4.0 | 3.0 | 0.5000 | 0.6000 |" in page
    assert "| local | neighbourhood: true | 3 | 9.0 | 3.0 | 2.2 | 0.5000 | 0.6000 |" in page and "`cmd-c`" in page
    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "results.json").write_text(json.dumps({"metrics": {"train_seconds": 1.0}}))
    capsys.readouterr()
    again = ["--out", str(tmp_path / "again.json"), "--command", "cmd-c"]
    assert main([*again, "--run", "x", "y", str(tmp_path / "unfinished")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "unfinished/results.json: records no finished run" in err
