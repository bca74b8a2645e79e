"""The router policy with a walk scorer (graphmem/policies/router.py): what it loads is what the
trained walk (graphmem/policies/walk.py) loads, on one graph, over a graph batch, and from a trainer checkpoint."""

from __future__ import annotations

import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.datasets.types import Question
from graphmem.policies import make_policy
from graphmem.policies.walk import walk
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.data import walk_data
from tests.test_walk_trainer import BUDGET, bridge_set, config, trainer

WIDE = Budget(max_entries=3, top_k_neighbors=2, max_hops=2, max_nodes=8, max_tokens=2500)


def perturbed_scorer(dim: int, seed: int = 0, **cfg) -> WalkScorer:
    """A scorer whose zero-initialised layers are randomised, so it walks unlike cosine."""
    scorer = WalkScorer(ScorerConfig(dim=dim, **cfg))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in scorer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return scorer


def queries_of(graph, n: int, seed: int) -> list[Query]:
    gen = torch.Generator().manual_seed(seed)
    return [Query(f"q{i}", "", torch.randn(graph.dim, generator=gen)) for i in range(n)]


def test_policy_loads_what_the_walk_loads():
    graph = make_synthetic_graph(num_nodes=60, seed=3, dim=16)
    scorer = perturbed_scorer(16, rank=4)
    queries = queries_of(graph, 5, seed=1)
    policy = make_policy("router", scorer=scorer, device="cpu")
    got = policy.retrieve_batch(graph, queries, WIDE)
    graph.info["name"] = "g"
    qs = [Question(q.qid, "g", "", None, (graph.node_ids[0],), 1) for q in queries]
    d = walk_data({"g": graph}, qs, torch.stack([q.embedding for q in queries]), WIDE)
    ep = walk(d.tables, scorer, d.q, d.entries, WIDE, lexical=d.lexical)
    for r, row, ent in zip(got, ep.loaded.tolist(), d.entries.tolist()):
        assert r.loaded == [v for v in row if v >= 0]
        assert r.entries == [v for v in ent if v >= 0]
        assert len(r.loaded) <= WIDE.max_nodes and r.max_depth <= WIDE.max_hops
        for e in r.edges_traversed:  # each edge loaded its target from a node loaded before it
            src, dst = int(graph.edge_index[0, e]), int(graph.edge_index[1, e])
            assert r.loaded.index(src) < r.loaded.index(dst)
    assert any(r.max_depth == 2 for r in got)  # it walks past hop 1 under this budget


def test_policy_over_a_graph_batch_equals_one_graph_at_a_time():
    graphs = [make_synthetic_graph(num_nodes=n, seed=s, dim=16) for n, s in ((40, 1), (55, 2), (30, 3))]
    for i, g in enumerate(graphs):
        g.info["name"] = f"g{i}"
    queries = [queries_of(g, 3, seed=10 + i) for i, g in enumerate(graphs)]
    policy = make_policy("router", scorer=perturbed_scorer(16, seed=4, rank=4), device="cpu")
    together = policy.retrieve_graphs(graphs, queries, WIDE)
    for g, qs, rs in zip(graphs, queries, together):
        alone = policy.retrieve_batch(g, qs, WIDE)
        assert [r.loaded for r in rs] == [r.loaded for r in alone]
        assert [r.edges_traversed for r in rs] == [r.edges_traversed for r in alone]
        assert [r.edges_considered for r in rs] == [r.edges_considered for r in alone]


def test_checkpoint_of_the_trainer_deploys_on_unseen_graphs(tmp_path):
    t = trainer(config(run={"device": "cpu", "checkpoint_dir": str(tmp_path)}))
    t.learn()
    policy = make_policy("router", checkpoint=str(tmp_path / "best.pt"), device="cpu")
    graphs, questions, emb = bridge_set((11,))
    d = walk_data(graphs, questions, emb, BUDGET)
    ep = walk(d.tables, t.scorer, d.q, d.entries, BUDGET, lexical=d.lexical)
    (name,) = graphs
    graph, queries = graphs[name], [Query(q.qid, q.text, e) for q, e in zip(questions, emb)]
    got = policy.retrieve_batch(graph, queries, BUDGET)
    assert [r.loaded for r in got] == [[v for v in row if v >= 0] for row in ep.loaded.tolist()]
    # the gold sits behind a bridge with negative cosine: only the trained, budget-aware walk reaches it
    gold = [graph.index_of(q.evidence[0]) for q in questions]

    def recall(results):
        return sum(g in r.loaded for g, r in zip(gold, results)) / len(gold)

    assert recall(got) >= 0.9
    for other in ("dense_topk", "beta_bfs", "ppr", "uniform_bfs"):
        assert recall(make_policy(other).retrieve_batch(graph, queries, BUDGET)) == 0.0, other
    untrained = make_policy("router", scorer=WalkScorer(ScorerConfig(dim=32)), device="cpu")
    assert recall(untrained.retrieve_batch(graph, queries, BUDGET)) == 0.0
