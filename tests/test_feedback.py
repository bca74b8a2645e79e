"""Oracle evidence feedback: exact labels and eq. 21 updates on a hand-built graph; no gold in retrieval."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import LoadReport, Question
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.store.graphset import GraphSet
from graphmem.tracking import read_runs
from rl.common.splits import within_conversation_split

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import config_folder, load_study  # noqa: E402

feedback = load_study("head_to_head", "feedback")
OracleConfig, TransitionLabel, apply_labels = feedback.OracleConfig, feedback.TransitionLabel, feedback.apply_labels
learn_evidence, loaded_below, oracle_labels = feedback.learn_evidence, feedback.loaded_below, feedback.oracle_labels


class FixedEntries:
    """Entry selector returning row 0 for every query (keeps the traversal hand-computable)."""

    def select(self, graph, queries, budget):
        return [[0] for _ in queries]


def tree_graph(name: str = "g") -> MemoryGraph:
    """a -> b, a -> c, b -> d, c -> e (+ a parallel entity edge a -> b, and e -> a).

    With entry a and top-2 neighbors, Beta BFS loads a, b, c, d, e through a->b, a->c, b->d, c->e.
    """
    g = MemoryGraph.empty(3, info={"name": name})
    ids = ["a", "b", "c", "d", "e"]
    g.add_nodes(ids, [f"node {i}" for i in ids], torch.eye(5, 3))
    for s, d, r in [
        ("a", "b", "temporal"),
        ("a", "b", "entity"),
        ("a", "c", "semantic"),
        ("b", "d", "semantic"),
        ("c", "e", "temporal"),
        ("e", "a", "semantic"),
    ]:
        g.add_edge(s, d, r)
    return g


def retrieve(g: MemoryGraph):
    return BetaBFS(entry_selector=FixedEntries()).retrieve(g, Query("q", "?", torch.ones(3)), Budget(max_hops=2))


def pair(g: MemoryGraph, s: str, d: str) -> torch.Tensor:
    return g.edges_between(g.index_of(s), g.index_of(d))


def test_loaded_below_is_the_traversal_forest():
    g = tree_graph()
    r = retrieve(g)
    assert r.loaded_ids(g) == ["a", "b", "c", "d", "e"]
    below = {g.node_ids[v]: {g.node_ids[u] for u in s} for v, s in loaded_below(g, r).items()}
    assert below == {"b": {"b", "d"}, "c": {"c", "e"}, "d": {"d"}, "e": {"e"}}


def test_oracle_labels_and_counter_updates_exact():
    g = tree_graph()
    r = retrieve(g)
    labels = oracle_labels(g, r, {"d", "zz-not-a-node"}, OracleConfig(helpful_confidence=1.0, harmful_confidence=0.5))
    assert labels == [
        TransitionLabel("a", "b", "neutral", 0.0),  # b is not gold, but gold d is loaded below it
        TransitionLabel("a", "c", "harmful", 0.5),  # nothing gold among c, e
        TransitionLabel("b", "d", "helpful", 1.0),  # d is gold
        TransitionLabel("c", "e", "harmful", 0.5),
    ]
    assert apply_labels(g, labels) == 3
    S = {(s, d): g.S[pair(g, s, d)].tolist() for s, d in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "e"), ("e", "a")]}
    F = {(s, d): g.F[pair(g, s, d)].tolist() for s, d in [("a", "b"), ("a", "c"), ("b", "d"), ("c", "e"), ("e", "a")]}
    assert S == {("a", "b"): [0.0, 0.0], ("a", "c"): [0.0], ("b", "d"): [1.0], ("c", "e"): [0.0], ("e", "a"): [0.0]}
    assert F == {("a", "b"): [0.0, 0.0], ("a", "c"): [0.5], ("b", "d"): [0.0], ("c", "e"): [0.5], ("e", "a"): [0.0]}
    assert torch.allclose(g.posterior_mean[pair(g, "b", "d")], torch.tensor([2.0 / 3.0]))  # (1+1)/(1+0+2)


def test_gold_target_helpful_updates_every_parallel_edge():
    g = tree_graph()
    labels = oracle_labels(g, retrieve(g), {"b"})
    assert labels[0] == TransitionLabel("a", "b", "helpful", 1.0)
    apply_labels(g, labels)
    assert g.S[pair(g, "a", "b")].tolist() == [1.0, 1.0]


def test_neutral_and_zero_confidence_leave_counters_and_edges():
    g = tree_graph()
    before = (g.S.clone(), g.F.clone(), g.edge_index.clone())
    n = apply_labels(
        g,
        [
            TransitionLabel("a", "b", "neutral", 1.0),
            TransitionLabel("a", "c", "harmful", 0.0),
            TransitionLabel("b", "d", "helpful", 0.0),
        ],
    )
    assert n == 0
    zero = oracle_labels(g, retrieve(g), {"d"}, OracleConfig(0.0, 0.0))
    assert apply_labels(g, zero) == 0
    assert torch.equal(g.S, before[0]) and torch.equal(g.F, before[1]) and torch.equal(g.edge_index, before[2])
    # a transition without an edge is never created by observing it
    apply_labels(g, [TransitionLabel("d", "e", "helpful", 1.0)])
    assert g.num_edges == 6 and not pair(g, "d", "e").numel()


def test_confidence_out_of_range_is_refused():
    with pytest.raises(ValueError):
        OracleConfig(helpful_confidence=1.5)
    with pytest.raises(ValueError):
        OracleConfig(harmful_confidence=-0.1)


class RecordingPolicy(BetaBFS):
    """Beta BFS that records every argument it receives."""

    def __init__(self):
        super().__init__(entry_selector=FixedEntries())
        self.seen: list[tuple] = []

    def retrieve(self, graph, query, budget):
        self.seen.append((graph, query, budget))
        return super().retrieve(graph, query, budget)


def test_learn_evidence_touches_training_graphs_only_and_gold_never_reaches_retrieval():
    marker = "GOLD-7731"
    train_g, held_g = tree_graph("train"), tree_graph("held")
    held_before = (held_g.S.clone(), held_g.F.clone())
    questions = [
        Question("train#0", "train", "where?", f"answer {marker}", ("d",), 1),
        Question("train#1", "train", "what?", marker, (marker,), 1),  # no gold node: skipped
        Question("train#2", "train", "who?", marker, ("b", "e"), 1),
    ]
    policy = RecordingPolicy()
    stats = learn_evidence({"train": train_g, "held": held_g}, questions, torch.ones(3, 3), policy, Budget())
    assert stats.examples == 2 and stats.skipped == 1 and stats.graphs_touched == {"train"}
    assert stats.labels == {"helpful": 3, "harmful": 3, "neutral": 2}
    assert torch.equal(held_g.S, held_before[0]) and torch.equal(held_g.F, held_before[1])
    # first example: S(b->d) = 1, F(a->c) = F(c->e) = 1; the second (gold b, e) sees those counters,
    # still loads a..e, and adds S(a->b), S(c->e), F(b->d); a->c is neutral (gold e below c)
    assert train_g.S[pair(train_g, "b", "d")].tolist() == [1.0] and train_g.F[pair(train_g, "a", "c")].tolist() == [1.0]
    assert train_g.S[pair(train_g, "a", "b")].tolist() == [1.0, 1.0]
    assert train_g.S[pair(train_g, "c", "e")].tolist() == [1.0] and train_g.F[pair(train_g, "c", "e")].tolist() == [1.0]
    assert train_g.F[pair(train_g, "b", "d")].tolist() == [1.0] and train_g.S[pair(train_g, "a", "c")].tolist() == [0.0]
    # the policy saw queries only: no field carries gold
    assert len(policy.seen) == 3
    for _, query, _ in policy.seen:
        assert isinstance(query, Query) and set(vars(query)) == {"qid", "text", "embedding"}
        assert marker not in query.text and marker not in query.qid


def test_within_conversation_split_is_a_partition_per_graph():
    qids = [f"g{g}#{i}" for g in range(3) for i in range(10)]
    graphs = [q.split("#")[0] for q in qids]
    s = within_conversation_split(qids, graphs, test_fraction=0.2, val_fraction=0.2, seed=1)
    assert sorted(s.train + s.val + s.test) == sorted(qids)
    assert not set(s.train) & set(s.test) and not set(s.val) & set(s.test) and not set(s.train) & set(s.val)
    for g in ("g0", "g1", "g2"):
        assert sum(q.startswith(g + "#") for q in s.test) == 2 and sum(q.startswith(g + "#") for q in s.train) == 6
    assert s == within_conversation_split(qids, graphs, test_fraction=0.2, val_fraction=0.2, seed=1)


# ---------------------------------------------------------------------------- the head_to_head study's run.py
ROOT = Path(__file__).resolve().parents[1]


def test_head_to_head_smoke_on_synthetic_graphs(tmp_path):
    graphs, questions = {}, []
    for g in range(3):
        graph = make_synthetic_graph(30, avg_degree=4.0, dim=16, seed=g)
        graphs[f"conv-{g}"] = graph
        questions += [
            Question(f"conv-{g}#{i}", f"conv-{g}", f"q{i}", "a", (graph.node_ids[(7 * i) % 30],), 1) for i in range(10)
        ]
    emb = torch.nn.functional.normalize(
        torch.randn(len(questions), 16, generator=torch.Generator().manual_seed(0)), dim=1
    )
    gs_dir = GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic")).save(tmp_path / "set")
    script = load_study("head_to_head", "run")
    with initialize_config_dir(config_dir=str(config_folder("head_to_head")), version_base="1.3"):
        cfg = compose(
            config_name="head_to_head",
            overrides=[
                "experiment=beta_vs_router",
                f"graphset={gs_dir}",
                f"out_dir={tmp_path / 'out'}",
                "cv.k=3",
                "trainer.objective.imitation_epochs=1",
                "trainer.objective.rl_epochs=1",
                "trainer.optim.batch_size=8",
                "fractions=[0,0.5,1.0]",
                "progress=false",
            ],
        )
    payload = script.run(cfg)
    by = {r["protocol"]: r for r in payload["results"]}
    conv, within = by["conversation"], by["within"]
    # conversation split: learned counters stay on training graphs, so nothing transfers
    assert all(row["test_counter_mass"] == 0.0 for row in conv["curves"]["beta_bfs"])
    assert conv["table"]["beta_bfs_learned"]["evidence_recall"] == conv["table"]["beta_bfs_uniform"]["evidence_recall"]
    assert within["curves"]["beta_bfs"][-1]["test_counter_mass"] > 0 and within["evidence"]["examples"] > 0
    assert [c["examples"] for c in within["curves"]["router"]] == [0, 9, 18]
    assert [c["reference"] for c in within["paired"]] == ["beta_bfs_uniform", "beta_bfs_learned"]
    for c in within["paired"]:  # paired on every test question, router minus the Beta variant
        assert c["n"] == within["sizes"]["test"]
        assert c["mean_diff"] == pytest.approx(
            within["table"]["router"]["evidence_recall"] - within["table"][c["reference"]]["evidence_recall"]
        )
    assert float(GraphSet.load(gs_dir).graphs["conv-0"].S.sum()) == 0.0  # the saved set is untouched
    assert (tmp_path / "out" / "recall_vs_examples.png").read_bytes()[:4] == b"\x89PNG"
    assert "beta_bfs_learned" in (tmp_path / "out" / "results.md").read_text()
    runs = {r.name: r for r in read_runs(tmp_path / "out" / "tracking")}  # WANDB_MODE=disabled: the JSONL runs
    assert set(runs) == {"conversation-beta_bfs", "conversation-router", "within-beta_bfs", "within-router", "summary"}
    assert len({r.group for r in runs.values()}) == 1 and runs["within-router"].job_type == "train"
    assert [x for x, _ in runs["within-router"].curve("test/evidence_recall", "examples")] == [0, 9, 18]
    assert runs["summary"].outputs[0].type == "results" and "head_to_head" in runs["summary"].tables


# ---------------------------------------------------------------------- the LLM Reflector as a feedback source
def test_llm_reflector_labels_only_the_traversed_transitions(monkeypatch):
    import json

    import litellm

    LLMReflector, traversed_pairs = feedback.LLMReflector, feedback.traversed_pairs
    from graphmem.llm.client import LLMClient, LLMConfig

    g = tree_graph()
    r = retrieve(g)
    assert traversed_pairs(g, r) == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "e")]
    reply = {
        "critique": "c",
        "transitions": [
            {"source": "a", "target": "b", "label": "helpful", "confidence": 0.5},
            {"source": "e", "target": "a", "label": "helpful", "confidence": 1.0},  # not traversed
            {"source": "a", "target": "c", "label": "harmful", "confidence": 0.25},
            {"source": "a", "target": "b", "label": "harmful", "confidence": 1.0},  # repeat: first wins
        ],
    }
    sent = []
    real = litellm.completion

    def fake(**kwargs):
        sent.append(kwargs)
        return real(**{**kwargs, "mock_response": json.dumps(reply)})

    monkeypatch.setattr(litellm, "completion", fake)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=0))
    q = Question("q", "g", "What is d?", "GOLD-ANSWER-77", ("d",), 1)

    def reflect(graph):  # question q on graph, Beta BFS from row 0, its two hops labelled by the LLM reflector
        policy, budget = BetaBFS(entry_selector=FixedEntries()), Budget(max_hops=2)
        return learn_evidence({"g": graph}, [q], torch.ones(1, 3), policy, budget, reflector=LLMReflector(client))

    stats = reflect(g)
    assert stats.examples == 1 and stats.labels == {"helpful": 1, "harmful": 1, "neutral": 0}
    assert g.S[pair(g, "a", "b")].tolist() == [0.5, 0.5] and g.F[pair(g, "a", "c")].tolist() == [0.25]
    assert float(g.S[pair(g, "e", "a")].sum()) == 0.0 and stats.edges_updated == 3
    assert client.usage_report()["roles"]["reflector"]["discarded_items"] == 2
    prompt = sent[0]["messages"][1]["content"]
    assert "GOLD-ANSWER-77" in prompt and "- a -> b\n- a -> c\n- b -> d\n- c -> e" in prompt
    listed = sent[0]["response_format"]["json_schema"]["schema"]["properties"]["transitions"]["prefixItems"]
    assert [(p["properties"]["source"]["const"], p["properties"]["target"]["const"]) for p in listed] == [
        ("a", "b"),
        ("a", "c"),
        ("b", "d"),
        ("c", "e"),
    ]

    # a failed call is counted and changes nothing
    monkeypatch.setattr(
        litellm,
        "completion",
        lambda **kw: (_ for _ in ()).throw(
            litellm.APIConnectionError(message="down", llm_provider="openai", model="gpt-4o-mini")
        ),
    )
    h = tree_graph()
    stats = reflect(h)
    assert stats.failed_calls == 1 and stats.examples == 0 and float(h.S.sum() + h.F.sum()) == 0.0


def test_head_to_head_compares_feedback_sources_on_the_same_questions(tmp_path):
    graphs = {f"conv-{g}": make_synthetic_graph(30, avg_degree=4.0, dim=16, seed=g) for g in range(2)}
    questions = [
        Question(f"{n}#{i}", n, f"q{i}", "an answer", (g.node_ids[(7 * i) % 30],), 1)
        for n, g in graphs.items()
        for i in range(10)
    ]
    emb = torch.nn.functional.normalize(torch.randn(20, 16, generator=torch.Generator().manual_seed(0)), dim=1)
    gs_dir = GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic")).save(tmp_path / "set")
    with initialize_config_dir(config_dir=str(config_folder("head_to_head")), version_base="1.3"):
        cfg = compose(
            config_name="head_to_head",
            overrides=[
                f"graphset={gs_dir}",
                f"out_dir={tmp_path / 'out'}",
                "protocols=[]",
                "feedback.sources=[oracle,llm]",
                "feedback.n_questions=4",
                "llm=offline",
                "progress=false",
            ],
        )
    payload = load_study("head_to_head", "run").run(cfg)
    fb = payload["feedback_sources"]
    assert fb["graph"] == "conv-0" and fb["train_questions"] == 4 and set(fb["sources"]) == {"oracle", "llm"}
    oracle, llm = fb["sources"]["oracle"], fb["sources"]["llm"]
    assert oracle["recall_before"] == llm["recall_before"]  # same graph, same questions, counters at zero
    assert oracle["counter_updates"] > 0 and oracle["evidence"]["examples"] == 4
    # the offline mock replies with no transitions: a valid, empty reflection, so no update
    assert llm["counter_updates"] == 0 and llm["evidence"]["examples"] == 4 and llm["llm"]["local_substitute"]
    assert "| oracle |" in (tmp_path / "out" / "results.md").read_text()
