"""scripts/evaluate.py (Hydra compose API and runs of the script as its own process)."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.datasets.types import LoadReport, Question
from graphmem.store.graphset import GraphSet
from graphmem.tracking import read_runs
from tests import script_runner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402

CONFIGS = ROOT / "configs"


# ---------------------------------------------------------------------------- the script
def saved_graphset(path: Path) -> Path:
    graphs, questions = {}, []
    gen = torch.Generator().manual_seed(0)
    for g in range(2):
        graph = make_synthetic_graph(30, avg_degree=4.0, dim=16, seed=g)
        graphs[f"conv-{g}"] = graph
        for i in range(5):
            questions.append(Question(f"conv-{g}#{i}", f"conv-{g}", f"q{i}", "a", (graph.node_ids[3 * i],), 1 + i))
    emb = torch.nn.functional.normalize(torch.randn(len(questions), 16, generator=gen), dim=1)
    return GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic")).save(path)


def compose_cfg(overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name="evaluate", overrides=overrides)


def test_compose_run_writes_every_output(tmp_path):
    script = load_script("evaluate")
    gs_dir = saved_graphset(tmp_path / "set")
    out = tmp_path / "out"
    cfg = compose_cfg(
        [
            f"graphset={gs_dir}",
            f"out_dir={out}",
            "policies=[beta_bfs,dense_topk]",
            "sweep_tokens=[250,2500]",
            "logger.mode=disabled",
            "progress=false",
            "device=cpu",
            "stats.reference=dense_topk",
        ]
    )
    payload = script.evaluate(cfg)
    assert set(payload["policies"]) == {"beta_bfs", "dense_topk"}
    saved = json.loads((out / "results.json").read_text())
    summary = saved["policies"]["beta_bfs"]["summary"]
    assert summary["overall"]["n"] == 8 and summary["adversarial"]["n"] == 2 and "temporal" in summary
    assert [p["max_tokens"] for p in saved["budget_sweep"]["dense_topk"]] == [250, 2500]
    assert (out / "budget_sweep.png").read_bytes()[:4] == b"\x89PNG"
    rows = (out / "questions_dense_topk.jsonl").read_text().splitlines()
    assert len(rows) == 10 and "trace" in json.loads(rows[0])
    provenance = saved["provenance"]  # what results.py checks before reading the run
    assert provenance["finished"] is True and provenance["question_rows"] == {"beta_bfs": 10, "dense_topk": 10}
    assert "data_sha256" in provenance and "graphset_hash" in provenance and len(provenance["config_sha256"]) == 64
    assert "| overall |" in (out / "results.md").read_text()
    assert saved["policies"]["beta_bfs"]["info"]["latency"] == "served alone"  # latency=served by default
    assert "served alone" in (out / "results.md").read_text() and "batched q/s" in (out / "results.md").read_text()
    (run,) = read_runs(out / "tracking")
    assert {"summary", "budget_sweep", "questions/beta_bfs", "paired_vs_reference"} <= set(run.tables)
    # paired statistics against the reference, from the per-question rows written above
    paired = {c["metric"]: c for c in saved["paired"]}
    assert saved["meta"]["reference"] == "dense_topk" and {c["policy"] for c in saved["paired"]} == {"beta_bfs"}
    recall = paired["evidence_recall"]
    rows_b = [json.loads(x) for x in (out / "questions_beta_bfs.jsonl").read_text().splitlines()]
    rows_d = [json.loads(x) for x in rows]
    # the overall group: the 2 adversarial (category 5) questions are left out, as in the overall table
    diffs = [
        b["metrics"]["evidence_recall"] - d["metrics"]["evidence_recall"]
        for b, d in zip(rows_b, rows_d)
        if b["category"] != 5
    ]
    assert recall["n"] == 8 == summary["overall"]["n"] and recall["mean_diff"] == pytest.approx(sum(diffs) / 8)
    assert recall["ci_low"] <= recall["mean_diff"] <= recall["ci_high"]
    assert "paired per-question differences vs **dense_topk**" in (out / "results.md").read_text()


def test_reference_policy_is_added_when_not_listed(tmp_path):
    script = load_script("evaluate")
    cfg = compose_cfg(
        [f"graphset={saved_graphset(tmp_path / 'set')}", f"out_dir={tmp_path / 'out'}", "policies=[ppr]"]
        + ["sweep_tokens=[]", "logger.mode=disabled", "progress=false", "stats.n_boot=200"]
    )
    payload = script.evaluate(cfg)
    assert list(payload["policies"]) == ["ppr", "hybrid"]  # the default reference: dense + BM25 fusion
    assert {c["policy"] for c in payload["paired"]} == {"ppr"} and payload["paired"][0]["n_boot"] == 200


@pytest.mark.parametrize(
    "override, message",
    [
        ("budget.max_tokens=-5", "invalid budget"),
        ("policies=[beta_bfs,no_such_policy]", "unknown policy 'no_such_policy'"),
        ("sweep_tokens=[0]", "invalid budget"),
        ("device=gpu7", "policy 'beta_bfs' cannot be constructed"),
        ("stats.n_boot=0", "stats.n_boot must be a positive integer"),
        ("latency=fastest", "latency must be 'served' or 'batch'"),
    ],
)
def test_invalid_config_rejected_before_work(tmp_path, override, message):
    script = load_script("evaluate")
    missing = tmp_path / "no-graphset-here"  # loading it would fail differently: nothing was loaded
    cfg = compose_cfg([f"graphset={missing}", f"out_dir={tmp_path / 'out'}", override])
    with pytest.raises(script.ConfigError, match=message):
        script.evaluate(cfg)
    assert not (tmp_path / "out").exists()


def _env():
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="disabled",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        PYTHONPATH=str(ROOT),
    )
    return env


def test_script_smoke_on_one_locomo_conversation(tmp_path):
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "scripts/evaluate.py",
        "data=locomo",
        "data.limit=1",
        "graph.encoder=hashing",
        f"graphset_dir={tmp_path / 'sets'}",
        f"out_dir={out}",
        "policies=[beta_bfs,dense_topk,uniform_bfs]",
        "sweep_tokens=[250,2500]",
        "progress=false",
    ]
    proc = script_runner.run(cmd, cwd=ROOT, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| overall |" in proc.stdout and "adversarial" in proc.stdout
    saved = json.loads((out / "results.json").read_text())
    listed = {"beta_bfs", "dense_topk", "uniform_bfs"}
    assert saved["meta"]["graphs"] == 1 and set(saved["policies"]) == listed | {"hybrid"}  # + the reference
    assert (out / "budget_sweep.png").is_file()


def test_script_rejects_negative_budget_with_message(tmp_path):
    cmd = [sys.executable, "scripts/evaluate.py", "budget.max_hops=-1", f"out_dir={tmp_path / 'o'}", "logger=none"]
    proc = script_runner.run(cmd, cwd=ROOT, env=_env(), timeout=120)
    assert proc.returncode == 2 and "invalid budget: Budget.max_hops must be a non-negative integer" in proc.stderr
