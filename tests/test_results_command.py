"""scripts/results.py: compare and paired on fabricated evaluate runs with known numbers, and one-line refusals."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fold_runs import two_folds  # noqa: E402
from script_loader import load_script  # noqa: E402

results_main = load_script("results").main


def evaluate_run(folder: Path, recalls: list[float], entries: list[list[int]]) -> Path:
    """An ``evaluate.py`` run of ``ppr``: one question per recall (with its entries), and its results.json."""
    folder.mkdir(parents=True)
    rows = [
        {"qid": f"q{i}", "category": 1, "metrics": {"evidence_recall": r}, "trace": {"entries": e}, "loaded": e}
        for i, (r, e) in enumerate(zip(recalls, entries))
    ]
    (folder / "questions_ppr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    overall = {"evidence_recall": sum(recalls) / len(recalls), "latency_ms_p50": 2.0, "latency_ms_p95": 3.0}
    policies = {"ppr": {"summary": {"overall": overall}, "info": {"batched_questions_per_s": 9.0}}}
    (folder / "results.json").write_text(json.dumps({"policies": policies}))
    return folder


def test_compare_two_runs_and_pairs(tmp_path, capsys):
    a = evaluate_run(tmp_path / "a", [0.5, 0.5, 1.0, 0.0], [[1, 2], [3, 4], [5, 6], [7, 8]])
    b = evaluate_run(tmp_path / "b", [1.0, 0.5, 1.0, 0.5], [[1, 2], [3, 9], [5, 6], [7, 8]])
    assert results_main(["compare", str(a), str(b), "--policy", "ppr"]) == 0
    cmp = json.loads(capsys.readouterr().out)
    assert (cmp["n"], cmp["first"], cmp["second"], cmp["diff"]) == (4, 0.5, 0.75, 0.25)
    assert cmp["entry_agreement"] == 7 / 8 and cmp["entry_slots"] == 8
    out = tmp_path / "pairs.json"
    assert results_main(["compare", "--policy", "ppr", "--out", str(out), "--pair", "x", str(a), str(b)]) == 0
    pair = json.loads(out.read_text())["pairs"]["x"]
    assert pair["identical_loaded_share"] == 0.75 and pair["second"]["evidence_recall"] == 0.75
    assert out.read_text().endswith("}\n")


def test_compare_refuses_a_run_without_results_in_one_line(tmp_path, capsys):
    a = evaluate_run(tmp_path / "a", [0.5], [[1]])
    (tmp_path / "empty").mkdir()
    out = tmp_path / "pairs.json"
    args = ["compare", "--policy", "ppr", "--out", str(out), "--pair", "x", str(a), str(tmp_path / "empty")]
    assert results_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "empty/results.json: no such file" in err and err.count("\n") == 1
    assert not out.exists()
    assert results_main(["compare", str(a), "--policy", "ppr"]) == 2
    assert "two run folders" in capsys.readouterr().err
    assert results_main(["compare", str(a), str(a), "--policy", "ppr"]) == 2  # one question: nothing to pair
    assert "fewer than two questions with 'evidence_recall'" in capsys.readouterr().err
    b = evaluate_run(tmp_path / "b", [0.5, 1.0], [[1], [2]])
    assert results_main(["compare", str(b), str(b), "--policy", "ppr", "--metric", "f1"]) == 2
    assert "fewer than two questions with 'f1'" in capsys.readouterr().err


def test_paired_per_fold_means_and_a_missing_policy(tmp_path, capsys):
    folders = two_folds(tmp_path / "runs")
    out = tmp_path / "paired.json"
    args = ["paired", str(folders[0]), "--policy", "router", "--reference", "dense_topk", "--n-boot", "200"]
    assert results_main([*args, "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert payload["command"].startswith(".venv/bin/python scripts/results.py paired ")
    # fold 0: router .5 .5, dense_topk .25 .5 (the adversarial and no-gold rows left out)
    assert payload["per_fold"]["router"]["evidence_recall"] == {"0": 0.5}
    assert payload["per_fold"]["dense_topk"]["evidence_recall"] == {"0": 0.375}
    capsys.readouterr()
    assert results_main(["paired", str(folders[0]), "--policy", "nope", "--reference", "dense_topk"]) == 2
    assert "questions_nope.jsonl: no question file" in capsys.readouterr().err


@pytest.mark.parametrize("n_boot", ["0", "-5"])
def test_a_bootstrap_of_no_draws_is_one_line(tmp_path, capsys, n_boot):
    folders = two_folds(tmp_path / "runs")
    args = ["paired", str(folders[0]), "--policy", "router", "--reference", "dense_topk", "--n-boot", n_boot]
    assert results_main(args) == 2
    err = capsys.readouterr().err
    assert err == f"error: --n-boot {n_boot}: must be a positive number of bootstrap draws\n"
