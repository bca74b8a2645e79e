"""docs/policy_gradients.md from fabricated fold runs (merged and cost files), results.py curves, and absent files."""

import json
import sys
from pathlib import Path

import pytest
from docgen import policy_gradients
from docgen.sources import ResultsFileError

sys.path.insert(0, str(Path(__file__).parent))
from fold_runs import COST, DENSE, ROUTER, trainer, two_folds  # noqa: E402
from script_loader import load_script, load_study  # noqa: E402

EXTRA = {
    "sl": (trainer(rl=0), DENSE),
    "rl_loo": (trainer(imitation=0, estimator="leave_one_out"), COST),
    "answer_loo": (trainer(imitation=0, reward="answer", estimator="leave_one_out"), ROUTER),
}


def results(tmp_path: Path) -> tuple[Path, list[str]]:
    folders = [str(f) for f in two_folds(tmp_path / "runs", EXTRA)]
    out = tmp_path / "results"
    merged = [*folders, "--also", "sl", "dense_topk", "--n-boot", "300"]
    assert load_script("results").main(["merge", *merged, "--out", str(out / policy_gradients.MERGED)]) == 0
    cost = [*folders, "--n-boot", "300", "--out", str(out / policy_gradients.COST), "--plot", str(tmp_path / "c.png")]
    assert load_study("cost_curve", "run").main(cost) == 0
    return out, folders


def test_page_from_fabricated_runs(tmp_path):
    out, folders = results(tmp_path)
    page = policy_gradients.render(out)
    # (a) answer_loo (recall .5 .5 1 1) against dense_topk and hybrid (.25 .5 .5 .75): +0.25 on 4 questions
    assert "| `answer_loo` | answer | leave_one_out | RL | dense_topk | 0.750 | 0.500 | +0.250 |" in page
    # (b) fold mean ± std (ddof = 1): router's folds .5 and 1 -> .75 ± .354; rl_loo paired against sl
    assert "| `router` | SL+RL | moving_average | 1 | 0.750 ± 0.354 (2) |" in page
    assert "| `rl_loo` | RL | leave_one_out | 4 | 0.625 ± 0.177 (2) |" in page and "+0.125" in page
    # (c) the cost variant's point, the paired saving and the interpolated tokens of the fixed walk
    assert "| 0.001 | `cost_0p001` | yes | 4 | 125 [" in page and "+50.0% [+50.0%, +50.0%]" in page
    assert "200 (between 2 and 4 nodes)" in page and "![recall against loaded tokens](c.png)" in page
    # (d) one learning-curve picture per group present, (e) the commands of every step
    for group in ("sl_rl", "rl_only", "answer", "cost"):
        assert f"![{group}](policy_gradients_{group}.png)" in page
    assert f"out_dir={folders[1]}" in page and "'++variants.cost_0p001={objective: {token_cost: 0.001}}'" in page
    assert "'cv.folds=[1]'" in page
    assert "scripts/results.py merge" in page and "Not run yet" not in page
    assert "scripts/studies/cost_curve/run.py" in page


def test_learning_curves_script(tmp_path, capsys):
    out, folders = results(tmp_path)
    results_main = load_script("results").main
    assert results_main(["curves", str(out / policy_gradients.MERGED), "--out-dir", str(tmp_path / "docs")]) == 0
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == [
        f"policy_gradients_{g}.png" for g in ("answer", "cost", "rl_only", "sl_rl")
    ]
    run = Path(folders[0]) / "results.json"
    run.write_text(run.read_text().replace('"history"', '"old_history"'))
    capsys.readouterr()
    assert results_main(["curves", *folders, "--out-dir", str(tmp_path / "other")]) == 2
    assert "has no history" in capsys.readouterr().err and not (tmp_path / "other").exists()


def test_a_malformed_results_file_is_named(tmp_path):
    out, _ = results(tmp_path)
    path = out / policy_gradients.COST
    payload = json.loads(path.read_text())
    del payload["cost_variants"][0]["vs_fixed"]
    path.write_text(json.dumps(payload))
    with pytest.raises(ResultsFileError, match="cost_aware_locomo.json"):
        policy_gradients.render(out)


def test_absent_results_say_not_run(tmp_path):
    page = policy_gradients.render(tmp_path)
    assert page.count("*Not run yet: `docs/results/policy_gradients_locomo.json` is not present") == 3
    assert "*Not run yet: `docs/results/cost_aware_locomo.json` is not present" in page
    assert "## Reproduce" in page


def test_a_further_merged_run_gets_its_own_estimators_table(tmp_path):
    out, _ = results(tmp_path)
    assert "### Also run" not in policy_gradients.render(out)
    (out / "policy_gradients_locomo_more.json").write_text((out / policy_gradients.MERGED).read_text())
    page = policy_gradients.render(out)
    assert "### Also run: `policy_gradients_locomo_more.json`" in page
    assert page.count("| `rl_loo` | RL | leave_one_out | 4 | 0.625 ± 0.177 (2) |") == 2
