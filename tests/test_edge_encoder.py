"""Inductive edge features (models/edge_encoder.py): the pair table on a toy graph, and features
of a graph never trained on that move with training (unlike HAGE's per-edge table)."""

from __future__ import annotations

import math

import torch

from graphmem.builders.synthetic import make_bridge_graph
from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph
from graphmem.policies.walk import walk
from models.edge_encoder import EdgeEncoder, build_pair_table, pair_table
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.walk.objectives import imitation_loss
from tests.test_walk_objectives import bridge_part


def toy() -> MemoryGraph:
    g = MemoryGraph.empty(2)
    g.add_nodes(
        ["a", "b", "c"],
        ["alice: hi there", "bob: hello", "alice: long " * 10],
        torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]),
        timestamps=[0.0, 60.0, math.nan],
        metadata=[
            {"speaker": "alice", "session": 1, "position": 0},
            {"speaker": "bob", "session": 1, "position": 3},
            {"speaker": "alice", "session": 2, "position": 0},
        ],
    )
    g.add_edges([0, 1], [1, 0], "temporal", features=torch.tensor([[1.0, 0.5, 0.0, 0.0], [1.0, 0.5, 0.0, 0.0]]))
    g.add_edges([0, 0, 2], [1, 2, 2], "semantic", features=torch.tensor([[0.0, 0.9, 0.0, 0.0]] * 3))
    return g


def test_pair_table_of_a_toy_graph():
    t = build_pair_table(toy())
    # pairs in CSR order (a->b, a->c, b->a); the self loop c->c is dropped; a->b has two edges
    assert list(zip(t.src.tolist(), t.dst.tolist())) == [(0, 1), (0, 2), (1, 0)]
    assert t.rowptr.tolist() == [0, 2, 3, 3]
    assert t.edge.tolist() == [0, 3, 1]
    assert t.edge_pair.tolist() == [0, 2, 0, 1, -1]
    assert t.onehot.tolist() == [[1, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]]
    assert torch.allclose(t.phase1[0], torch.tensor([1.0, 0.9, 0.0, 0.0]))  # max over the parallel edges
    raw = t.raw
    assert raw[0, 8] == 0.5  # 2 parallel edges / 4 relations
    assert torch.isclose(raw[0, 9], torch.tensor(math.log1p(60.0) / 10))  # one minute apart
    assert raw[0, 10] == 1 and raw[0, 11] == 1  # time known, b after a
    assert raw[1, 10] == 0 and raw[1, 9] == 0 and raw[1, 11] == 0  # c has no timestamp
    assert raw[0, 12] == 1 and raw[0, 13] == 1  # alice -> bob: speaker change
    assert raw[1, 12] == 0 and raw[1, 13] == 1  # alice -> alice
    third = math.log1p(3) / 3
    assert torch.allclose(raw[0, 14:19], torch.tensor([1, 1, third, third, 1]))  # a -> b: 3 turns later
    assert torch.allclose(raw[2, 14:19], torch.tensor([1, -1, third, 0, 1]))  # b -> a
    assert torch.allclose(raw[1, 14:19], torch.tensor([0, 0, 0, 0, 1.0]))  # a -> c: another session
    assert torch.isclose(raw[0, 19], torch.tensor(math.log1p(2) / 4))  # a has 2 out-pairs


def test_static_modes_and_the_anchor_start():
    t = pair_table(toy())
    pairs = torch.arange(t.num_pairs)
    e, e0 = EdgeEncoder(2, "onehot")(t, pairs)
    assert torch.equal(e, t.onehot)
    e, e0 = EdgeEncoder(2, "phase1")(t, pairs)
    assert torch.equal(e, e0) and torch.equal(e0, t.phase1)
    enc = EdgeEncoder(2, "inductive", rank=2)
    e, e0 = enc(t, pairs, enc.node_projection(torch.nn.functional.normalize(toy().embeddings, dim=1)))
    assert torch.equal(e, e0)  # zero-initialised last layer: starts at the Phase-1 values


BUDGET = Budget(max_entries=1, top_k_neighbors=2, max_hops=2, max_nodes=3)


def edge_values(scorer: WalkScorer, tables, q):
    ctx = scorer.prepare(tables, q, torch.zeros(len(q), 1, dtype=torch.long))
    pairs = torch.arange(tables.pairs.num_pairs)
    return scorer.edges(tables.pairs, pairs, ctx.px, ctx.delta)[0].detach()


def train_briefly(scorer: WalkScorer, tables, q, entries, gold, steps: int = 30) -> None:
    opt = torch.optim.Adam(scorer.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(steps):
        ctx = scorer.prepare(tables, q, entries)
        ep = walk(tables, scorer, q, entries, BUDGET, sample=True, temperature=0.1, generator=gen, ctx=ctx)
        loss, _ = imitation_loss(scorer, ctx, ep, gold, tables, BUDGET, 0.1)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_features_of_an_unseen_graph_change_with_training():
    torch.manual_seed(0)
    train, unseen = bridge_part(0), bridge_part(1)
    scorer = WalkScorer(ScorerConfig(dim=32, rank=4, edge_mode="inductive", lexical=False))
    before = edge_values(scorer, unseen[0], unseen[1])
    assert torch.equal(before, unseen[0].pairs.phase1)
    train_briefly(scorer, *train)
    after = edge_values(scorer, unseen[0], unseen[1])
    assert (after - before).abs().max() > 1e-3  # the encoder's features reach a graph it never saw


def test_per_edge_table_does_not_reach_an_unseen_graph():
    torch.manual_seed(0)
    train, unseen = bridge_part(0), bridge_part(1)
    graph0, _, _ = make_bridge_graph(num_queries=8, seed=0, dim=32)
    scorer = WalkScorer(ScorerConfig(dim=32, rank=4, edge_mode="table", lexical=False), residual_graphs={"g0": graph0})
    train[0].edge_rows = scorer.edges.residual.edge_rows(["g0"], [graph0.num_edges])
    train_briefly(scorer, *train)
    assert scorer.edges.residual.delta.abs().max() > 1e-3  # the table did learn on its own graph
    after = edge_values(scorer, unseen[0], unseen[1])  # unseen[0].edge_rows is None: no rows there
    assert torch.equal(after, unseen[0].pairs.phase1)
