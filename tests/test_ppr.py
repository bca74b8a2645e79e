"""Personalized PageRank against a dense linear-algebra reference."""

import sys
from pathlib import Path

import pytest
import torch

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.policies.ppr import PersonalizedPageRank, transition_matrix

sys.path.insert(0, str(Path(__file__).parent))
from policy_references import REFERENCES  # noqa: E402
from varied_graphs import varied_posterior_graph  # noqa: E402


def small_graph(dangling: bool) -> MemoryGraph:
    g = MemoryGraph.empty(3)
    g.add_nodes([f"n{i}" for i in range(6)], [f"text {i}" for i in range(6)], torch.eye(3)[torch.arange(6) % 3])
    src = [0, 0, 1, 1, 2, 3, 3, 4, 5, 2] + ([] if dangling else [5])
    dst = [1, 2, 2, 3, 0, 4, 1, 5, 0, 0] + ([] if dangling else [4])
    rel = [0, 1, 2, 3, 1, 0, 1, 2, 3, 2] + ([] if dangling else [0])
    g.add_edges(src, dst, rel)
    g.S = torch.arange(g.num_edges, dtype=torch.float32) % 3
    g.F = torch.arange(g.num_edges, dtype=torch.float32) % 2
    if dangling:
        g.remove_edges([8])  # node 5 has no out-edge left
    return g


def dense_reference(g: MemoryGraph, restart: torch.Tensor, alpha: float, rho: dict) -> torch.Tensor:
    """Solve (I - (1-alpha)(P^T + r 1_D^T)) p = alpha r with a dense P built edge by edge."""
    n = g.num_nodes
    a = torch.zeros(n, n, dtype=torch.float64)
    for e in range(g.num_edges):
        u, v = int(g.edge_index[0, e]), int(g.edge_index[1, e])
        w = (float(g.S[e]) + 1) / (float(g.S[e]) + float(g.F[e]) + 2)
        a[u, v] += rho.get(g.relations[int(g.edge_type[e])], 1.0) * w
    out = a.sum(1)
    p_mat = torch.where(out[:, None] > 0, a / out.clamp(min=1e-300)[:, None], torch.zeros_like(a))
    d = (out == 0).double()
    m = (1 - alpha) * (p_mat.T + restart[:, None] * d[None, :])
    return torch.linalg.solve(torch.eye(n, dtype=torch.float64) - m, alpha * restart)


@pytest.mark.parametrize("dangling", [False, True])
@pytest.mark.parametrize("alpha,rho", [(0.15, {}), (0.3, {"semantic": 2.0, "entity": 0.0})])
def test_power_iteration_matches_dense_solve(dangling, alpha, rho):
    g = small_graph(dangling)
    policy = PersonalizedPageRank(alpha=alpha, relation_weights=rho, method="power")
    restarts = torch.zeros(6, 3, dtype=torch.float64)
    restarts[0, 0] = 1.0
    restarts[[3, 5], 1] = 0.5
    restarts[4, 2] = 1.0
    p = policy.scores(g, restarts)
    for j in range(3):
        ref = dense_reference(g, restarts[:, j], alpha, rho)
        assert torch.allclose(p[:, j], ref, atol=1e-6, rtol=0)
        assert float(p[:, j].sum()) == pytest.approx(1.0, abs=1e-9)


def test_no_dangling_matches_textbook_formula():
    g = small_graph(dangling=False)
    pt, dangling = transition_matrix(g)
    assert not dangling.any()
    dense_pt = pt.to_dense()
    assert torch.allclose(dense_pt.sum(0), torch.ones(6, dtype=torch.float64))  # row-stochastic P
    r = torch.zeros(6, dtype=torch.float64)
    r[2] = 1.0
    ref = torch.linalg.solve(torch.eye(6, dtype=torch.float64) - 0.85 * dense_pt, 0.15 * r)
    p = PersonalizedPageRank(method="power").scores(g, r[:, None])[:, 0]
    assert torch.allclose(p, ref, atol=1e-6, rtol=0)


def test_loads_best_scores_within_hops():
    g = small_graph(dangling=False)
    q = Query("q", "", torch.tensor([1.0, 0.0, 0.0]))
    budget = Budget(max_entries=1, max_hops=1, max_nodes=12)
    r = PersonalizedPageRank().retrieve(g, q, budget)
    assert r.entries == [0]
    assert set(r.loaded) == {0, 1, 2}  # node 0 and its out-neighbors; farther nodes excluded by hops
    assert r.scores == sorted(r.scores, reverse=True) and r.max_depth == 1
    assert r.edges_traversed and all(int(g.edge_index[1, e]) in r.loaded for e in r.edges_traversed)


@pytest.fixture(scope="module")
def topic_graph():
    """400 topic-clustered nodes with varied posteriors; nodes 0..29 lose their out-edges (dangling)."""
    g = varied_posterior_graph(400, seed=3)
    g.remove_edges((g.edge_index[0] < 30).nonzero().flatten())
    return g


@pytest.fixture(scope="module")
def topic_queries(topic_graph):
    gen = torch.Generator().manual_seed(1)
    rows = torch.cat([torch.arange(3), torch.randint(0, topic_graph.num_nodes, (17,), generator=gen)])
    emb = topic_graph.embeddings[rows] + 0.3 * torch.randn(20, topic_graph.dim, generator=gen)
    return [Query(f"q{i}", f"question {i}", emb[i]) for i in range(20)]


def fields(r):
    return (r.loaded, r.entries, r.edges_considered, r.edges_traversed, r.loaded_tokens, r.max_depth, r.scores)


@pytest.mark.parametrize(
    "budget",
    [
        Budget(max_entries=3, max_hops=2, max_nodes=12, max_tokens=90),  # token skips, windows past max_nodes
        Budget(max_entries=4, max_hops=2, max_nodes=40, max_tokens=700),
        Budget(max_entries=6, max_hops=1, max_nodes=3),
        Budget(max_entries=2, max_hops=0, max_nodes=12),
    ],
    ids=["tight-tokens", "wide", "few-nodes", "entries-only"],
)
@pytest.mark.parametrize(
    "method,columns",
    [("power", 1), ("power", 7), ("power", None), ("push", None)],
    ids=["block1", "block7", "one-block", "push"],
)
@pytest.mark.parametrize(
    "kwargs", [{}, {"relation_weights": {"entity": 0.0}, "use_posterior": False}], ids=["default", "no-entity"]
)
def test_batched_equals_per_query_reference(topic_graph, topic_queries, budget, method, columns, kwargs):
    n = topic_graph.num_nodes
    block = {} if columns is None else {"max_block_elements": columns * n + n - 1}
    policy = PersonalizedPageRank(**kwargs, **block, method=method)
    single = [REFERENCES["ppr"](policy, topic_graph, q, budget) for q in topic_queries]
    batched = policy.retrieve_batch(topic_graph, topic_queries, budget)
    assert [fields(r) for r in batched] == [fields(r) for r in single]
    assert all(r.loaded for r in single) and any(r.edges_traversed for r in single)
    assert all(r.max_depth <= budget.max_hops for r in single)
    if budget.max_tokens < 100:
        assert any(len(r.loaded) < budget.max_nodes for r in single)  # some node was skipped for tokens


@pytest.mark.parametrize("method", ["power", "push"])
def test_scores_do_not_depend_on_block_composition(topic_graph, method):
    restarts = torch.zeros(topic_graph.num_nodes, 9, dtype=torch.float64)
    for j in range(9):
        restarts[torch.arange(j, j + 1 + j % 3), j] = 1.0 / (1 + j % 3)
    policy = PersonalizedPageRank(method=method)
    block = policy.scores(topic_graph, restarts)
    for j in range(9):
        assert torch.equal(policy.scores(topic_graph, restarts[:, j : j + 1])[:, 0], block[:, j])
        assert torch.equal(policy.scores(topic_graph, restarts[:, j:])[:, 0], block[:, j])


def test_invalid_arguments():
    with pytest.raises(ValueError, match="alpha"):
        PersonalizedPageRank(alpha=0.0)
    with pytest.raises(ValueError, match="max_block_elements"):
        PersonalizedPageRank(max_block_elements=0)
    with pytest.raises(ValueError, match="method"):
        PersonalizedPageRank(method="exact")
    with pytest.raises(ValueError, match="epsilon"):
        PersonalizedPageRank(epsilon=0.0)
    with pytest.raises(ValueError, match="unknown relation"):
        transition_matrix(small_graph(False), {"friendship": 1.0})
