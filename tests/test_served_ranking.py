"""The router serving one query ranks its list from feature rows written on the host
(graphmem.policies.rank_features.one_query_rank_inputs): they are rank_inputs' rows bit for bit, so the served
ranked list is the one the batched features give, on every question of a real pooled MuSiQue graph, with the
scorer's lexical columns or without them."""

from __future__ import annotations

import pytest
import torch

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.core import Budget
from graphmem.index.lexical_features import pair_features, scope_lexical
from graphmem.policies.base import Scope
from graphmem.policies.rank_features import NUM_RANK_FEATURES, one_query_rank_inputs, rank_inputs
from graphmem.policies.router import RouterPolicy
from models.rank_head import RankHead, RankHeadConfig
from tests.test_walk_router import perturbed_scorer


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    root = tmp_path_factory.mktemp("musique")
    data = DataConfig(name="musique", pooled=True)
    return build_graphset(data, GraphConfig(encoder="hashing", cache_dir=str(root / "cache")), progress=False)


def random_head(seed: int) -> RankHead:
    head = RankHead(RankHeadConfig(NUM_RANK_FEATURES))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return head


class ReferenceRanking(RouterPolicy):
    """The router ranking its list from the batched features (rank_inputs), whatever the batch."""

    def _rank_items(self, tables, tr, q, lexical, ctx, entries):
        return rank_inputs(tables, q, lexical, entries, (tr.query, tr.node, tr.depth, tr.score))


@pytest.mark.parametrize("lexical", [True, False])
def test_served_rows_are_the_batched_rows_and_the_ranked_lists_equal(pooled, lexical):
    (graph,) = pooled.graphs.values()
    scorer = perturbed_scorer(graph.dim, seed=4, rank=4, lexical=lexical)
    served = RouterPolicy(scorer=scorer, rank_head=random_head(1), device="cpu")
    reference = ReferenceRanking(scorer=scorer, rank_head=served.rank_head, device="cpu")
    budget, queries, differ = Budget(), pooled.queries(), 0
    for query in queries[:12]:  # the rows themselves, column by column
        scope = Scope.single(graph, [query], "cpu")
        entries = served.select_entries(scope, budget)
        tables, tr, q, _, _ = served._trace(scope, entries, budget)
        lex = pair_features(scope_lexical(scope), torch.zeros_like(tr.node), tr.node)
        got = one_query_rank_inputs(tables, q, lex, entries, (tr.node, tr.depth, tr.score))
        want = rank_inputs(tables, q, scope_lexical(scope), entries, (tr.query, tr.node, tr.depth, tr.score))
        assert torch.equal(got.features, want.features), query.qid
        assert torch.equal(got.src, want.src) and torch.equal(got.dst, want.dst)
    for query in queries:  # what the policy returns
        (r,) = served.retrieve_batch(graph, [query], budget)
        (ref,) = reference.retrieve_batch(graph, [query], budget)
        assert r.loaded == ref.loaded and r.ranked == ref.ranked, query.qid
        differ += r.ranked != r.loaded
    assert differ > len(queries) // 2  # the head reorders most lists, so a wrong row would show
