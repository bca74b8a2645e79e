"""The streaming protocol (graphmem.streaming) and the walk's test-time learning (rl.walk.online): the memory
grown from a set's records is the set's graph, questions are asked when their evidence has arrived, each row is
written before its feedback reaches a learner, and no gold evidence reaches anything under answer feedback."""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import pytest
import torch

from graphmem import Memory, streaming
from graphmem.builders.incremental import graph_records
from graphmem.core import Budget
from graphmem.datasets.types import Question
from graphmem.index.embed import HashingEncoder
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.policies.hybrid import HybridPolicy
from graphmem.policies.router import RouterPolicy
from graphmem.store.checkpoint import save_checkpoint
from graphmem.store.graphset import GraphSet
from graphmem.streaming import BetaCounters, StreamConfig, StreamPolicy, ask_schedule, run_streaming
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.online import OnlineConfig, OnlineWalk, stream_policies

sys.path.insert(0, str(Path(__file__).parent))
from small_sets import short_locomo_set  # noqa: E402
from test_memory import assert_same_graph  # noqa: E402

BUDGET = Budget()


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> GraphSet:
    return GraphSet.load(short_locomo_set(tmp_path_factory.mktemp("stream")))


def settings(gs: GraphSet) -> dict:
    return {k: v for k, v in gs.provenance["graph"].items() if k not in ("encoder", "incremental", "cache_dir")}


def router(seed: int = 0) -> RouterPolicy:
    torch.manual_seed(seed)
    return RouterPolicy(scorer=WalkScorer(ScorerConfig(dim=384)), device="cpu", entry_selector="hybrid")


def run(gs, policies, tmp_path=None, **config):
    folder = {"memory_dir": str(tmp_path)} if tmp_path is not None else {}
    return run_streaming(
        gs, policies, BUDGET, StreamConfig(**config, **folder), encoder=HashingEncoder(384), graph_config=settings(gs)
    )


def test_a_sets_records_grow_a_memory_equal_to_its_incremental_graph(short, tmp_path):
    ((name, graph),) = short.graphs.items()
    with Memory.open(tmp_path / name, encoder="hashing", graph=settings(short)) as mem:
        mem.add_many(graph_records(graph), embeddings=graph.embeddings)
        assert_same_graph(graph, mem.graph)


def test_each_question_is_asked_right_after_its_last_evidence_record():
    q = lambda i, ev: Question(f"g#{i}", "g", f"q{i}", "a", tuple(ev), 1)  # noqa: E731
    a, b, c = q(0, ["r2", "r0"]), q(1, []), q(2, ["r1", "gone"])
    assert ask_schedule(["r0", "r1", "r2", "r3"], [a, b, c], "evidence") == [(2, c), (3, a), (4, b)]
    assert ask_schedule(["r0", "r1", "r2", "r3"], [a, b, c], "end") == [(4, a), (4, b), (4, c)]


def test_a_stream_asks_in_place_and_reports_the_second_half(short):
    hybrid = HybridPolicy()
    got = run(short, [StreamPolicy("hybrid", hybrid)], ask_at="evidence").results[0]
    rows = got.rows
    assert [r["ask_order"] for r in rows] == list(range(len(short.questions)))
    assert all(r["ask_records"] <= r["stream_records"] for r in rows)
    assert rows[-1]["question"] == "Who?" and rows[-1]["metrics"]["evidence_recall"] is None  # asked at the end
    asked = [r for r in rows if r["metrics"]["evidence_recall"] is not None]
    graph = next(iter(short.graphs.values()))
    last = lambda r: max(graph.index_of(e) for e in r["gold_evidence"] if graph.has_node(e)) + 1  # noqa: E731
    assert all(r["ask_records"] == last(r) for r in asked)  # the memory held the evidence, and no more
    assert sum(r["second_half"] for r in rows) == len(rows) // 2 and "second_half" in got.summary


class Counting(BetaCounters):
    """Beta BFS's learner, counting the feedback it received."""

    def __init__(self, policy):
        super().__init__(policy)
        self.fed = 0

    def learn(self, memory, query, retrieval, feedback):
        self.fed += 1
        return super().learn(memory, query, retrieval, feedback)


def swapped_ask(self, p, mem, q, query, place):
    """The protocol's step with the feedback applied before the row is made: what must never happen."""
    r = mem.retrieve(q.text, embedding=query.embedding, budget=self.budget, policy=p.current(mem))
    fb = streaming.make_feedback(self.config.feedback, q, mem.graph, r.loaded, self.judge)
    if fb is not None:
        p.learner.learn(mem, query, r, fb)
    trace = streaming._trace(r)
    row, _ = streaming.question_row(q, mem.graph, list(r.ranked), list(r.loaded), trace, 0.0)
    self.on_row(p.name, {**row, **place})


def test_a_row_is_written_before_its_feedback_reaches_the_learner(short, monkeypatch):
    def check(learner):
        seen = []

        def on_row(name, row):  # every earlier question's feedback has arrived, this one's has not
            assert learner.fed == len(seen), f"{learner.fed} feedbacks before row {len(seen)}"
            seen.append(row["qid"])

        policy = BetaBFS()
        cfg = StreamConfig(ask_at="evidence", feedback="evidence")
        env = dict(encoder=HashingEncoder(384), graph_config=settings(short), on_row=on_row)
        run_streaming(short, [StreamPolicy("beta_bfs", policy, learner)], BUDGET, cfg, **env)
        return seen

    assert len(check(Counting(BetaBFS()))) == len(short.questions)
    monkeypatch.setattr(streaming._Stream, "ask", swapped_ask)
    with pytest.raises(AssertionError, match="1 feedbacks before row 0"):
        check(Counting(BetaBFS()))


def scrambled(gs: GraphSet) -> GraphSet:
    """The same set with every question's evidence replaced by other records."""
    rng, ids = random.Random(0), next(iter(gs.graphs.values())).node_ids
    qs = [dataclasses.replace(q, evidence=tuple(rng.sample(ids, 2))) for q in gs.questions]
    return GraphSet(gs.dataset, gs.graphs, qs, gs.query_embeddings, gs.report, provenance=gs.provenance)


def learned_state(gs, tmp_path, feedback):
    """The served lists, the online walk's weights and Beta BFS's counters after one stream."""
    online = OnlineWalk(router(), OnlineConfig(rollouts=3, temperature=1.0, router_lr=0.05, edge_lr=5.0), BUDGET)
    policies = [StreamPolicy("beta_bfs", BetaBFS(), BetaCounters(BetaBFS())), StreamPolicy("router", router(), online)]
    got = run(gs, policies, tmp_path, ask_at="end", feedback=feedback)
    served = {r.policy: [row["ranked"] for row in r.rows] for r in got.results}
    (name,) = gs.graphs
    with Memory.open(tmp_path / "beta_bfs" / name, encoder=HashingEncoder(384), readonly=True) as mem:
        counters = (mem.graph.S.clone(), mem.graph.F.clone())
    weights = {k: v.clone() for k, v in online.scorer.state_dict().items()}
    return served, counters, weights, got.learning


def test_no_gold_evidence_reaches_a_learner_under_answer_feedback(short, tmp_path):
    served, counters, weights, learning = learned_state(short, tmp_path / "true", "answer")
    assert learning["router"]["pg_steps"] > 0 and learning["beta_bfs"]["edges_updated"] > 0  # it did learn
    assert weights["edges.residual.delta"].abs().sum() > 0
    served2, counters2, weights2, _ = learned_state(scrambled(short), tmp_path / "scrambled", "answer")
    assert served2 == served
    assert all(torch.equal(a, b) for a, b in zip(counters, counters2))
    assert weights2.keys() == weights.keys() and all(torch.equal(weights[k], weights2[k]) for k in weights)
    # the check has teeth: under the oracle's feedback the evidence does reach the counters
    _, oracle, _, _ = learned_state(short, tmp_path / "oracle", "evidence")
    _, oracle2, _, _ = learned_state(scrambled(short), tmp_path / "oracle2", "evidence")
    assert not torch.equal(oracle[0], oracle2[0])


def test_each_learner_runs_online_and_frozen_with_its_pairs(short, tmp_path):
    ckpt = tmp_path / "walk.pt"
    save_checkpoint(ckpt, "walk", {"scorer": WalkScorer(ScorerConfig(dim=384)).checkpoint(), "finished": True}, {})
    policies = {"beta_bfs": BetaBFS(), "router": RouterPolicy(ckpt, device="cpu"), "hybrid": HybridPolicy()}
    stream, pairs = stream_policies(policies, "answer", OnlineConfig(), BUDGET, {"walk_edges": {"parts": ["edges"]}})
    assert [p.name for p in stream] == [
        "beta_bfs",
        "beta_bfs_frozen",
        "router",
        "router_frozen",
        "hybrid",
        "walk_edges",
    ]
    assert pairs == {"beta_bfs": "beta_bfs_frozen", "router": "router_frozen", "walk_edges": "router_frozen"}
    assert stream_policies(policies, "none", OnlineConfig(), BUDGET)[1] == {}
    with pytest.raises(ValueError, match="online variants need feedback"):
        stream_policies(policies, "none", OnlineConfig(), BUDGET, {"walk_edges": {"parts": ["edges"]}})


def test_evaluate_streaming_writes_rows_pairs_costs_and_the_position_plot(short, tmp_path):
    from hydra import compose, initialize_config_dir
    from script_loader import load_script

    import graphmem.config.schemas as schemas

    schemas.register_schemas()
    ckpt = tmp_path / "walk.pt"
    save_checkpoint(ckpt, "walk", {"scorer": WalkScorer(ScorerConfig(dim=384)).checkpoint(), "finished": True}, {})
    overrides = [
        f"graphset={short.provenance['path']}",
        f"out_dir={tmp_path / 'out'}",
        "protocol=streaming",
        "streaming.feedback=answer",
        "+streaming.variants={walk_edges: {parts: [edges]}}",
        "policies=[hybrid,beta_bfs,router]",
        "policy=router",
        f"policy.checkpoint={ckpt}",
        "policy.device=cpu",
        "logger.mode=disabled",
        "progress=false",
        "stats.n_boot=200",
    ]
    with initialize_config_dir(config_dir=str(schemas.CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=overrides)
    payload = load_script("evaluate").evaluate(cfg)
    names = {"hybrid", "beta_bfs", "beta_bfs_frozen", "router", "router_frozen", "walk_edges"}
    assert set(payload["policies"]) == names
    pairs = {(c["policy"], c["reference"], c["group"]) for c in payload["paired"] if c["metric"] == "evidence_recall"}
    for online, frozen in payload["streaming"]["pairs"].items():
        assert {(online, frozen, "overall"), (online, frozen, "second_half"), (online, "hybrid", "overall")} <= pairs
    learning = payload["streaming"]["learning"]
    assert learning["router"]["steps"] > 0 and learning["router"]["steps_per_s"] > 0
    assert {m["policy"] for m in payload["streaming"]["memory"]} == names
    out = tmp_path / "out"
    assert (out / "recall_vs_position.png").is_file() and (out / "questions_router_frozen.jsonl").is_file()


def test_the_walk_reads_the_counters_as_a_pair_or_a_target_term():
    from graphmem.builders.synthetic import make_synthetic_graph
    from graphmem.core import Query
    from graphmem.policies.router import counter_bias
    from models.edge_encoder import pair_table

    g = make_synthetic_graph(12, avg_degree=3.0, dim=384, seed=0)
    q = Query("q", "x", g.embeddings[3])
    plain = [r.ranked for r in router().retrieve_batch(g, [q], BUDGET)]
    reading = RouterPolicy(scorer=router().scorer, device="cpu", entry_selector="hybrid", counter_weight=2.0)
    assert [r.ranked for r in reading.retrieve_batch(g, [q], BUDGET)] == plain  # S = F = 0: no term
    pairs = pair_table(g)
    e = int((pairs.edge_pair >= 0).nonzero()[0])
    p, v = int(pairs.edge_pair[e]), int(g.edge_index[1, e])
    g.S[e], g.F[e] = 3.0, 1.0
    count = int((pairs.edge_pair == p).sum())
    s, f = 3.0 / count, 1.0 / count  # the pair's mean over its edges
    assert counter_bias(g, pairs, 2.0)[p] == pytest.approx(2.0 * ((s + 1) / (s + f + 2) - 0.5))
    assert counter_bias(g, pairs, 2.0, "target")[v] == pytest.approx(2.0 * ((s + 1) / (s + f + 2) - 0.5))
    assert counter_bias(g, pairs, 2.0, "target").count_nonzero() == 1


def test_a_realtalk_conversation_streams_into_its_incremental_graph(tmp_path):
    from graphmem.builders import DataConfig, GraphConfig, build_graphset

    cfg = GraphConfig(encoder="hashing", incremental=True, cache_dir=str(tmp_path / "cache"))
    gs = build_graphset(DataConfig(name="realtalk", limit=1), cfg, progress=False)
    ((name, graph),) = gs.graphs.items()
    records = graph_records(graph)
    assert [r.node_text for r in records] == graph.texts
    with Memory.open(tmp_path / name, encoder="hashing", graph=settings(gs)) as mem:
        mem.add_many(records, embeddings=graph.embeddings)
        assert_same_graph(graph, mem.graph)
