"""The worked example (``example_policy.py``, docs/policies.md, "Adding a policy"): a policy written in a test
file in under 40 lines runs in ``evaluate.py``, as a ``train.py`` baseline and in ``benchmark.py``.

The registry-driven tests cover it without being edited: ``test_policies.py`` (batched == its
reference oracle, budgets, determinism), ``test_graph_batch.py`` (graph batches), ``test_device.py``
(the ``meta`` device) and ``test_no_gold_leak.py`` take their policy names from the registry.
"""

import inspect
import json
import sys
from pathlib import Path

import torch
from example_policy import CosineBFS
from hydra import compose, initialize_config_dir

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.datasets.types import LoadReport, Question
from graphmem.policies import POLICIES
from graphmem.store.graphset import GraphSet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from policy_references import REFERENCES  # noqa: E402
from script_loader import load_script  # noqa: E402


def compose_cfg(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def saved_graphset(path: Path, graphs: int = 4) -> Path:
    """A small saved LoCoMo-style set: ``graphs`` synthetic conversations, 6 questions each."""
    gen = torch.Generator().manual_seed(0)
    out, questions = {}, []
    for g in range(graphs):
        graph = make_synthetic_graph(40, avg_degree=4.0, dim=16, seed=g)
        out[f"conv-{g}"] = graph
        for i in range(6):
            gold = (graph.node_ids[3 * i], graph.node_ids[3 * i + 1])
            questions.append(Question(f"conv-{g}#{i}", f"conv-{g}", f"q{i}", "a", gold, 1 + i % 4))
    emb = torch.nn.functional.normalize(torch.randn(len(questions), 16, generator=gen), dim=1)
    return GraphSet("locomo", out, questions, emb, LoadReport("synthetic")).save(path)


def test_the_example_is_an_algorithm_in_under_40_lines_registered_with_its_oracle():
    lines = inspect.getsource(CosineBFS).strip().splitlines()
    assert len(lines) < 40, len(lines)
    assert POLICIES["cosine_bfs"] is CosineBFS and "cosine_bfs" in REFERENCES
    assert {"retrieve", "retrieve_batch", "retrieve_graphs"}.isdisjoint(vars(CosineBFS))  # the base class's
    assert inspect.getsource(CosineBFS) in (ROOT / "docs" / "policies.md").read_text()  # the guide shows this code


def test_the_example_runs_in_evaluate(tmp_path):
    cfg = compose_cfg(
        "evaluate",
        [
            f"graphset={saved_graphset(tmp_path / 'set')}",
            f"out_dir={tmp_path / 'out'}",
            "policies=[beta_bfs,cosine_bfs]",
            "sweep_tokens=[250]",
            "logger=none",
            "progress=false",
        ],
    )
    payload = load_script("evaluate").evaluate(cfg)
    overall = payload["policies"]["cosine_bfs"]["summary"]["overall"]
    assert overall["n"] == 24 and overall["evidence_recall"] > 0 and overall["hops"] > 0
    assert "| cosine_bfs |" in (tmp_path / "out" / "results.md").read_text()


def test_the_example_is_a_train_baseline(tmp_path):
    cfg = compose_cfg(
        "train",
        [
            f"graphset={saved_graphset(tmp_path / 'set')}",
            f"out_dir={tmp_path / 'out'}",
            "cv.k=3",
            "cv.folds=[0]",
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=1",
            "trainer.run.device=cpu",
            "trainer.model.hidden=8",
            "baselines=[cosine_bfs]",
            "stats.reference=cosine_bfs",
            "logger=none",
            "progress=false",
        ],
    )
    payload = load_script("train").run(cfg)
    assert set(payload["summary"]) == {"router", "cosine_bfs"}
    assert {c["policy"] for c in payload["paired"]} == {"router"}  # paired against the example policy
    assert payload["summary"]["cosine_bfs"]["evidence_recall"]["folds"] == 1
    assert json.loads((tmp_path / "out" / "results.json").read_text())["summary"]["cosine_bfs"]


def test_the_example_runs_in_benchmark(tmp_path):
    tiny = [
        "sizes=[200]",
        "num_queries=4",
        "loop_queries=2",
        "dim=8",
        "avg_degree=4",
        "locomo.enabled=false",
        "datasets=[]",
        "train.enabled=false",
        "policies=[cosine_bfs]",
        "plot=false",
        f"out_dir={tmp_path}",
    ]
    report = load_script("benchmark").run(compose_cfg("benchmark", tiny))
    res = report["sizes"]["200"]["policies"]["cosine_bfs"]
    assert res["batched_qps"] > 0 and res["loop_qps"] > 0 and 0 < res["mean_loaded"] <= 12
