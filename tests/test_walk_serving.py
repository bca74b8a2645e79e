"""The served walk (one query at a time: graphmem.policies.walk_one.walk_one, with the scorer's per-graph
tensors cached by the router policy) loads what the batched training walk (graphmem.policies.walk.walk,
nothing cached) loads, on every question of a real pooled MuSiQue graph, with and without the lexical
features of query and node text (computed per query, never cached); the cache follows the weights."""

from __future__ import annotations

import copy

import pytest
import torch

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.core import Budget
from graphmem.index.lexical_features import NUM_LEXICAL_FEATURES
from graphmem.policies import make_policy
from graphmem.policies.walk import walk, walk_trace
from rl.walk.data import walk_data
from tests.test_walk_router import perturbed_scorer

BUDGETS = (Budget(), Budget(max_entries=4, top_k_neighbors=3, max_hops=3, max_nodes=10, max_tokens=900))


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    root = tmp_path_factory.mktemp("musique")
    data = DataConfig(name="musique", pooled=True)  # all 50 records, pooled
    return build_graphset(data, GraphConfig(encoder="hashing", cache_dir=str(root / "cache")), progress=False)


def batched_reference(gs, scorer, budget):
    """qid -> (loaded rows, depths, traversed edges) of the batched walk over all questions at once."""
    d = walk_data(gs.graphs, gs.questions, gs.query_embeddings, budget)
    tr = walk_trace(walk(d.tables, scorer, d.q, d.entries, budget, lexical=d.lexical), d.tables, budget)
    out = {qid: ([], [], []) for qid in d.qids}
    for b, v, depth, e in zip(tr.query.tolist(), tr.node.tolist(), tr.depth.tolist(), tr.edge.tolist()):
        rows, depths, edges = out[d.qids[b]]
        rows.append(v)
        depths.append(depth)
        if e >= 0:
            edges.append(e)
    return out


def served(policy, gs, budget):
    by_qid = {q.qid: q for q in gs.queries()}
    out = {}
    for q in gs.questions:
        (r,) = policy.retrieve_batch(gs.graphs[q.graph], [by_qid[q.qid]], budget)
        out[q.qid] = (r.loaded, r.max_depth, sorted(r.edges_traversed)), r
    return out


def without_lexical_weights(scorer):
    """A copy of ``scorer`` whose structural head ignores the lexical features (their input columns zeroed)."""
    other = copy.deepcopy(scorer)
    with torch.no_grad():
        other.head[0].weight[:, -NUM_LEXICAL_FEATURES:] = 0.0
    return other


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("stop,lexical", [(True, True), (False, True), (True, False), (False, False)])
def test_served_walk_loads_what_the_training_walk_loads_on_pooled_musique(pooled, budget, stop, lexical):
    (graph,) = pooled.graphs.values()
    assert graph.num_nodes > 500 and len(pooled.questions) >= 50
    scorer = perturbed_scorer(graph.dim, seed=1 if stop else 0, rank=4, stop=stop, lexical=lexical)
    want = batched_reference(pooled, scorer, budget)
    if lexical:  # the lexical features decide some walks, so serving them wrongly would show
        assert want != batched_reference(pooled, without_lexical_weights(scorer), budget)
    policy = make_policy("router", scorer=scorer, device="cpu")
    got = served(policy, pooled, budget)
    assert set(want) == set(got) and len(want) >= 45
    for qid, (rows, depths, edges) in want.items():
        (loaded, got_depth, got_edges), r = got[qid]
        assert loaded == rows and got_depth == max(depths, default=0) and got_edges == sorted(edges), qid
        assert len(loaded) <= budget.max_nodes and r.loaded_tokens <= budget.max_tokens
    assert any(max(d[1], default=0) >= 2 for d in want.values())  # the walks go past hop 1 ...
    if stop:  # ... and the stop head ends some of them before the budget does
        assert any(0 < len(d[0]) < budget.max_nodes - 2 for d in want.values())
    # the batch path of the policy (all questions in one call) agrees too
    by_qid = {q.qid: q for q in pooled.queries()}
    batch = policy.retrieve_batch(graph, [by_qid[q.qid] for q in pooled.questions], budget)
    assert [r.loaded for r in batch] == [want[q.qid][0] for q in pooled.questions]


def test_cached_scorer_tensors_follow_the_weights(pooled):
    (graph,) = pooled.graphs.values()
    scorer = perturbed_scorer(graph.dim, seed=3, rank=4)
    policy = make_policy("router", scorer=scorer, device="cpu")
    budget = BUDGETS[0]
    first = {k: v[0] for k, v in served(policy, pooled, budget).items()}
    with torch.no_grad():  # new edge-encoder weights: every pair's e changes, so the cached e must too
        for p in scorer.edges.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(9)) * 2.0)
    again = {k: v[0] for k, v in served(policy, pooled, budget).items()}
    want = batched_reference(pooled, scorer, budget)
    assert again == {k: (r, max(d, default=0), sorted(e)) for k, (r, d, e) in want.items()}
    assert again != first  # the new weights walk differently (so a stale cache would have been caught)


def test_served_walk_scores_no_children_of_its_last_load(pooled):
    """A walk that loads ``max_nodes`` nodes scores the children of every load but the last (those could
    never be loaded): no score call for the children of load ``max_nodes - 1``; the same loads."""
    (graph,) = pooled.graphs.values()
    scorer = perturbed_scorer(graph.dim, seed=0, rank=4, stop=False, lexical=True)
    budget = Budget(max_entries=4, top_k_neighbors=3, max_hops=3, max_nodes=6, max_tokens=100_000)
    want = batched_reference(pooled, scorer, budget)
    orders, real = [], type(scorer).score
    scorer.score = lambda ctx, cand: orders.extend(cand.order[~cand.is_entry].tolist()) or real(scorer, ctx, cand)
    got = served(make_policy("router", scorer=scorer, device="cpu"), pooled, budget)
    assert all(loaded == want[qid][0] for qid, ((loaded, _, _), _) in got.items())
    assert sum(len(v[0][0]) == budget.max_nodes for v in got.values()) >= 40
    assert orders and max(orders) == budget.max_nodes - 2  # children of the first max_nodes - 1 loads only
