"""graphmem.tracking: secrets, runs (JSONL and W&B offline), curves, artifacts and lineage."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.datasets.types import LoadReport, Question
from graphmem.store.graphset import GraphSet
from graphmem.tracking import (
    JsonlTracker,
    LoggerConfig,
    Tracker,
    checkpoint_artifact,
    config_for_logging,
    describe_artifact,
    experiment_group,
    graphset_artifact,
    is_secret_name,
    lineage,
    log_checkpoints,
    make_tracker,
    read_runs,
    read_sidecar,
    upstream,
)

sys.path.insert(0, str(Path(__file__).parent))
from wandb_offline import offline_runs  # noqa: E402


def saved_graphset(path: Path, n_graphs: int = 2, per_graph: int = 1, nodes: int = 20) -> Path:
    """A saved LoCoMo-like set of synthetic graphs, ``per_graph`` questions each (gold: one node)."""
    graphs, questions = {}, []
    for g in range(n_graphs):
        graph = make_synthetic_graph(nodes, avg_degree=3.0, dim=8, seed=g)
        graphs[f"conv-{g}"] = graph
        for i in range(per_graph):
            gold = (graph.node_ids[(3 * i + 1) % nodes],)
            questions.append(Question(f"conv-{g}#{i}", f"conv-{g}", f"q{i}", "a", gold, 1 + i % 4))
    emb = torch.nn.functional.normalize(torch.randn(len(questions), 8, generator=torch.Generator().manual_seed(0)))
    gs = GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic"), config_hash="ab" * 32)
    return gs.save(path)


# ---------------------------------------------------------------------------- secrets
def test_secret_names():
    for name in ("api_key", "WANDB_API_KEY", "hfToken", "access-token", "db_password", "client_secret", "apikey"):
        assert is_secret_name(name), name
    for name in ("max_tokens", "tokenizer", "keys_file", "monkey", "budget", "project"):
        assert not is_secret_name(name), name


def test_config_for_logging_drops_secrets_and_env_values(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-123456789")
    monkeypatch.setenv("SOME_PATH", "/opt/private/place")
    cfg = OmegaConf.create(
        {
            "budget": {"max_tokens": 2500, "tokenizer": "regex-word-v1"},
            "llm": {"api_key": "sk-abc", "model": "m", "base": "${oc.env:SOME_PATH}", "header": "Bearer tok-123456789"},
            "logger": {"project": "graphmem", "where": "/opt/private/place"},
            "list": [1, "${oc.env:SOME_PATH}", {"password": "x", "ok": True}],
        }
    )
    safe = config_for_logging(cfg)
    assert safe == {
        "budget": {"max_tokens": 2500, "tokenizer": "regex-word-v1"},
        "llm": {"model": "m"},
        "logger": {"project": "graphmem"},
        "list": [1, {"ok": True}],
    }
    assert config_for_logging({"nested": {"secret": 1, "n": 2}}) == {"nested": {"n": 2}}


# ---------------------------------------------------------------------------- backends
def test_backend_choice_and_config_errors(tmp_path, monkeypatch):
    assert type(make_tracker({"backend": "none"}, {}, tmp_path)) is Tracker
    assert isinstance(make_tracker({"backend": "wandb", "mode": "disabled"}, {}, tmp_path), JsonlTracker)
    assert isinstance(make_tracker(LoggerConfig(backend="jsonl"), {}, tmp_path), JsonlTracker)
    monkeypatch.setitem(sys.modules, "wandb", None)  # wandb absent, as on the GPU machine
    with pytest.warns(UserWarning, match="not installed"):
        assert isinstance(make_tracker({"backend": "wandb", "mode": "offline"}, {}, tmp_path / "b"), JsonlTracker)
    with pytest.raises(ValueError, match="backend 'tensorboard' is unknown"):
        make_tracker({"backend": "tensorboard"}, {}, tmp_path)
    with pytest.raises(ValueError, match=r"unknown keys \['projct'\]"):
        make_tracker({"backend": "jsonl", "projct": "x"}, {}, tmp_path)
    with pytest.raises(ValueError, match="job_type 'eval' is unknown"):
        make_tracker({"backend": "jsonl"}, {}, tmp_path, job_type="eval")


def test_jsonl_run_keeps_config_curves_summary_tables(tmp_path):
    logger = {"backend": "jsonl", "group": None, "tags": ["t"]}
    cfg = {"trainer": {"epochs": 3}, "llm": {"api_key": "sk-never"}}
    with make_tracker(logger, cfg, tmp_path, name="fold0-router", job_type="train", group="exp-1") as t:
        t.define_metric("epoch")
        t.define_metric("train/*", step_metric="epoch")
        t.define_metric("val/*", step_metric="epoch", summary="max")
        for epoch, recall in enumerate([0.2, 0.5, 0.4]):
            t.log({"epoch": epoch, "train/return": -1.0 + epoch, "val/recall": recall})
        t.update_summary({"test/evidence_recall": 0.45})
        t.log_table("questions/router", ["qid", "recall"], [["q1", 1.0], ["q2", 0.0]])
    (run,) = read_runs(tmp_path / "tracking")
    assert (run.name, run.group, run.job_type, run.state) == ("fold0-router", "exp-1", "train", "finished")
    assert run.config == {"trainer": {"epochs": 3}, "llm": {}}
    assert run.curve("val/recall") == [(0, 0.2), (1, 0.5), (2, 0.4)]
    assert run.summary["val/recall"] == {"max": 0.5} and run.summary["test/evidence_recall"] == 0.45
    assert run.tables["questions/router"]["rows"] == [["q1", 1.0], ["q2", 0.0]]
    assert {"name": "train/*", "step_metric": "epoch", "summary": None} in run.metrics


def test_failed_run_is_marked_and_steps_never_go_back(tmp_path):
    with pytest.raises(RuntimeError):
        with make_tracker({"backend": "jsonl"}, {}, tmp_path, name="r") as t:
            t.log({"x": 1}, step=5)
            with pytest.raises(ValueError, match="step 3 is below the current step 5"):
                t.log({"x": 2}, step=3)
            t.log({"x": 3})  # next step: 6
            raise RuntimeError("job died")
    (run,) = read_runs(tmp_path)
    assert run.state == "failed" and [r["_step"] for r in run.history] == [5, 6]


def test_wandb_offline_run_records_everything_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    gs = graphset_artifact(saved_graphset(tmp_path / "set"))
    ckpt = tmp_path / "ckpt" / "best.pt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"weights")
    cfg = {"budget": {"max_tokens": 2500}, "llm": {"api_key": "sk-never-logged"}}
    t = make_tracker({"backend": "wandb", "mode": "offline"}, cfg, tmp_path, name="t", job_type="train", group="g")
    t.define_metric("epoch")
    t.define_metric("val/*", step_metric="epoch", summary="max")
    for epoch in range(3):
        t.log({"epoch": epoch, "val/recall": 0.1 * epoch})
    t.use_artifact(gs)
    t.log_artifact(ckpt, "model", name="router-x", aliases=["best"])
    t.update_summary({"test/evidence_recall": 0.25})
    t.finish()
    runs = list((tmp_path / "wandb").glob("offline-run-*/*.wandb"))
    assert len(runs) == 1
    for _ in range(100):  # the wandb service may still be flushing the transaction log
        if b"test/evidence_recall" in runs[0].read_bytes():
            break
        time.sleep(0.1)
    blob = runs[0].read_bytes()
    assert b"max_tokens" in blob and b"sk-never-logged" not in blob and b"api_key" not in blob
    (run,) = offline_runs(tmp_path / "wandb")
    assert (run["run"]["group"], run["run"]["job_type"], run["run"]["name"]) == ("g", "train", "t")
    assert [row["epoch"] for row in run["history"]] == [0, 1, 2]
    assert (
        run["summary"]["val/recall"] == {"max": pytest.approx(0.2)} and run["summary"]["test/evidence_recall"] == 0.25
    )
    assert run["run"]["config"]["inputs"] == [{"name": gs.name, "type": "dataset", "digest": gs.digest}]
    (art,) = run["artifacts"]
    assert (
        art["name"] == "router-x"
        and "best" in art["aliases"]
        and art["metadata"]["sha256"] == read_sidecar(ckpt)["digest"]
    )


# ---------------------------------------------------------------------------- artifacts and lineage
def test_graphset_artifact_name_and_digest(tmp_path):
    directory = saved_graphset(tmp_path / "set")
    ref = graphset_artifact(directory)
    assert ref.name == "locomo-" + "ab" * 6 and ref.type == "dataset" and ref.metadata["config_hash"] == "ab" * 32
    manifest = json.loads((directory / "manifest.json").read_text())
    assert set(ref.files) == {"manifest.json", *manifest["files"]}  # every file the set lists
    assert {manifest["queries"], *(g["file"] for g in manifest["graphs"].values())} <= set(ref.files)
    (directory / "neighbourhood.png").write_bytes(b"a plot beside the set")
    assert graphset_artifact(directory).digest == ref.digest  # not part of the set
    graph = directory / manifest["graphs"]["conv-1"]["file"]
    graph.write_bytes(graph.read_bytes() + b"\0")
    assert graphset_artifact(directory).digest != ref.digest
    (directory / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="manifest.json: not a graph-set manifest"):
        graphset_artifact(directory)


def test_checkpoint_keeps_its_producers_name(tmp_path):
    ckpt = tmp_path / "fold0" / "router" / "best.pt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"w1")
    assert checkpoint_artifact(ckpt).name == "model-router-best"  # nobody logged it
    with make_tracker({"backend": "jsonl"}, {}, tmp_path, name="train") as t:
        logged = t.log_artifact(ckpt, "model", name="router-locomo-fold0-router", aliases=["best"])
    again = checkpoint_artifact(ckpt)
    assert again.key == logged.key == ("router-locomo-fold0-router", logged.digest)
    (tmp_path / "fold0" / "router" / "best.pt.artifact.json").write_text("[1]")
    with pytest.raises(ValueError, match="best.pt.artifact.json: unreadable artifact sidecar"):
        checkpoint_artifact(ckpt)


def test_result_artifacts_are_named_per_run(tmp_path):
    (tmp_path / "results.json").write_text("{}")
    names = set()
    for _ in range(2):
        with make_tracker({"backend": "jsonl"}, {}, tmp_path, name="evaluate") as t:
            names.add(t.log_artifact(tmp_path / "results.json", "results").name)
            assert t.outputs[0].name == f"run-{t.id}-results"
    assert len(names) == 2


def test_lineage_links_results_to_checkpoint_to_graph_set(tmp_path):
    directory = saved_graphset(tmp_path / "set")
    root = tmp_path / "runs"
    with make_tracker({"backend": "jsonl"}, {}, root, name="build", job_type="build") as t:
        built = t.log_artifact(graphset_artifact(directory))
    ckpt = tmp_path / "best.pt"
    ckpt.write_bytes(b"weights")
    with make_tracker({"backend": "jsonl"}, {}, root, name="train", job_type="train") as t:
        t.use_artifact(graphset_artifact(directory))
        model = t.log_artifact(ckpt, "model", name="router-locomo", aliases=["best"])
    (tmp_path / "results.json").write_text("{}")
    with make_tracker({"backend": "jsonl"}, {}, root, name="evaluate", job_type="evaluate") as t:
        t.use_artifact(checkpoint_artifact(ckpt))
        results = t.log_artifact(tmp_path / "results.json", "results")
    runs = read_runs(root)
    edges = {(e.producer.name, e.artifact.name, e.consumer.name) for e in lineage(runs)}
    assert edges == {("build", built.name, "train"), ("train", "router-locomo", "evaluate")}
    assert [a.key for a in upstream(runs, results)] == [model.key, built.key]
    ckpt.write_bytes(b"retrained elsewhere")  # same name, other digest: no longer the trained one
    with make_tracker({"backend": "jsonl"}, {}, root, name="evaluate2", job_type="evaluate") as t:
        t.use_artifact(checkpoint_artifact(ckpt))
    assert not [e for e in lineage(read_runs(root)) if e.consumer.name == "evaluate2"]


def test_describe_artifact_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        describe_artifact(tmp_path / "missing.pt", "model")
    (tmp_path / "d").mkdir()
    with pytest.raises(FileNotFoundError, match=r"artifact files missing: \['x.bin'\]"):
        describe_artifact(tmp_path / "d", "dataset", files=["x.bin"])
    assert os.path.isabs(describe_artifact(tmp_path / "d", "dataset").path)
    assert json.loads(json.dumps(describe_artifact(tmp_path / "d", "dataset").to_json()))["files"] == []


def test_checkpoints_are_versions_of_one_model_artifact(tmp_path):
    ckpt = tmp_path / "fold0" / "router"
    ckpt.mkdir(parents=True)
    (ckpt / "best.pt").write_bytes(b"epoch 3")
    (ckpt / "last.pt").write_bytes(b"epoch 9")
    with make_tracker({"backend": "jsonl"}, {}, tmp_path, name="train", job_type="train") as t:
        best, last = log_checkpoints(t, ckpt, "router-locomo-fold0-router", {"fold": 0})
    assert (best.name, best.aliases, last.name, last.aliases) == (
        "router-locomo-fold0-router",
        ("best",),
        "router-locomo-fold0-router",
        ("latest",),
    )
    (run,) = read_runs(tmp_path / "tracking")
    assert [o.key for o in run.outputs] == [best.key, last.key] and best.digest != last.digest
    assert checkpoint_artifact(ckpt / "last.pt").key == last.key  # read back under the same name
    assert experiment_group("train", "locomo").startswith("train-locomo-")
