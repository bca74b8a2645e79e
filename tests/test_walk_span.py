"""The served walk scores its entries and each expansion from per-query node columns (WalkScorer.score_entries,
score_span; models/walk_columns.py): every score is bit for bit the one WalkScorer.score computes from the same
candidates as tensors, so the served walk's scores are the batched walk's, on a real pooled MuSiQue graph, with
and without lexical features, whether the columns are made for every node at once (small graphs) or for each
node when first asked for (any graph; with the query's dense cosine row or from gathered rows); its float32
stop value is the stop head's tensor logit."""

from __future__ import annotations

import pytest
import torch

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.core import Budget
from graphmem.index.lexical_features import pair_features, query_features, scope_lexical
from graphmem.policies.base import Scope
from graphmem.policies.ranking import query_matrix
from graphmem.policies.router import RouterPolicy
from graphmem.policies.walk import Candidates, walk, walk_trace
from graphmem.policies.walk_one import EntryCandidates, Expansion, walk_one
from models import walk_scorer
from models.walk_columns import every_node_lexical
from tests.test_walk_router import perturbed_scorer

MODES = ("every node", "when asked, dense row", "when asked, gathered rows")


def set_mode(monkeypatch, graph, mode):
    """Make the router's contexts take ``mode``'s way to the node columns (module docstring)."""
    if mode != "every node":
        monkeypatch.setattr(walk_scorer, "SPAN_PAIRS", 0)
    if mode == "when asked, gathered rows":
        monkeypatch.setattr(walk_scorer, "ONE_QUERY_NODES", graph.num_nodes - 1)


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    root = tmp_path_factory.mktemp("musique")
    data = DataConfig(name="musique", pooled=True)
    return build_graphset(data, GraphConfig(encoder="hashing", cache_dir=str(root / "cache")), progress=False)


def served_context(policy, graph, query, budget):
    """``(tables, ctx, q, entries)`` of one query as the router prepares it (per-graph tensors cached)."""
    scope = Scope.single(graph, [query], "cpu")
    entries = policy.select_entries(scope, budget)
    tables, static = policy._walk_tables(scope)
    q = query_matrix(graph, scope.queries)
    lexical = scope_lexical(scope) if policy.scorer.config.lexical else None
    with torch.no_grad():
        ctx = policy.scorer.prepare(tables, q, entries[:, : budget.max_entries], lexical, static)
    return tables, ctx, q, entries


@pytest.mark.parametrize(
    "lexical,rank,mode",
    [(True, 4, m) for m in MODES] + [(False, 0, MODES[0]), (False, 0, MODES[2]), (True, 8, MODES[2])],
)
def test_span_scores_are_the_tensor_path_scores_bit_for_bit(pooled, lexical, rank, mode, monkeypatch):
    (graph,) = pooled.graphs.values()
    set_mode(monkeypatch, graph, mode)
    scorer = perturbed_scorer(graph.dim, seed=2, rank=rank, lexical=lexical)
    policy = RouterPolicy(scorer=scorer, device="cpu")
    queries = pooled.queries()[:6]
    gen = torch.Generator().manual_seed(0)
    for query in queries:
        tables, ctx, _, entries = served_context(policy, graph, query, Budget())
        assert scorer.serves_spans(ctx) and (ctx.cos is None) == (mode == MODES[2])
        col = (entries[0, :6] >= 0).nonzero().flatten()
        ent, none = entries[0, col], torch.full_like(col, -1)
        with torch.no_grad():
            fast = scorer.score(ctx, EntryCandidates(ent.tolist(), tuple(col.tolist()), ent.device))
            want = scorer.score(ctx, Candidates(0 * col, none, ent, none, 0 * col, col))
        assert col.numel() and torch.equal(fast, want), query.qid
        rowptr = tables.pairs.rowptr.tolist()
        for u in torch.randint(graph.num_nodes, (12,), generator=gen).tolist():
            lo, hi = rowptr[u], rowptr[u + 1]
            if hi == lo:
                continue
            for depth, order in ((1, 0), (2, 5), (3, 13)):
                with torch.no_grad():
                    fast = scorer.score(ctx, Expansion(tables.pairs, lo, hi, u, depth, order))
                    full = lambda v: torch.full((hi - lo,), v, dtype=torch.long)  # noqa: E731
                    pair = torch.arange(lo, hi)
                    cand = Candidates(full(0), full(u), tables.pairs.dst[lo:hi], pair, full(depth), full(order))
                    want = scorer.score(ctx, cand)
                assert torch.equal(fast, want), (query.qid, u, depth, order)


@pytest.mark.parametrize("mode", MODES)
def test_served_walk_scores_are_the_batched_walk_scores(pooled, mode, monkeypatch):
    (graph,) = pooled.graphs.values()
    set_mode(monkeypatch, graph, mode)
    scorer = perturbed_scorer(graph.dim, seed=5, rank=4, lexical=True)
    policy = RouterPolicy(scorer=scorer, device="cpu")
    budget = Budget()
    for query in pooled.queries()[:20]:
        tables, ctx, q, entries = served_context(policy, graph, query, budget)
        lexical = ctx.lexical
        with torch.no_grad():
            ep = walk(tables, scorer, q, entries, budget, lexical=lexical)
        want = walk_trace(ep, tables, budget)
        got = walk_one(tables, scorer, q, entries, budget, ctx)
        assert torch.equal(got.node, want.node) and torch.equal(got.score, want.score), query.qid
        assert (ctx.columns.row is None) == (mode == MODES[0])


def test_stop_value_is_the_stop_logit_bit_for_bit(pooled):
    """The served walk's float32 stop value is the stop head's tensor logit, for random weights and scores."""
    (graph,) = pooled.graphs.values()
    scorer = perturbed_scorer(graph.dim, seed=7, rank=4)
    policy = RouterPolicy(scorer=scorer, device="cpu")
    gen = torch.Generator().manual_seed(1)
    for budget in (Budget(), Budget(max_nodes=7)):
        for trial in range(60):
            with torch.no_grad():
                scorer.stop_weights.copy_(torch.randn(2, generator=gen))
                scorer.stop_bias.copy_(torch.randn((), generator=gen))
            _, ctx, _, _ = served_context(policy, graph, pooled.queries()[trial % 5], budget)
            best = torch.randn(1, generator=gen)
            count = int(torch.randint(budget.max_nodes, (1,), generator=gen))
            want = scorer.stop_logit(ctx, best, torch.tensor([count]), budget)[0].item()
            assert scorer.stop_value(ctx, best.item(), count, budget) == want, (trial, count)


def test_columns_when_asked_read_only_the_walks_neighbourhood(pooled, monkeypatch):
    """Columns made when asked: one row per node the walk scored (entries and the targets of its expansions),
    each made once; the same walk as with the columns of every node."""
    (graph,) = pooled.graphs.values()
    scorer = perturbed_scorer(graph.dim, seed=5, rank=4, lexical=True)
    policy = RouterPolicy(scorer=scorer, device="cpu")
    budget = Budget()
    query = pooled.queries()[3]
    tables, ctx, q, entries = served_context(policy, graph, query, budget)
    every = walk_one(tables, scorer, q, entries, budget, ctx)
    set_mode(monkeypatch, graph, MODES[2])
    tables, ctx, q, entries = served_context(policy, graph, query, budget)
    asked = walk_one(tables, scorer, q, entries, budget, ctx)
    assert torch.equal(every.node, asked.node) and torch.equal(every.score, asked.score)
    rowptr, dst = tables.pairs.rowptr.tolist(), tables.pairs.dst.tolist()
    scored = set(entries[0].tolist()) - {-1}
    for v in asked.expanded_node.tolist():
        scored |= set(dst[rowptr[v] : rowptr[v + 1]])
    rows = ctx.columns.row
    assert set(asked.node.tolist()) <= set(rows) <= scored and len(rows) == ctx.columns.host.shape[0]
    assert sorted(rows.values()) == list(range(len(rows))) and len(rows) < graph.num_nodes / 2


def test_lexical_columns_are_the_pair_features(pooled):
    """λ_qv of every node read from the query terms' postings, and query_features of any nodes, are pair_features
    bit for bit."""
    (graph,) = pooled.graphs.values()
    policy = RouterPolicy(scorer=perturbed_scorer(graph.dim, seed=2, rank=4, lexical=True), device="cpu")
    every = torch.arange(graph.num_nodes)
    some = torch.randint(graph.num_nodes, (300,), generator=torch.Generator().manual_seed(3))
    for query in pooled.queries():
        _, ctx, _, _ = served_context(policy, graph, query, Budget())
        assert torch.equal(every_node_lexical(ctx), pair_features(ctx.lexical, torch.zeros_like(every), every))
        assert torch.equal(query_features(ctx.lexical, some), pair_features(ctx.lexical, torch.zeros_like(some), some))
