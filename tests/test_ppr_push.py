"""Forward push against the power-iteration oracle, and its per-query work on growing graphs."""

import sys
from pathlib import Path

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.policies.ppr import PersonalizedPageRank
from graphmem.policies.push import forward_push
from graphmem.policies.scope import Scope

sys.path.insert(0, str(Path(__file__).parent))
from test_ppr import small_graph  # noqa: E402
from varied_graphs import varied_posterior_graph  # noqa: E402


def dangling_topic_graph():
    g = varied_posterior_graph(300, seed=5)
    g.remove_edges((g.edge_index[0] < 25).nonzero().flatten())  # 25 dangling nodes
    return g


GRAPHS = {
    "small": lambda: small_graph(False),
    "small-dangling": lambda: small_graph(True),
    "topic-dangling": dangling_topic_graph,
    "synthetic": lambda: make_synthetic_graph(500, avg_degree=6.0, dim=8, seed=2),
}


def restarts(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Five queries: (query, node, weight) with one to three distinct entries each, uniform weights."""
    gen = torch.Generator().manual_seed(seed)
    q, v, w = [], [], []
    for b in range(5):
        k = 1 + b % 3
        nodes = torch.randperm(n, generator=gen)[:k]
        q += [b] * k
        v += nodes.tolist()
        w += [1.0 / k] * k
    return torch.tensor(q), torch.tensor(v), torch.tensor(w, dtype=torch.float64)


@pytest.mark.parametrize("name", list(GRAPHS))
@pytest.mark.parametrize("epsilon", [1e-2, 1e-3, 1e-5])
@pytest.mark.parametrize("alpha", [0.15, 0.4])
def test_push_is_within_its_stated_bound_of_the_oracle(name, epsilon, alpha):
    g = GRAPHS[name]()
    n = g.num_nodes
    q, v, w = restarts(n, seed=len(name))
    dense = torch.zeros(n, 5, dtype=torch.float64)
    dense[v, q] = w
    oracle = PersonalizedPageRank(alpha=alpha, method="power", tol=1e-13, max_iter=5000).scores(g, dense)
    policy = PersonalizedPageRank(alpha=alpha, epsilon=epsilon, max_iter=10_000)
    table = policy.push_table(Scope.single(g, [], "cpu"))
    res = forward_push(table, q, v, w, 5, alpha, epsilon, max_rounds=10_000)
    est = torch.zeros(n, 5, dtype=torch.float64)
    est[res.node, res.query] = res.p
    gap = oracle - est  # = G r >= 0, summing to ||r||_1 per query
    slack = 1e-10
    assert bool((gap >= -slack).all())
    assert bool((gap <= res.residual_mass + slack).all())
    assert torch.allclose(gap.sum(0), res.residual_mass, atol=1e-9, rtol=0)
    # termination: every residual below its threshold, so ||r||_1 < epsilon * sum of d_u over the residual support
    assert bool((res.r < epsilon * table.cost[res.node]).all())
    support = torch.zeros(5, dtype=torch.float64).index_add_(0, res.query, table.cost[res.node] * (res.r > 0))
    assert bool((res.residual_mass <= epsilon * support + slack).all())
    assert bool((res.rows_read <= 1.0 / (alpha * epsilon)).all())
    assert torch.allclose(res.p.sum() + res.residual_mass.sum(), torch.tensor(5.0, dtype=torch.float64))
    # the estimate p + alpha r: still below the oracle, within (1 - alpha) ||r||_1, and what `scores` returns
    assert torch.equal(res.estimate, res.p + alpha * res.r)
    hat = torch.zeros(n, 5, dtype=torch.float64)
    hat[res.node, res.query] = res.estimate
    assert bool((oracle - hat >= -slack).all())
    assert torch.allclose((oracle - hat).sum(0), (1 - alpha) * res.residual_mass, atol=1e-9, rtol=0)
    assert torch.equal(policy.scores(g, dense), hat)


def test_small_epsilon_reaches_the_oracle():
    g = dangling_topic_graph()
    dense = torch.zeros(g.num_nodes, 1, dtype=torch.float64)
    dense[[3, 40, 77], 0] = 1.0 / 3
    oracle = PersonalizedPageRank(method="power", tol=1e-13, max_iter=5000).scores(g, dense)
    push = PersonalizedPageRank(epsilon=1e-9, max_iter=10_000).scores(g, dense)
    assert torch.allclose(push, oracle, atol=1e-6, rtol=0)


def test_per_query_work_does_not_grow_with_the_graph():
    """Same degree, 10x and 100x the nodes: the pairs a query touches and the rows it reads stay
    under the 1 / (alpha epsilon) bound and far below N."""
    alpha, epsilon = 0.15, 1e-3
    touched, rows = [], []
    for n in (1_000, 10_000, 100_000):
        g = make_synthetic_graph(n, avg_degree=6.0, dim=8, seed=0)
        policy = PersonalizedPageRank(alpha=alpha, epsilon=epsilon)
        table = policy.push_table(Scope.single(g, [], "cpu"))
        q = torch.arange(4).repeat_interleave(4)
        v = torch.randint(0, n, (16,), generator=torch.Generator().manual_seed(n))
        res = forward_push(table, q, v, torch.full((16,), 0.25, dtype=torch.float64), 4, alpha, epsilon)
        touched.append(int(torch.bincount(res.query).max()))
        rows.append(float(res.rows_read.max()))
        assert rows[-1] <= 1.0 / (alpha * epsilon)
        assert touched[-1] <= 4 + rows[-1]  # the seeds and one pair per row read at most
    assert max(touched) < 1_000  # far below N at 10^4 and 10^5 nodes
    assert touched[2] <= 2 * touched[0] + 50
