"""QueryRouter, relation intent, edge features and the router policy on toy graphs with hand-computed values."""

import sys
from pathlib import Path

import pytest
import torch

from graphmem.graph import MemoryGraph
from graphmem.policies.base import Budget, Query
from graphmem.policies.batched import segment_topk
from graphmem.policies.router import RouterPolicy
from models.edge_features import EdgeFeatures
from models.intent import RelationIntent
from models.router import QueryRouter

sys.path.insert(0, str(Path(__file__).parent))
from references import REFERENCES  # noqa: E402


def toy_graph() -> MemoryGraph:
    """0 = entry (cos 1), 1 = distractor (cos .8, semantic), 2 = bridge (cos -.6, causal),
    3 = gold behind the bridge."""
    emb = torch.tensor([[1.0, 0.0], [0.8, 0.6], [-0.6, 0.8], [0.0, 1.0]])
    g = MemoryGraph.empty(2, info={"name": "toy"})
    g.add_nodes(["a", "b", "c", "d"], ["entry", "distractor", "bridge", "gold"], emb)
    g.add_edges([0], [1], "semantic", features=torch.tensor([[0.0, 0.1, 0.0, 0.0]]))
    g.add_edges([0], [2], "causal", features=torch.tensor([[0.0, 0.0, 2.0, 0.0]]))
    g.add_edges([2], [3], "temporal", features=torch.tensor([[0.5, 0.0, 0.0, 0.0]]))
    return g.validate()


def test_dense_and_ragged_scores_agree_and_have_shapes():
    torch.manual_seed(0)
    router = QueryRouter(8, hidden=16, relation_dim=3)
    q, intent = torch.randn(3, 8), torch.softmax(torch.randn(3, 4), -1)
    x, xs, e, t = torch.randn(5, 8), torch.randn(5, 8), torch.randn(5, 4), torch.tensor([0, 1, 2, 3, 1])
    dense = router(q, intent, x, e, t, x_source=xs)
    assert dense.shape == (3, 5)
    rows, cols = torch.meshgrid(torch.arange(3), torch.arange(5), indexing="ij")
    c = cols.flatten()
    ragged = router(q, intent, x[c], e[c], t[c], index=rows.flatten(), x_source=xs[c])
    assert ragged.shape == (15,)
    assert torch.allclose(dense.flatten(), ragged, atol=1e-6)
    with pytest.raises(ValueError, match="similarities"):
        router(q, intent, x, e, t)


def test_edge_similarities_feed_the_head():
    router = QueryRouter(2, relation_dim=0, head="linear")
    with torch.no_grad():
        router.head.weight.copy_(torch.tensor([[0.0, 0.0, 0.0, 0.0, 2.0, 0.0, -1.0]]))
        router.head.bias.zero_()
    q, intent = torch.tensor([[1.0, 0.0]]), torch.full((1, 4), 0.25)
    xs, xt = torch.tensor([[0.6, 0.8]]), torch.tensor([[0.0, 1.0]])
    s = router(q, intent, xt, torch.zeros(1, 4), torch.tensor([0]), index=torch.tensor([0]), x_source=xs)
    # s = cos(q, x_j) + 2·cos(q, x_i) - cos(x_i, x_j) = 0 + 1.2 - 0.8
    assert torch.allclose(s, torch.tensor([0.4]), atol=1e-6)


def test_fixed_router_toy_values_and_negative_cosine_bridge_wins():
    g = toy_graph()
    router = QueryRouter(2, mode="fixed")
    q = torch.tensor([[1.0, 0.0]])
    s = router(q, torch.full((1, 4), 0.25), g.embeddings[g.edge_index[1]], g.edge_attr, g.edge_type)
    # s = cos(q, x_j) + Σ e_ij:  distractor .8 + .1, bridge -.6 + 2, gold 0 + .5
    assert torch.allclose(s, torch.tensor([[0.9, 1.4, 0.5]]), atol=1e-6)
    assert int(s.argmax()) == 1  # the bridge with negative cosine wins


def test_learned_router_formula_with_set_weights():
    router = QueryRouter(2, relation_dim=0, head="linear", similarities=False)
    with torch.no_grad():
        router.head.weight.copy_(torch.tensor([[0.0, 1.0, 3.0, 0.0]]))
        router.head.bias.fill_(0.5)
    q, intent = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    m = router.modulation(q, intent)  # R·π + g(...), g's last layer is zero at init
    assert torch.allclose(m, torch.tensor([[0.0, 0.0, 2.0, 2.0]]))
    e = torch.tensor([[0.0, 0.1, 0.0, 0.0], [0.0, 0.0, 2.0, 0.0]])
    x = torch.tensor([[0.8, 0.6], [-0.6, 0.8]])
    s = router(q, intent, x, e, torch.tensor([1, 2]), index=torch.tensor([0, 0]))
    # w = 0·(0·.1) + 3·(2·2) + .5 = 12.5 for the bridge; 0 + .5 for the distractor
    assert torch.allclose(s, torch.tensor([0.8 + 0.5, -0.6 + 12.5]), atol=1e-6)


def test_intent_kinds():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    protos = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
    pi = RelationIntent(2, "prototype", prototypes=protos)(q)
    assert pi.argmax(1).tolist() == [0, 1] and torch.allclose(pi.sum(1), torch.ones(2))
    assert torch.allclose(RelationIntent(2, "head")(q), torch.full((2, 4), 0.25))
    assert torch.allclose(RelationIntent(2, "uniform")(q), torch.full((2, 4), 0.25))
    ext = RelationIntent(2, "external")
    assert torch.allclose(
        ext(q, torch.tensor([[2.0, 0, 0, 2], [0, 1, 0, 0]])), torch.tensor([[0.5, 0, 0, 0.5], [0, 1, 0, 0]])
    )
    with pytest.raises(ValueError):
        ext(q)
    with pytest.raises(ValueError):
        RelationIntent(2, "uniform")(q, torch.ones(2, 4))


def test_edge_features_init_anchor_freeze_and_state():
    g = toy_graph()
    g.edge_attr = g.edge_attr + 1.0  # Phase-1 value differs from the anchor kept in edge_attr_init
    ef = EdgeFeatures({"toy": g})
    assert torch.equal(ef.of("toy"), g.edge_attr) and torch.equal(ef.initial, g.edge_attr_init)
    assert ef.anchor_loss().item() == pytest.approx(12.0)  # 3 edges × 4 dims × 1²
    onehot = EdgeFeatures({"toy": g}, init="onehot", trainable=False)
    assert torch.equal(onehot.weight, torch.eye(4)[[1, 2, 0]]) and not onehot.trainable
    assert float(onehot.anchor_loss()) == 0.0
    back = EdgeFeatures.from_state(ef.names, ef.state_dict())
    assert torch.equal(back.of("toy"), ef.of("toy")) and "toy" in back
    copies = ef.write_back({"toy": toy_graph()})
    assert torch.equal(copies["toy"].edge_attr, g.edge_attr)


def test_segment_topk_per_segment():
    s = torch.tensor([0.1, 0.9, 0.5, 0.7, 0.2])
    seg = torch.tensor([0, 0, 0, 1, 1])
    assert sorted(segment_topk(s, seg, 2).tolist()) == [1, 2, 3, 4]
    assert sorted(segment_topk(s, seg, 1).tolist()) == [1, 3]


@pytest.mark.parametrize("layout", ["sorted", "unsorted", "one-hub", "int-ties"])
def test_segment_topk_matches_python_reference(layout):
    gen = torch.Generator().manual_seed(4)
    deg = torch.randint(0, 6, (50,), generator=gen)
    if layout == "one-hub":
        deg[7] = 2000  # runs of very different length: the flat two-sort path
    seg = torch.repeat_interleave(torch.arange(50), deg)
    score = torch.randint(0, 4, (seg.numel(),), generator=gen)  # many ties
    if layout != "int-ties":
        score = score.float()
    if layout == "unsorted":
        seg = seg[torch.randperm(seg.numel(), generator=gen)]
    got = segment_topk(score, seg, 2).tolist()
    want = []
    for j in sorted(set(seg.tolist())):
        members = [i for i in range(seg.numel()) if seg[i] == j]
        want += sorted(members, key=lambda i: (-score[i].item(), i))[:2]
    assert got == want


def test_router_policy_walks_across_the_bridge_on_toy_graph():
    g = toy_graph()
    query = Query("q", "where", torch.tensor([1.0, 0.0]))
    budget = Budget(max_entries=1, top_k_neighbors=1, max_hops=2, max_nodes=3)
    r = RouterPolicy(router=QueryRouter(2, mode="fixed"), device="cpu").retrieve(g, query, budget)
    assert r.loaded_ids(g) == ["a", "c", "d"]  # entry, bridge (1.4 > .9), then gold
    assert r.entries == [0] and r.max_depth == 2
    assert [int(e) for e in r.edges_traversed] == [1, 2]
    assert r.scores == pytest.approx([0.0, 1.4, 0.5])
    wide = RouterPolicy(router=QueryRouter(2, mode="fixed"), device="cpu").retrieve(
        g, query, Budget(max_entries=1, max_nodes=2)
    )
    assert wide.loaded_ids(g) == ["a", "c"]  # node budget respected
    beam = RouterPolicy(router=QueryRouter(2, mode="fixed"), search="beam", beam_width=1, device="cpu")
    assert beam.retrieve(g, query, budget).loaded_ids(g) == ["a", "c", "d"]


def test_router_policy_batch_equals_single():
    g = toy_graph()
    torch.manual_seed(1)
    policy = RouterPolicy(router=QueryRouter(2, hidden=8), device="cpu")
    queries = [Query(f"q{i}", "x", torch.randn(2)) for i in range(5)]
    budget = Budget(max_entries=2, top_k_neighbors=2, max_hops=2, max_nodes=4)
    batch = policy.retrieve_batch(g, queries, budget)
    for q, rb in zip(queries, batch):
        r1 = REFERENCES["router"](policy, g, q, budget)
        assert r1.loaded == rb.loaded and r1.edges_traversed == rb.edges_traversed


ROUTER_BUDGETS = [
    Budget(),
    Budget(max_entries=2, top_k_neighbors=3, max_hops=3, max_nodes=20, max_tokens=400),
    Budget(max_entries=3, top_k_neighbors=2, max_hops=2, max_nodes=12, max_tokens=90),
    Budget(max_entries=1, top_k_neighbors=0, max_hops=0, max_nodes=5, max_tokens=60),
]


@pytest.mark.parametrize("budget", ROUTER_BUDGETS, ids=["default", "wide", "token-skips", "entries-only"])
@pytest.mark.parametrize("variant", ["greedy", "beam", "no-similarities", "fixed"])
def test_batched_walk_equals_per_query_reference(budget, variant):
    from graphmem.synthetic import make_synthetic_graph

    g = make_synthetic_graph(400, avg_degree=6, dim=16, seed=3)
    gen = torch.Generator().manual_seed(0)
    g.edge_attr = torch.rand(g.num_edges, g.edge_attr.shape[1], generator=gen)
    emb = g.embeddings[torch.randint(0, 400, (12,), generator=gen)] + 0.3 * torch.randn(12, 16, generator=gen)
    queries = [Query(f"q{i}", "x", emb[i]) for i in range(12)]
    torch.manual_seed(2)
    router = QueryRouter(
        16,
        num_relations=len(g.relations),
        hidden=8,
        mode="fixed" if variant == "fixed" else "learned",
        similarities=variant != "no-similarities",
    )
    policy = RouterPolicy(router=router, device="cpu", search="beam" if variant == "beam" else "greedy", beam_width=3)
    batch = policy.retrieve_batch(g, queries, budget)
    single = [REFERENCES["router"](policy, g, q, budget) for q in queries]

    def trace(r):
        return r.loaded, r.entries, r.edges_considered, r.edges_traversed, r.loaded_tokens, r.max_depth

    assert [trace(r) for r in batch] == [trace(r) for r in single]
    for rb, rs in zip(batch, single):
        assert rb.scores == pytest.approx(rs.scores, abs=1e-5)
        assert len(rb.loaded) <= budget.max_nodes and rb.loaded_tokens <= budget.max_tokens
    assert [trace(r) for r in policy.retrieve_batch(g, queries[::-1], budget)[::-1]] == [trace(r) for r in batch]
    if budget.max_hops and budget.top_k_neighbors:
        assert any(r.edges_traversed for r in batch)  # the walk left the entries


def test_trainer_yaml_mirrors_train_config():
    import dataclasses
    from pathlib import Path

    from omegaconf import OmegaConf

    from rl.reinforce import TrainConfig

    yaml = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "configs" / "trainer" / "hage.yaml"))
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    assert set(yaml) == set(fields)
    assert {k: v for k, v in yaml.items() if k != "epochs"} == {k: v for k, v in fields.items() if k != "epochs"}
