"""scripts/results.py: compare and paired on fabricated evaluate runs with known numbers, and one-line refusals."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fold_runs import two_folds, write_fold  # noqa: E402
from script_loader import load_script  # noqa: E402

results_main = load_script("results").main


def evaluate_run(folder: Path, recalls: list[float], entries: list[list[int]], data: str = "d") -> Path:
    """A finished ``evaluate.py`` run of ``ppr``: one question per recall (with its entries), and its results.json
    (``data``: its data file's hash)."""
    folder.mkdir(parents=True)
    rows = [
        {"qid": f"q{i}", "category": 1, "metrics": {"evidence_recall": r}, "trace": {"entries": e}, "loaded": e}
        for i, (r, e) in enumerate(zip(recalls, entries))
    ]
    (folder / "questions_ppr.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    overall = {"evidence_recall": sum(recalls) / len(recalls), "latency_ms_p50": 2.0, "latency_ms_p95": 3.0}
    policies = {"ppr": {"summary": {"overall": overall}, "info": {"batched_questions_per_s": 9.0}}}
    provenance = {"data_sha256": data, "graphset_hash": "g", "config_sha256": "c", "finished": True}
    provenance["question_rows"] = {"ppr": len(rows)}
    (folder / "results.json").write_text(json.dumps({"policies": policies, "provenance": provenance}))
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


# --------------------------------------------------------------------- provenance: what runs rest on, checked
def fold_pair(root: Path, **second) -> list[Path]:
    """Two finished fold runs of router and dense_topk; ``second``: what write_fold takes for the second."""
    values = {0: [(100, 0.5), (200, 0.5)], 1: [(300, 1.0), (400, 1.0)]}
    policies = {k: {"router": values[k], "dense_topk": values[k]} for k in (0, 1)}
    return [
        write_fold(root / f"fold{k}", k, policies[k], {}, {}, "dense_topk", **(second if k else {})) for k in (0, 1)
    ]


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_merge_refuses_runs_of_other_data_or_settings_unless_the_difference_is_named(tmp_path, capsys):
    out = tmp_path / "merged.json"
    data = fold_pair(tmp_path / "data", data_sha256="e" * 64)
    assert results_main(["merge", *map(str, data), "--n-boot", "50", "--out", str(out)]) == 2
    assert f"{data[1]} and {data[0]} differ in data: " in one_error(capsys) and not out.exists()
    lr = fold_pair(tmp_path / "lr", extra_overrides=("trainer.optim.lr=0.01",))
    assert results_main(["merge", *map(str, lr), "--n-boot", "50", "--out", str(out)]) == 2
    assert "differ in trainer.optim.lr: " in one_error(capsys)
    intended = ["--differ", "trainer.optim.*"]
    assert results_main(["merge", *map(str, lr), "--n-boot", "50", "--out", str(out), *intended]) == 0
    merged = json.loads(out.read_text())["provenance"]
    assert merged["finished"] and merged["intended"] == ["trainer.optim.*"] and len(merged["runs"]) == 2


def test_out_is_always_a_new_file_never_an_input(tmp_path, capsys):
    folders = two_folds(tmp_path / "runs")
    own = folders[0] / "results.json"
    before = own.read_bytes()
    assert results_main(["merge", *map(str, folders), "--n-boot", "50", "--out", str(own)]) == 2
    assert f"--out {own} is an existing file: results go to a new file" in one_error(capsys)
    assert own.read_bytes() == before
    assert results_main(["merge", *map(str, folders), "--n-boot", "50", "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a folder" in one_error(capsys)
    gnn = gnn_run(tmp_path / "gnn")
    args = ["collect", "--run", "a", "x", str(gnn), "--out", str(gnn / "results.json")]
    assert results_main(args) == 2 and "is an existing file" in one_error(capsys)


def test_a_killed_or_cut_short_run_is_refused_by_paired_compare_and_merge(tmp_path, capsys):
    a = evaluate_run(tmp_path / "a", [0.5, 1.0, 0.0], [[1], [2], [3]])
    killed = evaluate_run(tmp_path / "killed", [1.0, 1.0, 0.5], [[1], [2], [3]])
    (killed / "results.json").unlink()  # question files, no results.json: a killed evaluation
    assert results_main(["paired", str(killed), "--policy", "ppr", "--reference", "dense"]) == 2
    assert "results.json: no such file: the run never finished (questions_ppr.jsonl are" in one_error(capsys)
    assert results_main(["compare", str(a), str(killed), "--policy", "ppr"]) == 2
    assert "the run never finished" in one_error(capsys)
    folders = two_folds(tmp_path / "runs")
    short = folders[1] / "questions_router.jsonl"
    short.write_text("".join(short.read_text().splitlines(keepends=True)[:-1]))
    assert results_main(["merge", *map(str, folders), "--n-boot", "50", "--out", str(tmp_path / "m.json")]) == 2
    assert f"{short}: 3 rows, but results.json counts 4" in one_error(capsys)
    short.unlink()
    assert results_main(["merge", *map(str, folders), "--n-boot", "50", "--out", str(tmp_path / "m.json")]) == 2
    assert "no question file for policy 'router' in this run, though results.json counts" in one_error(capsys)


def test_paired_refuses_a_policy_against_itself_and_fewer_than_two_questions(tmp_path, capsys):
    folders = two_folds(tmp_path / "runs")
    assert results_main(["paired", str(folders[0]), "--policy", "router", "--reference", "router"]) == 2
    assert "--policy and --reference are both 'router'" in one_error(capsys)
    one = evaluate_run(tmp_path / "one", [0.5], [[1]])
    (one / "questions_dense.jsonl").write_text((one / "questions_ppr.jsonl").read_text())
    results = json.loads((one / "results.json").read_text())
    results["provenance"]["question_rows"]["dense"] = 1
    (one / "results.json").write_text(json.dumps(results))
    assert results_main(["paired", str(one), "--policy", "ppr", "--reference", "dense"]) == 2
    assert "fewer than two questions with a metric in both 'ppr' and 'dense'" in one_error(capsys)


def test_compare_refuses_runs_over_other_data_and_writes_its_out(tmp_path, capsys):
    a = evaluate_run(tmp_path / "a", [0.5, 0.5, 1.0, 0.0], [[1, 2], [3, 4], [5, 6], [7, 8]])
    other = evaluate_run(tmp_path / "other", [1.0, 0.5, 1.0, 0.5], [[1, 2], [3, 9], [5, 6], [7, 8]], data="e")
    assert results_main(["compare", str(a), str(other), "--policy", "ppr"]) == 2
    assert f"{other} and {a} differ in data: " in one_error(capsys)
    out = tmp_path / "cmp.json"
    assert results_main(["compare", str(a), str(other), "--policy", "ppr", "--differ", "data", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["diff"] == 0.25


def gnn_run(folder: Path, seconds: float = 1.0) -> Path:
    """A finished ``train_gnn.py`` run's results.json."""
    folder.mkdir(parents=True)
    metrics = {"train_seconds": seconds, "val_recall_gnn": 0.5, "test_recall_gnn": 0.4}
    provenance = {"data_sha256": "d", "graphset_hash": "g", "config_sha256": "c", "question_rows": {}}
    payload = {"metrics": metrics, "history": [], "provenance": {**provenance, "finished": True}}
    (folder / "results.json").write_text(json.dumps(payload))
    return folder


def test_collect_refuses_one_run_name_twice(tmp_path, capsys):
    a, b = gnn_run(tmp_path / "a"), gnn_run(tmp_path / "b")
    out = tmp_path / "c.json"
    assert results_main(["collect", "--run", "x", "one", str(a), "--run", "x", "two", str(b), "--out", str(out)]) == 2
    assert "--run 'x' is given 2 times: each run has one name" in one_error(capsys) and not out.exists()
    assert results_main(["collect", "--run", "x", "one", str(a), "--run", "y", "two", str(b), "--out", str(out)]) == 0
