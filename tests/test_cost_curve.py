"""scripts/studies/cost_curve/run.py on fabricated fold runs with known numbers, and its refusals of bad runs."""

import json
import sys
from pathlib import Path

import pytest

from graphmem.core.errors import InputError

sys.path.insert(0, str(Path(__file__).parent))
from fold_runs import trainer, two_folds  # noqa: E402
from script_loader import load_study  # noqa: E402

cost_curve = load_study("cost_curve", "run")
tradeoff = load_study("cost_curve", "tradeoff")


def test_means_interpolation_and_paired_ratio(tmp_path):
    folders = two_folds(tmp_path / "runs")
    out, png = tmp_path / "cost.json", tmp_path / "cost.png"
    args = [*map(str, folders), "--n-boot", "500", "--out", str(out), "--plot", str(png)]
    assert cost_curve.main(args) == 0
    payload = json.loads(out.read_text())
    assert (
        payload["command"].startswith(".venv/bin/python scripts/studies/cost_curve/run.py") and png.stat().st_size > 0
    )
    assert payload["heuristics"] == ["dense_topk", "hybrid"] and payload["folds"] == [0, 1]
    router = payload["points"]["router"]  # the adversarial and no-gold rows are left out
    assert router["n"] == 4 and router["tokens"]["mean"] == 250 and router["recall"]["mean"] == 0.75
    sweep = payload["curves"]["router"]
    assert [p["max_nodes"] for p in sweep] == [2, 4]
    assert [p["tokens"]["mean"] for p in sweep] == [100, 300] and [p["recall"]["mean"] for p in sweep] == [0.375, 0.875]
    lo, hi = sweep[0]["recall"]["ci95"]
    assert 0.25 <= lo < 0.375 < hi <= 0.5
    (cost,) = payload["cost_variants"]
    assert cost["variant"] == "cost_0p001" and cost["token_cost"] == 0.001
    assert cost["point"]["tokens"]["mean"] == 125 and cost["point"]["recall"]["mean"] == 0.625
    vs = cost["vs_fixed"]
    assert vs["recall"]["n"] == 4 and vs["recall"]["mean_diff"] == pytest.approx(-0.125)
    assert vs["tokens"]["ratio"] == 0.5 and vs["tokens"]["saving"] == 0.5
    assert vs["tokens"]["saving_ci95"] == pytest.approx([0.5, 0.5])  # half on every question: every resample
    # recall .625 lies halfway between the sweep's .375 (100 tokens) and .875 (300 tokens)
    assert vs["fixed_tokens_to_reach"] == {"tokens": 200.0, "between": [2, 4], "status": "interpolated"}
    command = payload["training"][1]["command"]  # what the run recorded, as overrides of the default config
    assert command.startswith(".venv/bin/python scripts/train.py data=locomo ") and "graphset=/sets/locomo" in command
    assert "'cv.folds=[1]'" in command and "'++variants.cost_0p001={objective: {token_cost: 0.001}}'" in command


def test_ratio_interval_and_reach_outside_the_sweep():
    r = tradeoff.paired_token_ratio({"a": 1.0, "b": 3.0, "c": 2.0}, {"a": 2.0, "b": 2.0, "c": 2.0}, n_boot=2000)
    assert r["ratio"] == 1.0 and r["ratio_ci95"][0] < 1.0 < r["ratio_ci95"][1]
    assert r["saving_ci95"] == pytest.approx([1 - r["ratio_ci95"][1], 1 - r["ratio_ci95"][0]])
    points = [
        {"max_nodes": n, "tokens": {"mean": t}, "recall": {"mean": y}} for n, t, y in [(1, 10, 0.2), (2, 30, 0.6)]
    ]
    assert tradeoff.tokens_to_reach(points, 0.1)["status"] == "below_sweep"
    assert tradeoff.tokens_to_reach(points, 0.7) == {"tokens": None, "between": None, "status": "above_sweep"}
    assert tradeoff.tokens_to_reach(points, 0.3)["tokens"] == pytest.approx(15.0)
    with pytest.raises(InputError):
        tradeoff.paired_token_ratio({"a": 1.0}, {"a": 1.0})


def error(capsys, args) -> str:
    assert cost_curve.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_refuses_missing_and_inconsistent_runs(tmp_path, capsys):
    folders = [str(f) for f in two_folds(tmp_path / "runs")]
    out = str(tmp_path / "out.json")
    assert "results.json: no such file" in error(capsys, [folders[0], str(tmp_path / "nowhere"), "--out", out])
    assert "already merged" in error(capsys, [folders[0], folders[0], "--out", out])
    assert "matches 'lambda_*'" in error(capsys, [*folders, "--cost", "lambda_*", "--out", out])
    run = Path(folders[1]) / "results.json"
    payload = json.loads(run.read_text())
    for r in payload["records"]:
        if r["policy"] == "cost_0p001":
            r["trainer"] = trainer(token_cost=0.01)
    run.write_text(json.dumps(payload))
    assert "'cost_0p001': its trainer settings differ between folds" in error(capsys, [*folders, "--out", out])
    for r in payload["records"]:
        if r["policy"] == "cost_0p001":
            r["trainer"] = trainer(token_cost=0.001)
    run.write_text(json.dumps(payload | {"node_sweep": None}))
    assert "no node sweep" in error(capsys, [*folders, "--out", out])
    run.write_text(json.dumps(payload))
    (Path(folders[1]) / "questions_dense_topk.jsonl").unlink()
    assert "questions_dense_topk.jsonl: no question file for policy" in error(capsys, [*folders, "--out", out])
    payload["records"] = [r for r in payload["records"] if r["policy"] != "cost_0p001"]
    run.write_text(json.dumps(payload))
    assert "trained on folds [0]" in error(capsys, [*folders, "--out", out])
    assert not Path(out).exists()


def test_training_command_overrides_compose_back_to_the_recorded_config():
    from omegaconf import OmegaConf

    import rl.walk  # noqa: F401  (the trainer schema)
    from graphmem.eval.runs import run_overrides
    from tests.script_loader import compose

    given = [
        "cv.folds=[3]",
        "trainer.objective.rl_epochs=2",
        "logger=none",
        "node_sweep.levels=[2,6]",
        "+variants.cost_1e3={objective: {token_cost: 0.001, estimator: leave_one_out, group_size: 4}}",
        "~variants.router",
        "out_dir=/runs/a b",
    ]
    recorded = OmegaConf.to_container(compose("train", given), resolve=True)
    default = OmegaConf.to_container(compose("train"), resolve=True)
    overrides = run_overrides(recorded, default)
    assert "~variants.router" in overrides and 'out_dir="/runs/a b"' in overrides
    assert OmegaConf.to_container(compose("train", overrides), resolve=True) == recorded
