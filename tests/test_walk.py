"""The budget-aware best-first walk (graphmem/policies/walk.py): a hand-computed toy walk, budget invariants on
random graphs, batching, and the log-probabilities the objectives train on."""

from __future__ import annotations

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.policies.walk import step_log_probs, walk, walk_tables, walk_trace
from models.edge_encoder import pair_table
from models.walk_scorer import ScorerConfig, WalkScorer


class NodeValueScorer:
    """Candidate score = a fixed value per (query, target node); optional constant stop logit."""

    def __init__(self, values: torch.Tensor, stop: float | None = None):
        self.values, self.stop = values, stop

    def prepare(self, tables, q, entries):
        return None

    def score(self, ctx, cand):
        return self.values[cand.query, cand.child]

    def stop_logit(self, ctx, best, count, budget):
        return None if self.stop is None else torch.full_like(best, self.stop)


def tables_of(graph: MemoryGraph):
    x = torch.nn.functional.normalize(graph.embeddings, dim=1)
    return walk_tables(x, node_tokens(graph), pair_table(graph))


def toy_graph(long_node: int | None = None) -> MemoryGraph:
    """0 -> 2, 0 -> 3, 0 -> 4, 2 -> 5, 1 -> 4 (plus a parallel 0 -> 2 edge of another relation)."""
    g = MemoryGraph.empty(2)
    texts = ["w " * (3000 if i == long_node else 3) for i in range(6)]
    g.add_nodes([f"n{i}" for i in range(6)], texts, torch.randn(6, 2, generator=torch.Generator().manual_seed(0)))
    g.add_edges([0, 0, 0, 2, 1], [2, 3, 4, 5, 4], "semantic")
    g.add_edges([0], [2], "temporal")
    return g


VALUES = torch.tensor([[0.9, 0.1, 0.8, 0.7, 0.75, 0.95]])
TOY_BUDGET = Budget(max_entries=2, top_k_neighbors=2, max_hops=2, max_nodes=5, max_tokens=2500)


def test_toy_walk_by_hand():
    g = toy_graph()
    ep = walk(tables_of(g), NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    # 0 (entry), 2 (best child of 0), 5 (child of 2, depth 2), 4 (0's second child), then 0 is full:
    # 3 (.7) is closed and the second entry 1 (.1) is the only open candidate
    assert ep.loaded[0].tolist() == [0, 2, 5, 4, 1]
    assert ep.loaded_depth[0].tolist() == [0, 1, 2, 1, 0]
    assert int(ep.count[0]) == 5
    parents = [int(ep.pool_parent[0, a]) for a in ep.loaded_via[0].tolist()]
    assert parents == [-1, 0, 2, 0, -1]


def test_toy_walk_depth_and_token_caps():
    g = toy_graph(long_node=5)
    ep = walk(tables_of(g), NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    assert 5 not in ep.loaded[0].tolist()  # its tokens break the cap: skipped, the walk goes on
    assert ep.loaded[0].tolist()[:3] == [0, 2, 4]
    shallow = Budget(max_entries=2, top_k_neighbors=2, max_hops=1, max_nodes=5)
    ep = walk(tables_of(toy_graph()), NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), shallow)
    assert ep.loaded[0].tolist() == [0, 2, 4, 1, -1]  # no depth-2 node; 0 keeps 2 children: 3 stays out


def test_stop_action_ends_the_walk():
    g = toy_graph()
    ep = walk(tables_of(g), NodeValueScorer(VALUES, stop=0.85), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    # 0.9 beats the stop (0.85), then the best open score is 0.8 < 0.85: stop after one load
    assert ep.loaded[0].tolist() == [0, -1, -1, -1, -1]
    assert ep.action[1, 0] == ep.pool_node.shape[1]  # the stop column


def check_walk_invariants(graph: MemoryGraph, ep, entries: torch.Tensor, budget: Budget) -> None:
    tokens = node_tokens(graph)
    pairs = set(map(tuple, graph.edge_index.T.tolist()))
    for b in range(entries.shape[0]):
        loaded = [v for v in ep.loaded[b].tolist() if v >= 0]
        assert len(loaded) == len(set(loaded)) == int(ep.count[b]) <= budget.max_nodes
        assert int(tokens[loaded].sum()) == int(ep.used[b]) <= budget.max_tokens
        children: dict[int, int] = {}
        depth = {}
        allowed_entries = [v for v in entries[b, : budget.max_entries].tolist() if v >= 0]
        for v, a, d in zip(loaded, ep.loaded_via[b].tolist(), ep.loaded_depth[b].tolist()):
            u = int(ep.pool_parent[b, a])
            if u < 0:
                assert v in allowed_entries and d == 0
            else:
                assert u in depth and (u, v) in pairs and d == depth[u] + 1 <= budget.max_hops
                children[u] = children.get(u, 0) + 1
                assert children[u] <= budget.top_k_neighbors
            depth[v] = d


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_walk_respects_the_budget_on_random_graphs(seed):
    graph = make_synthetic_graph(300, dim=16, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    bsz = 16
    q = torch.randn(bsz, 16, generator=gen)
    entries = torch.stack([torch.randperm(300, generator=gen)[:8] for _ in range(bsz)])
    entries[0, 3:] = -1
    budget = Budget(max_entries=4, top_k_neighbors=2, max_hops=3, max_nodes=10, max_tokens=150)
    scorer = WalkScorer(ScorerConfig(dim=16, rank=4, stop=False, lexical=False))
    for p in scorer.parameters():  # a random, non-cosine scorer
        torch.nn.init.normal_(p, std=0.5, generator=gen)
    tables = tables_of(graph)
    for sample in (False, True):
        ep = walk(tables, scorer, q, entries, budget, sample=sample, temperature=0.5, generator=gen)
        check_walk_invariants(graph, ep, entries, budget)
        assert bool((ep.count > 3).all())


def test_batched_walk_equals_one_query_at_a_time():
    graph = make_synthetic_graph(200, dim=16, seed=3)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(6, 16, generator=gen)
    entries = torch.stack([torch.randperm(200, generator=gen)[:6] for _ in range(6)])
    scorer = WalkScorer(ScorerConfig(dim=16, rank=4, lexical=False))
    tables, budget = tables_of(graph), Budget()
    together = walk(tables, scorer, q, entries, budget)
    for b in range(6):
        alone = walk(tables, scorer, q[b : b + 1], entries[b : b + 1], budget)
        assert together.loaded[b].tolist() == alone.loaded[0].tolist()


def test_step_log_probs_match_the_walks_own_scores():
    graph = make_synthetic_graph(200, dim=16, seed=4)
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(5, 16, generator=gen)
    entries = torch.stack([torch.randperm(200, generator=gen)[:6] for _ in range(5)])
    scorer, tables, budget, tau = (
        WalkScorer(ScorerConfig(dim=16, rank=4, stop=True, lexical=False)),
        tables_of(graph),
        Budget(),
        0.3,
    )
    ctx = scorer.prepare(tables, q, entries)
    ep = walk(tables, scorer, q, entries, budget, sample=True, temperature=tau, generator=gen, ctx=ctx)
    logp, entropy = step_log_probs(scorer, ctx, ep, budget, tau)
    assert logp.requires_grad
    for t in range(ep.open.shape[0]):
        for b in range(5):
            a = int(ep.action[t, b])
            if a < 0:
                assert float(logp[t, b]) == 0.0
                continue
            logits = ep.scores[b].masked_fill(~ep.open[t, b], float("-inf"))
            stop = scorer.stop_logit(ctx, logits.max()[None], torch.tensor([t]), budget)
            full = torch.cat([logits, stop]) / tau
            expected = torch.log_softmax(full, 0)[a]
            assert torch.allclose(logp[t, b].detach(), expected.detach(), atol=1e-5)
            assert float(entropy[t, b].detach()) >= 0


def test_walk_trace_of_the_toy_walk():
    g = toy_graph()
    tables = tables_of(g)
    ep = walk(tables, NodeValueScorer(VALUES), torch.zeros(1, 2), torch.tensor([[0, 1]]), TOY_BUDGET)
    tr = walk_trace(ep, tables, TOY_BUDGET)
    assert tr.node.tolist() == [0, 2, 5, 4, 1] and tr.depth.tolist() == [0, 1, 2, 1, 0]
    # 0 -> 2 has two edges (ids 0 and 5): the smaller is reported; entries have none
    assert tr.edge.tolist() == [-1, 0, 3, 2, -1]
    assert torch.allclose(tr.score, torch.tensor([0.9, 0.8, 0.95, 0.75, 0.1]))
    assert tr.expanded_node.tolist() == [0, 2, 4, 1]  # 5 is at max_hops: its out-pairs are never read
    assert tr.tokens.tolist() == [int(node_tokens(g)[[0, 2, 5, 4, 1]].sum())]
