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
    assert set(run["arrival"]["router"]) == {"newest_evidence_hit", "earlier_evidence_recall"}
    assert json.loads((results / "streaming_locomo.json").read_text())["runs"].keys() == {"answer"}
    page = load_study("streaming", "page").render(results)
    assert "## Test-time learning from the answer alone" in page and "| walk_edges | router_frozen |" in page
    assert "## In short" in page and "last-arriving gold" in page


class Order:
    """A graph's node order: what :func:`arrival` reads."""

    def __init__(self, ids):
        self.ids = list(ids)

    def has_node(self, i):
        return i in self.ids

    def index_of(self, i):
        return self.ids.index(i)


def test_recall_splits_into_the_last_arriving_gold_record_and_the_earlier_ones():
    arrival = load_study("streaming", "run").arrival
    graph = Order(["a", "b", "c", "d"])
    row = lambda gold, ranked: {"gold_evidence": gold, "ranked": ranked, "metrics": {"evidence_recall": 0.5}}  # noqa: E731
    got = arrival(row(["c", "a", "x"], ["c", "d"]), graph)["metrics"]  # x is not in the graph: left out
    assert got == {"evidence_recall": 0.5, "newest_evidence_hit": 1.0, "earlier_evidence_recall": 0.0}
    got = arrival(row(["b"], ["a"]), graph)["metrics"]
    assert got["newest_evidence_hit"] == 0.0 and got["earlier_evidence_recall"] is None
    assert arrival(row(["x"], ["a"]), graph)["metrics"]["newest_evidence_hit"] is None
