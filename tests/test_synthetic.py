"""Synthetic graph generators."""

import pytest
import torch

from graphmem.builders.synthetic import make_bridge_graph, make_synthetic_graph
from graphmem.core import Budget
from graphmem.core.graph import RELATIONS
from graphmem.core.tokens import node_tokens
from graphmem.policies import make_policy


def test_synthetic_graph_shape_mix_and_texts():
    g = make_synthetic_graph(2000, avg_degree=8, relation_mix={"temporal": 0.5, "entity": 0.5}, dim=16, seed=1)
    assert g.num_nodes == 2000 and g.dim == 16
    assert 0.97 * 16000 <= g.num_edges <= 16000  # self-loops dropped
    by_rel = torch.bincount(g.edge_type, minlength=len(RELATIONS))
    assert by_rel[RELATIONS.index("semantic")] == 0 and by_rel[RELATIONS.index("causal")] == 0
    assert (g.edge_index[0] != g.edge_index[1]).all()
    tokens = node_tokens(g).float()
    assert 10 <= float(tokens.mean()) <= 45 and int(tokens.min()) >= 8
    assert torch.allclose(g.embeddings.norm(dim=1), torch.ones(2000), atol=1e-5)
    assert g.node_ids == sorted(g.node_ids)


def test_synthetic_graph_is_seeded():
    a, b = make_synthetic_graph(500, seed=4, dim=8), make_synthetic_graph(500, seed=4, dim=8)
    c = make_synthetic_graph(500, seed=5, dim=8)
    assert torch.equal(a.edge_index, b.edge_index) and a.texts == b.texts and torch.equal(a.embeddings, b.embeddings)
    assert not torch.equal(a.embeddings, c.embeddings)


def test_synthetic_graph_semantic_edges_stay_in_topic():
    g = make_synthetic_graph(3000, relation_mix={"semantic": 1.0}, dim=32, seed=0)
    src, dst = g.edge_index
    cos = (g.embeddings[src] * g.embeddings[dst]).sum(1)
    other = torch.randint(0, g.num_nodes, (src.numel(),), generator=torch.Generator().manual_seed(0))
    rand = (g.embeddings[src] * g.embeddings[other]).sum(1)
    assert float(cos.mean()) > float(rand.mean()) + 0.3


def test_invalid_mix():
    with pytest.raises(ValueError, match="relation_mix"):
        make_synthetic_graph(100, relation_mix={"friendship": 1.0})


def test_bridge_graph_gold_only_through_negative_cosine_bridge():
    g, queries, gold = make_bridge_graph(num_queries=6, num_decoys=3, num_filler=40, dim=32, seed=2)
    assert len(queries) == len(gold) == 6
    src, dst = g.edge_index
    for q, t in zip(queries, gold):
        into = (dst == t).nonzero().flatten()
        assert into.numel() == 1  # the bridge is the only way in
        bridge = int(src[into[0]])
        cos = torch.nn.functional.normalize(g.embeddings, dim=1) @ torch.nn.functional.normalize(q.embedding, dim=0)
        assert float(cos[bridge]) < -0.3 and abs(float(cos[t])) < 0.1
        assert g.relations[int(g.edge_type[into[0]])] == "causal"
        entry = int(cos.argmax())
        assert ((src == entry) & (dst == bridge)).any()  # entry -> bridge -> gold
        # gold never appears in what a policy can read
        assert not any("gold" in str(v) for v in g.metadata[t].values()) and "gold" not in g.texts[t]
    assert all(not m for m in g.metadata) and "gold" not in str(g.info)


def test_bridge_graph_defeats_cosine_retrieval():
    g, queries, gold = make_bridge_graph(seed=0)
    hits = [t in r.loaded for t, r in zip(gold, make_policy("dense_topk").retrieve_batch(g, queries, Budget()))]
    assert sum(hits) == 0
