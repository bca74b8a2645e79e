"""Beta BFS's exploring rankings (``ranking=ucb|thompson``) on hand-built graphs, scores computed by hand."""

import math

import pytest
import torch

from graphmem.config.cli import policy_config
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.policies import make_policy
from graphmem.policies.beta_bfs import BetaBFS
from tests.script_loader import compose

Q = Query("q0", "toy question", torch.ones(4))
ONE_HOP = Budget(max_entries=1, top_k_neighbors=1, max_hops=1, max_nodes=2)


class Fixed:
    """Entry selector returning node ``a`` for every query."""

    def select(self, graph, queries, budget):
        return [[graph.index_of("a")] for _ in queries]


def star(counters):
    """``a -> u`` for each ``u: (S, F)`` of ``counters`` (rows in the given order)."""
    ids = ["a", *counters]
    g = MemoryGraph.empty(4)
    g.add_nodes(ids, [f"note {i}" for i in ids], torch.eye(4)[torch.arange(len(ids)) % 4])
    for u, (s, f) in counters.items():
        g.add_edges([0], [g.index_of(u)], "semantic", S=torch.tensor([float(s)]), F=torch.tensor([float(f)]))
    return g


def picked(policy, graph, budget=ONE_HOP, n=1):
    """The non-entry nodes loaded by ``n`` successive retrievals (one list each)."""
    return [policy.retrieve(graph, Q, budget).loaded_ids(graph)[1:] for _ in range(n)]


def ucb(alpha, beta, c):
    mean = alpha / (alpha + beta)
    return mean + c * math.sqrt(alpha * beta / ((alpha + beta) ** 2 * (alpha + beta + 1)))


def test_ucb_prefers_the_uncertain_edge_over_a_slightly_better_known_one():
    # b: Beta(56, 46), mean 0.549, std 0.049; c: Beta(2, 2), mean 0.5, std 0.224
    g = star({"b": (55, 45), "c": (1, 1)})
    assert picked(BetaBFS(entry_selector=Fixed()), g) == [["b"]]
    assert picked(BetaBFS(entry_selector=Fixed(), ranking="ucb", ucb_c=1.0), g) == [["c"]]
    # the switch point of mean + c * std: b ahead below c*, c ahead above it
    c_star = (56 / 102 - 0.5) / (math.sqrt(2 * 2 / (16 * 5)) - math.sqrt(56 * 46 / (102**2 * 103)))
    assert picked(BetaBFS(entry_selector=Fixed(), ranking="ucb", ucb_c=0.95 * c_star), g) == [["b"]]
    assert picked(BetaBFS(entry_selector=Fixed(), ranking="ucb", ucb_c=1.05 * c_star), g) == [["c"]]
    scores = BetaBFS(ranking="ucb", ucb_c=1.0).edge_scores(g, torch.arange(g.num_edges))
    assert scores.tolist() == pytest.approx([ucb(56, 46, 1.0), ucb(2, 2, 1.0)], abs=1e-12)


def test_ucb_with_c_zero_is_the_posterior_mean_walk():
    # two hops, ties among unseen edges broken by target id, a parallel edge: every rule of the mean's table
    g = star({"d": (0, 0), "b": (2, 0), "c": (0, 0), "e": (0, 3)})
    g.add_edges([g.index_of("b")], [g.index_of("c")], "temporal", S=torch.tensor([1.0]), F=torch.tensor([0.0]))
    g.add_edges([g.index_of("b")], [g.index_of("c")], "entity")
    g.add_edges([g.index_of("b")], [g.index_of("e")], "semantic")
    g.add_edges([g.index_of("c")], [g.index_of("d")], "semantic")
    budget = Budget(max_entries=1, top_k_neighbors=2, max_hops=2, max_nodes=8)
    mean = BetaBFS(entry_selector=Fixed()).retrieve(g, Q, budget)
    zero = BetaBFS(entry_selector=Fixed(), ranking="ucb", ucb_c=0.0).retrieve(g, Q, budget)
    assert mean.loaded_ids(g) == ["a", "b", "c", "e", "d"]
    for field in ("loaded", "edges_traversed", "edges_considered", "loaded_tokens"):
        assert getattr(zero, field) == getattr(mean, field), field


def test_thompson_is_reproducible_for_a_seed_and_explores_where_the_mean_never_does():
    # b: Beta(2, 2), mean 0.5; c: Beta(1, 2), mean 1/3, P(θ_c > θ_b) = 0.3
    g = star({"b": (1, 1), "c": (0, 1)})
    mean = picked(BetaBFS(entry_selector=Fixed()), g, n=40)
    first = picked(BetaBFS(entry_selector=Fixed(), ranking="thompson", seed=7), g, n=40)
    again = picked(BetaBFS(entry_selector=Fixed(), ranking="thompson", seed=7), g, n=40)
    other = picked(BetaBFS(entry_selector=Fixed(), ranking="thompson", seed=8), g, n=40)
    assert mean == [["b"]] * 40
    assert first == again  # same seed, same calls: the same retrievals
    assert first != other
    assert 4 <= first.count(["c"]) <= 24  # drawn, not fixed: c in about 30 % of the retrievals


def test_thompson_draws_follow_the_beta_posterior():
    g = star({"b": (2, 0), "c": (0, 5)})
    policy = BetaBFS(ranking="thompson", seed=0)
    edges = torch.tensor([0, 1]).repeat(20_000)
    draws = policy.edge_scores(g, edges).view(-1, 2)
    assert draws.min() > 0 and draws.max() < 1
    assert draws.mean(0).tolist() == pytest.approx([3 / 4, 1 / 7], abs=0.01)  # α / (α + β)
    assert draws.var(0).tolist() == pytest.approx([3 / 80, 6 / 392], rel=0.05)  # α β / ((α + β)² (α + β + 1))


def test_concentrated_counters_make_the_three_rankings_agree():
    g = star({"b": (900, 100), "c": (500, 500), "d": (100, 900)})
    budget = Budget(max_entries=1, top_k_neighbors=2, max_hops=1, max_nodes=4)
    want = [["b", "c"]] * 10
    assert picked(BetaBFS(entry_selector=Fixed()), g, budget, n=10) == want
    assert picked(BetaBFS(entry_selector=Fixed(), ranking="ucb", ucb_c=1.0), g, budget, n=10) == want
    for seed in range(5):
        assert picked(BetaBFS(entry_selector=Fixed(), ranking="thompson", seed=seed), g, budget, n=10) == want


def test_a_batch_gives_each_query_its_own_thompson_draws():
    g = star({u: (0, 0) for u in "bcdefghijk"})  # ten untried edges: the mean always takes b
    queries = [Query(f"q{i}", "toy question", torch.ones(4)) for i in range(16)]
    out = BetaBFS(entry_selector=Fixed(), ranking="thompson", seed=0).retrieve_batch(g, queries, ONE_HOP)
    assert len({tuple(r.loaded_ids(g)) for r in out}) > 3


def test_ranking_is_a_config_option_of_beta_bfs_and_bad_values_are_refused():
    cfg = compose("evaluate", ["policy=beta_bfs", "policy.ranking=thompson", "policy.seed=3", "policy.ucb_c=2.5"])
    policy = make_policy(policy_config("beta_bfs", cfg.policy))
    assert (policy.ranking, policy.seed, policy.ucb_c) == ("thompson", 3, 2.5)
    assert make_policy(policy_config("beta_bfs")).ranking == "mean"  # the default stays GraphMemory's
    with pytest.raises(ValueError, match="ranking must be one of"):
        BetaBFS(ranking="greedy")
    with pytest.raises(ValueError, match="ucb_c must be >= 0"):
        BetaBFS(ranking="ucb", ucb_c=-1.0)
