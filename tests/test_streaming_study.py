"""scripts/studies/streaming: one fold of three short conversations, the online walk's setting chosen on the
validation conversation, one run on the test conversation, pooled figures and the page (a smoke test)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from graphmem.store.checkpoint import save_checkpoint
from models.walk_scorer import ScorerConfig, WalkScorer
from tests.script_loader import compose

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_study  # noqa: E402
from small_sets import short_locomo_set  # noqa: E402


def test_the_study_tunes_on_validation_runs_on_test_and_renders_its_page(tmp_path):
    gs = short_locomo_set(tmp_path, sessions=2, questions=8, conversations=3)
    save_checkpoint(
        tmp_path / "walk0.pt", "walk", {"scorer": WalkScorer(ScorerConfig(dim=384)).checkpoint(), "finished": True}, {}
    )
    results = tmp_path / "results"
    cfg = compose(
        "streaming",
        [
            f"graphset={gs}",
            "cv.k=3",
            "cv.folds=[0]",
            f"checkpoint='{tmp_path}/walk{{fold}}.pt'",
            "gnn_checkpoint=null",
            "policies=[hybrid,beta_bfs,router]",
            "tune.grid=[{counter_pool: target, counter_weight: 1.0}, {counter_weight: 2.0}]",
            "runs=[{name: answer, ask_at: evidence, feedback: answer, variants: {walk_edges: {parts: [edges]}}}]",
            "streaming.online.rollouts=2",
            f"out={results}/streaming_locomo.json",
            f"plot={tmp_path}/position.png",
            "n_boot=100",
        ],
    )
    payload = load_study("streaming", "run").run(cfg)
    (fold,) = payload["folds"]
    assert len(fold["tuning"]) == 2 and sum(bool(t.get("kept")) for t in fold["tuning"]) == 1
    assert set(fold["val"]).isdisjoint(fold["test"])  # chosen on validation conversations, never the test ones
    run = payload["runs"]["answer"]
    assert run["pairs"] == {"beta_bfs": "beta_bfs_frozen", "router": "router_frozen", "walk_edges": "router_frozen"}
    groups = {(c["policy"], c["group"]) for c in run["paired"]}
    assert {("router", "second_half"), ("walk_edges", "second_half"), ("beta_bfs", "overall")} <= groups
    assert run["learning"]["router"]["steps"] > 0 and run["moved"]["walk_edges"]["questions"] > 0
    assert json.loads((results / "streaming_locomo.json").read_text())["runs"].keys() == {"answer"}
    page = load_study("streaming", "page").render(results)
    assert "## Test-time learning from the answer alone" in page and "| walk_edges | router_frozen |" in page
