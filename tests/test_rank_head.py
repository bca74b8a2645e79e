"""The router's ranking head: its list is ordered by relevance, not by load order; the head learns
from listwise labels what cosine cannot see; R@k of the router equals R@k computed from its list;
the trainer stores the head in best.pt and the router serves it."""

from __future__ import annotations

import math

import pytest
import torch

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import LoadReport, Question
from graphmem.eval.harness import evaluate_policy
from graphmem.policies.rank_features import NUM_RANK_FEATURES, list_pairs
from graphmem.policies.router import RouterPolicy
from graphmem.store.graphset import GraphSet
from models.rank_head import RankHead, RankHeadConfig, RankInputs, listwise_loss
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.rank import Lists, RankConfig, ranked_recall, train_rank_head

DIM = 8


def unit(*values) -> torch.Tensor:
    v = torch.tensor(values + (0.0,) * (DIM - len(values)))
    return v / v.norm()


def chain_pool() -> tuple[MemoryGraph, Query]:
    """e -> a -> b -> g, and distractors; g has the highest cosine but opens only at depth 3."""
    g = MemoryGraph.empty(DIM)
    angles = {"e": 1.2, "a": 1.3, "b": 1.4, "g": 0.1, "d1": 1.5, "d2": 1.45}
    ids = list(angles)
    emb = torch.stack([unit(math.cos(t), math.sin(t)) for t in angles.values()])
    g.add_nodes(ids, [f"passage {i}" for i in ids], emb, metadata=[{"title": i} for i in ids])
    for src, dst in (("e", "a"), ("a", "b"), ("b", "g"), ("e", "d1"), ("d1", "d2")):
        g.add_edge(src, dst, "entity")
    return g, Query("q", "which passage", unit(1.0, 0.0))


def test_gold_loaded_last_but_scored_highest_is_ranked_first():
    graph, query = chain_pool()
    budget = Budget(max_entries=1, top_k_neighbors=1, max_hops=3, max_nodes=4)
    head = RankHead(RankHeadConfig(NUM_RANK_FEATURES))  # untrained: r_v = cos(q, x_v)
    walk = WalkScorer(ScorerConfig(dim=DIM, rank=0, stop=False, lexical=False))
    policy = RouterPolicy(scorer=walk, rank_head=head, device="cpu")
    (r,) = policy.retrieve_from_entries(graph, [query], [[graph.index_of("e")]], budget)
    assert r.loaded_ids(graph) == ["e", "a", "b", "g"]  # the trace keeps the load order
    assert r.ranked_ids(graph)[0] == "g"
    (plain,) = RouterPolicy(scorer=walk, rank_head=head, device="cpu", rank=False).retrieve_from_entries(
        graph, [query], [[graph.index_of("e")]], budget
    )
    assert plain.ranked_ids(graph) == ["e", "a", "b", "g"]


def test_router_recall_at_k_is_computed_from_its_ranked_list(tmp_path):
    graph, query = chain_pool()
    graph.info["name"] = "pool"
    q = Question("q", "pool", query.text, None, ("g",), 1, support_titles=("g", "b"))
    gs = GraphSet("hotpotqa", {"pool": graph}, [q], query.embedding[None], LoadReport("test"))
    budget = Budget(max_entries=1, top_k_neighbors=1, max_hops=3, max_nodes=4)
    walk = WalkScorer(ScorerConfig(dim=DIM, rank=0, stop=False, lexical=False))
    policy = RouterPolicy(scorer=walk, rank_head=RankHead(RankHeadConfig(NUM_RANK_FEATURES)), device="cpu")
    policy.entry_selector = type("Fixed", (), {"select": lambda self, g, qs, b: [[g.index_of("e")] for _ in qs]})()
    (row,) = evaluate_policy(policy, gs, budget, progress=False).rows
    titles = list(dict.fromkeys(graph.metadata[graph.index_of(n)]["title"] for n in row["ranked"]))
    for k in (2, 5):
        by_hand = len(set(titles[:k]) & {"g", "b"}) / 2
        assert row["metrics"][f"passage_recall_{k}"] == by_hand
    assert row["ranked"][0] == "g" and row["loaded"][0] == "e"
    assert row["metrics"]["passage_recall_2"] == 0.5  # load order would give 0 at k = 2


def test_list_pairs_are_every_ordered_pair_within_a_query():
    query = torch.tensor([0, 0, 0, 1, 2, 2])
    src, dst = list_pairs(query)
    got = sorted(zip(src.tolist(), dst.tolist()))
    want = sorted((i, j) for i in range(6) for j in range(6) if i != j and query[i] == query[j])
    assert got == want


def test_listwise_loss_is_the_top_one_cross_entropy():
    scores = torch.tensor([2.0, 0.0, 1.0, 3.0, 3.0], requires_grad=True)
    query = torch.tensor([0, 0, 0, 1, 1])
    gold = torch.tensor([False, True, True, True, False])
    p0 = torch.softmax(scores[:3].detach(), 0)
    want = (-(p0[1].log() + p0[2].log()) / 2 - math.log(0.5)) / 2
    assert float(listwise_loss(scores, query, gold).detach()) == pytest.approx(float(want), rel=1e-5)
    listwise_loss(scores, query, gold).backward()
    assert scores.grad[1] < 0 < scores.grad[0]


def synthetic_lists(n_queries: int, seed: int) -> Lists:
    """Lists where the gold item is the one with feature column 11 set (a depth-1 load) and cosine is noise."""
    gen = torch.Generator().manual_seed(seed)
    per = 10
    query = torch.arange(n_queries).repeat_interleave(per)
    features = torch.rand(n_queries * per, NUM_RANK_FEATURES, generator=gen) * 0.1
    features[:, 0] = torch.rand(n_queries * per, generator=gen)  # cosine: unrelated to gold
    gold_pos = torch.randint(0, per, (n_queries,), generator=gen) + torch.arange(n_queries) * per
    gold = torch.zeros(n_queries * per, dtype=torch.bool)
    gold[gold_pos] = True
    features[:, 11] = gold.float()
    slot = torch.arange(n_queries * per) % per
    src, dst = list_pairs(query)
    items = RankInputs(features, query, torch.arange(query.numel()), torch.ones_like(gold), slot, src, dst)
    return Lists(items, gold, torch.ones(n_queries))


def test_the_head_learns_what_cosine_cannot_see_and_beats_load_order_on_validation():
    train, val = synthetic_lists(64, 0), synthetic_lists(32, 1)
    untrained = RankHead(RankHeadConfig(NUM_RANK_FEATURES))
    with torch.no_grad():
        before = ranked_recall(untrained(val.items), val)
    result = train_rank_head(RankConfig(epochs=40, lr=1e-2), train, val)
    assert before < 0.6
    assert result.selected == "head" and result.val["head"] >= 0.95
    assert result.val["load_order"] < 0.6
    with torch.no_grad():
        assert ranked_recall(result.head(val.items), val) == pytest.approx(result.val["head"])


def test_no_head_is_kept_when_load_order_wins_on_validation():
    train, val = synthetic_lists(16, 0), synthetic_lists(16, 1)
    # validation gold is always the first load: the load order is perfect
    val.gold = val.items.slot == 0
    result = train_rank_head(RankConfig(epochs=2), train, val)
    assert result.head is None and result.selected == "load order"
    assert result.checkpoint() is None


def test_trainer_stores_the_head_in_best_pt_and_the_router_serves_it(tmp_path):
    from test_walk_trainer import BUDGET, bridge_set, config

    from rl.walk.trainer import WalkTrainer

    cfg = config(run={"device": "cpu", "checkpoint_dir": str(tmp_path)})
    graphs, questions, emb = bridge_set((0, 1))
    val_graphs, val_q, val_emb = bridge_set((7,))
    result = WalkTrainer(cfg, {**graphs, **val_graphs}, questions, emb, val_q, val_emb, budget=BUDGET).learn()
    assert result.rank is not None and result.rank.history
    assert [r["phase"] for r in result.rank.history] == ["rank"] * cfg.rank.epochs
    policy = RouterPolicy(tmp_path / "best.pt", device="cpu")
    assert (policy.rank_head is not None) == (result.rank.head is not None)
    off = RouterPolicy(tmp_path / "best.pt", device="cpu", rank=False)
    assert off.rank_head is None


def test_lists_are_collected_in_bounded_calls_each_graph_once_per_call():
    from rl.walk.rank import QUERIES_PER_CALL, _calls

    by_graph = {"big": list(range(300)), "a": [300, 301], "b": [302]}
    calls = _calls(by_graph, graphs_per_call=2)
    assert all(sum(len(idx) for _, idx in call) <= QUERIES_PER_CALL for call in calls)
    assert all(len({n for n, _ in call}) == len(call) <= 2 for call in calls)
    flat = sorted(i for call in calls for _, idx in call for i in idx)
    assert flat == list(range(303))
