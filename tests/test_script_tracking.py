"""Every entry point tracks: one run per job, grouped, with complete curves, artifacts and lineage; Hydra job logs."""

import os
import subprocess
import sys
from pathlib import Path

from graphmem.tracking import checkpoint_artifact, graphset_artifact, read_runs, upstream
from tests import script_runner
from tests.test_tracking import saved_graphset

ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str, *overrides: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = script_runner.run(
        [sys.executable, str(ROOT / "scripts" / script), *overrides], cwd=cwd, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def hydra_log(folder: Path, job: str) -> str:
    text = (folder / f"{job}.log").read_text()
    assert text.strip(), f"{folder / f'{job}.log'} is empty"
    return text


def test_train_gnn_tracks_one_train_run(tmp_path):
    gs_dir = saved_graphset(tmp_path / "set", n_graphs=6, per_graph=4)
    run_script(
        "train_gnn.py",
        f"graphset={gs_dir}",
        f"checkpoint={tmp_path / 'reader.pt'}",
        f"out_dir={tmp_path / 'out'}",
        "train.epochs=2",
        "train.hidden_dim=8",
        "logger=jsonl",
        f"logger.dir={tmp_path / 'runs'}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "progress=false",
        "threads=1",
    )
    (run,) = read_runs(tmp_path / "runs")
    assert (run.job_type, run.name, run.state) == ("train", "gnn-locomo-fold0", "finished")
    assert [row["epoch"] for row in run.history] == [0, 1] and all("val/recall" in r for r in run.history)
    assert {"val/best_recall", "test/recall_gnn", "test/recall_cosine_walk"} <= set(run.summary)
    assert [i.key for i in run.inputs] == [graphset_artifact(gs_dir).key]
    assert [(o.type, o.name) for o in run.outputs] == [
        ("model", "gnn-locomo-fold0"),
        ("results", f"run-{run.id}-results"),
    ]
    assert "graphs;" in hydra_log(tmp_path / "hydra", "train_gnn")


ABLATION = [  # every variant trains two epochs: one of imitation and one of REINFORCE, or two of one phase
    "+experiment=ablation",
    "trainer.objective.imitation_epochs=1",
    "trainer.objective.rl_epochs=1",
    "variants.rl_only.objective.rl_epochs=2",
    "+variants.sl_only.objective.imitation_epochs=2",
    "cv.folds=[0,1]",
    "trainer.optim.batch_size=8",
    "baselines=[beta_bfs]",
]
VARIANTS = {
    "router",
    "edges_onehot",
    "edges_phase1",
    "edges_hage_table",
    "no_intent",
    "objective_hage_mdp",
    "rl_only",
    "sl_only",
}


def _check_ablation_runs(runs: list[dict]) -> None:
    """One train run per (fold, variant), one group for all, every epoch of every curve present."""
    train = [r for r in runs if r["job_type"] == "train"]
    assert sorted(r["name"] for r in train) == sorted(f"fold{k}-{v}" for k in (0, 1) for v in VARIANTS)
    assert len({r["group"] for r in runs}) == 1 and runs[0]["group"].startswith("train-locomo-ablation-")
    for r in train:
        epochs = [row["epoch"] for row in r["history"] if "epoch" in row]
        assert epochs == [0, 1], (r["name"], epochs)
        assert all("val/return" in row for row in r["history"] if "epoch" in row), r["name"]
        assert "test/evidence_recall" in r["summary"] and "val/best_return" in r["summary"]


def test_train_ablation_offline_one_wandb_run_per_fold_and_variant(tmp_path):
    from tests.wandb_offline import offline_runs

    gs_dir = saved_graphset(tmp_path / "set", n_graphs=6, per_graph=4)
    out = tmp_path / "train"
    run_script(
        "train.py",
        f"graphset={gs_dir}",
        *ABLATION,
        "logger.mode=offline",
        f"out_dir={out}",
        f"hydra.run.dir={tmp_path / 'hydra'}",
        "progress=false",
    )
    runs = []
    for r in offline_runs(out / "wandb"):
        history = [{k: v for k, v in row.items() if not k.startswith("_")} for row in r["history"]]
        runs.append({**r["run"], "history": [h for h in history if h], "summary": r["summary"]})
    _check_ablation_runs(runs)
    assert "fold 1" in hydra_log(tmp_path / "hydra", "train")


def test_lineage_results_to_checkpoint_to_graph_set(tmp_path):
    """Train, then evaluate the trained router, both tracked to JSONL: results -> checkpoint -> graph set."""
    gs_dir = saved_graphset(tmp_path / "set", n_graphs=6, per_graph=4)
    runs_dir = tmp_path / "runs"
    common = [f"graphset={gs_dir}", "logger=jsonl", f"logger.dir={runs_dir}", "progress=false"]
    run_script(
        "train.py",
        *common,
        "trainer.objective.imitation_epochs=1",
        "trainer.objective.rl_epochs=1",
        "trainer.optim.batch_size=8",
        "baselines=[]",
        f"out_dir={tmp_path / 'train'}",
        f"hydra.run.dir={tmp_path / 'hydra_train'}",
    )
    best = tmp_path / "train" / "fold0" / "router" / "best.pt"
    qid = "conv-0#1"
    run_script(
        "evaluate.py",
        *common,
        "policy=router",
        f"policy.checkpoint={best}",
        "policy.device=cpu",
        "policies=[router,beta_bfs]",
        "sweep_tokens=[250,2500]",
        f"plot_question='{qid}'",  # quoted: '#' is special in Hydra's override grammar
        f"out_dir={tmp_path / 'eval'}",
        f"hydra.run.dir={tmp_path / 'hydra_eval'}",
    )
    runs = read_runs(runs_dir)
    (evaluation,) = [r for r in runs if r.job_type == "evaluate" and r.name.startswith("evaluate-")]
    (results,) = evaluation.outputs
    assert results.type == "results" and results.name == f"run-{evaluation.id}-results"
    assert {"results.json", "budget_sweep.png", "question_conv-0_1.png", "questions_router.jsonl"} <= set(results.files)
    chain = upstream(runs, results)
    gs_ref = graphset_artifact(gs_dir)
    model = [a for a in chain if a.type == "model"]
    assert (
        model and model[0].name == "router-locomo-fold0-router" and model[0].digest == checkpoint_artifact(best).digest
    )
    dataset = [a for a in chain if a.type == "dataset"]
    assert (
        dataset and dataset[0].key == gs_ref.key and dataset[0].name == f"locomo-{gs_ref.metadata['config_hash'][:12]}"
    )
    producer = [r for r in runs if any(o.key == model[0].key for o in r.outputs)]
    assert [p.name for p in producer] == ["fold0-router"] and producer[0].job_type == "train"
    assert evaluation.tables["questions/router"]["columns"][:4] == ["qid", "graph", "category", "policy"]
    assert any(k.startswith("test/router/overall/evidence_recall") for k in evaluation.summary)
    assert "graphs," in hydra_log(tmp_path / "hydra_eval", "evaluate")


def test_build_graph_tracks_one_build_run_with_the_set_as_its_dataset_artifact(tmp_path):
    common = ["data=locomo", "data.limit=2", "graph.encoder=hashing", "plot=false", "progress=false", "logger=jsonl"]
    common += [f"graphset_dir={tmp_path / 'graphs'}", f"logger.dir={tmp_path / 'runs'}"]
    run_script("build_graph.py", *common, f"hydra.run.dir={tmp_path / 'hydra1'}")
    run_script("build_graph.py", *common, f"hydra.run.dir={tmp_path / 'hydra2'}")  # reuses the saved set
    built, reused = sorted(read_runs(tmp_path / "runs"), key=lambda r: r.summary["status"])
    (gs_dir,) = [p for p in (tmp_path / "graphs").iterdir() if (p / "manifest.json").is_file()]
    ref = graphset_artifact(gs_dir)
    assert ref.name == f"locomo-{ref.metadata['config_hash'][:12]}" and ref.metadata["graphs"] == 2
    assert (built.job_type, built.summary["status"], reused.summary["status"]) == ("build", "built", "reused")
    assert [o.key for o in built.outputs] == [ref.key] and built.inputs == []
    assert [i.key for i in reused.inputs] == [ref.key] and reused.outputs == []
    assert built.summary["graphs"] == 2 and built.summary["edges"] > 0 and built.group.startswith("build-locomo-")
    assert [row[0] for row in built.tables["graphs"]["rows"]] == ["conv-26", "conv-30"]
    assert "total: {" in hydra_log(tmp_path / "hydra1", "build_graph")
    assert "reused the saved graph set" in hydra_log(tmp_path / "hydra2", "build_graph")


def test_benchmark_tracks_one_benchmark_run(tmp_path):
    gs_dir = saved_graphset(tmp_path / "set", n_graphs=2, per_graph=3)
    out = tmp_path / "bench"
    run_script(
        "benchmark.py",
        "sizes=[100,200]",
        "num_queries=2",
        "ppr_queries=1",
        "gnn_queries=1",
        "loop_queries=1",
        "dim=4",
        "policies=[beta_bfs,dense_topk]",
        "locomo.enabled=false",
        f"datasets=[{gs_dir}]",
        "dataset_loop_queries=2",
        "dataset_repeats=1",
        "train.enabled=false",
        "logger=jsonl",
        "progress=false",
        f"out_dir={out}",
    )
    (run,) = read_runs(out / "tracking")
    assert (run.job_type, run.state) == ("benchmark", "finished") and run.group.startswith("benchmark-latency-")
    assert [i.key for i in run.inputs] == [graphset_artifact(gs_dir).key]
    assert [r["nodes"] for r in run.history] == [100, 200]
    assert all({"latency/beta_bfs", "latency/dense_topk"} <= set(r) for r in run.history)
    assert {"nodes": None, "latency/*": "nodes"}.items() <= {
        m["name"]: m.get("step_metric") for m in run.metrics
    }.items()
    assert len(run.tables["synthetic"]["rows"]) == 4 and len(run.tables["graph_sets"]["rows"]) == 2
    (results,) = run.outputs
    assert results.type == "results" and set(results.files) == {"benchmark.json", "benchmark.png"}
    assert "growth (largest / smallest size)" in hydra_log(out / "hydra", "benchmark")
