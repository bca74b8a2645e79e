"""Mean vs UCB vs Thompson Beta BFS on one feedback stream (head_to_head's exploration.py, run.py exploration.*)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget
from graphmem.datasets.types import LoadReport, Question
from graphmem.eval.harness import evaluate_policy
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.store.graphset import GraphSet
from tests.script_loader import compose

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_study  # noqa: E402

page = load_study("head_to_head", "page_exploration")
exploration, feedback = load_study("head_to_head", "exploration"), load_study("head_to_head", "feedback")
compare_rankings, make_learners, round_bounds = (
    exploration.compare_rankings,
    exploration.make_learners,
    exploration.round_bounds,
)
learn_evidence = feedback.learn_evidence


def synthetic(n_graphs: int = 2, per_graph: int = 12):
    graphs = {f"conv-{g}": make_synthetic_graph(30, avg_degree=4.0, dim=16, seed=g) for g in range(n_graphs)}
    questions = [
        Question(f"{n}#{i}", n, f"q{i}", "a", (g.node_ids[(7 * i) % 30], g.node_ids[(11 * i + 3) % 30]), 1)
        for n, g in graphs.items()
        for i in range(per_graph)
    ]
    emb = torch.nn.functional.normalize(torch.randn(len(questions), 16, generator=torch.Generator().manual_seed(0)), 1)
    return graphs, questions, emb


def test_rounds_share_one_stream_and_the_mean_learner_is_plain_evidence_learning():
    graphs, questions, emb = synthetic()
    order = list(range(len(questions)))
    random.Random(0).shuffle(order)
    stream_idx, held_idx = order[:16], order[16:]
    stream = ([questions[i] for i in stream_idx], emb[stream_idx])
    heldout = ([questions[i] for i in held_idx], emb[held_idx])
    budget = Budget()
    before = {n: (g.S.clone(), g.F.clone()) for n, g in graphs.items()}
    out = compare_rankings(graphs, stream, heldout, budget, "locomo", ["mean", "ucb", "thompson"], 3, [0, 1], [1.0])
    assert list(out["learners"]) == ["mean", "ucb", "thompson_s0", "thompson_s1", "thompson"]
    assert out["round_sizes"] == [5, 6, 5] and sum(out["round_sizes"]) == out["stream_questions"] == 16
    for name, lr in out["learners"].items():
        assert [p["round"] for p in lr["served"]] == [1, 2, 3] and [p["round"] for p in lr["heldout"]] == [0, 1, 2, 3]
        assert lr["heldout"][0]["recall"] == out["learners"]["mean"]["heldout"][0]["recall"]  # all counters at zero
        assert sum(p["n"] for p in lr["served"]) == lr["served_all"]["n"] == 16
    # the mean learner is one pass of learn_evidence over the stream, evaluated with the posterior mean
    copies = {n: g.copy() for n, g in graphs.items()}
    for g in copies.values():
        g.S.zero_(), g.F.zero_(), g.invalidate()
    learn_evidence(copies, *stream, BetaBFS(), budget)
    view = GraphSet("locomo", copies, heldout[0], heldout[1], LoadReport("synthetic"))
    final = evaluate_policy(BetaBFS(), view, budget, progress=False).overall["evidence_recall"]
    assert out["learners"]["mean"]["heldout"][-1]["recall"] == pytest.approx(final)
    assert all(torch.equal(g.S, before[n][0]) and torch.equal(g.F, before[n][1]) for n, g in graphs.items())
    # paired against mean on the same questions: the difference of the two means, n the served questions
    for c in out["paired"]["served"]:
        lr, ref = out["learners"][c["policy"]], out["learners"]["mean"]
        mine, theirs = (lr["served_all"], ref["served_all"]) if c["round"] == "all" else (
            lr["served"][c["round"] - 1], ref["served"][c["round"] - 1])  # fmt: skip
        assert c["reference"] == "mean" and c["n"] == mine["n"]
        assert c["mean_diff"] == pytest.approx(mine["recall"] - theirs["recall"])
    assert {c["round"] for c in out["paired"]["heldout"]} == {1, 2, 3}
    th = out["learners"]
    assert th["thompson_s0"]["served_differ_from_mean"] > 0  # the draws change what is served
    s0, s1 = th["thompson_s0"]["served_all"]["recall"], th["thompson_s1"]["served_all"]["recall"]
    assert th["thompson"]["served_all"]["recall"] == pytest.approx((s0 + s1) / 2)


def test_learner_settings_are_checked():
    assert [x.name for x in make_learners(["mean", "ucb"], [0], [1.0, 3.0])] == ["mean", "ucb_c1", "ucb_c3"]
    with pytest.raises(ValueError, match="must include 'mean'"):
        make_learners(["ucb", "thompson"], [0])
    with pytest.raises(ValueError, match="thompson_seeds is empty"):
        make_learners(["mean", "thompson"], [])
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        round_bounds(10, 0)


def test_head_to_head_exploration_runs_on_a_tiny_set_and_renders_its_page(tmp_path):
    graphs, questions, emb = synthetic(per_graph=10)
    gs_dir = GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic")).save(tmp_path / "set")
    script = load_study("head_to_head", "run")  # imports rl.walk, whose schema types the trainer group
    overrides = [f"graphset={gs_dir}", f"out_dir={tmp_path / 'out'}", "protocols=[]", "logger=none", "progress=false"]
    overrides += [
        "exploration.rankings=[mean,ucb,thompson]",
        "exploration.rounds=2",
        "exploration.thompson_seeds=[0,1]",
    ]
    cfg = compose("head_to_head", overrides)
    payload = script.run(cfg)["exploration"]
    assert payload["protocol"] == "within" and payload["stream_questions"] == sum(payload["round_sizes"])
    assert payload["command"].startswith("python scripts/studies/head_to_head/run.py")
    assert (tmp_path / "out" / "exploration_rounds.png").read_bytes()[:4] == b"\x89PNG"
    results = tmp_path / "docs" / "results"
    results.mkdir(parents=True)
    (results / "exploration.json").write_bytes((tmp_path / "out" / "exploration.json").read_bytes())
    text = page.render(results)
    assert "| ucb − mean | all |" in text and "| thompson − mean | 2 |" in text and "exploration_rounds.png" not in text
