"""The GNN reader on what its layers read around the walk, against the full-graph pass, and its per-query work."""

import math
import sys
from pathlib import Path

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.index.lexical_features import dense_features, lexical_inputs, pair_features
from graphmem.policies.batched import pad_rows
from graphmem.policies.gnn import BallScores, GNNPolicy, batched_walk
from graphmem.policies.subgraph import layered_subgraphs, relational_rows
from models.gnn_reader import GNNReader, ball_scores

sys.path.insert(0, str(Path(__file__).parent))
from test_gnn_reader import random_graph, retrieval_fields  # noqa: E402


def queries_near(graph, num, seed):
    """Queries near random nodes, their text naming the node's number (random_graph's texts are
    "memory <i> word word ...", so the lexical features single out nodes)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, graph.num_nodes, (num,), generator=gen)
    emb = graph.embeddings[rows] + 0.3 * torch.randn(num, graph.dim, generator=gen)
    return [Query(f"q{i}", f"Which memory has word {int(rows[i])}?", emb[i]) for i in range(num)]


def lexical_reader(reader: GNNReader) -> GNNReader:
    """``reader`` with its lexical weight λ randomised (it starts at 0), so φ moves the scores directly too."""
    with torch.no_grad():
        reader.lexical_weight.copy_(
            torch.randn(reader.lexical_weight.shape, generator=torch.Generator().manual_seed(5))
        )
    return reader


def looped_graph(n, seed, extra_edges):
    """:func:`random_graph` with self-loops and a repeated edge added (each edge has a typed inverse)."""
    g = random_graph(n=n, seed=seed, extra_edges=extra_edges)
    g.add_edges(torch.tensor([3, 3, 5, 0, 0]), torch.tensor([3, 3, 5, 1, 1]), torch.tensor([0, 2, 1, 3, 3]))
    return g


@pytest.mark.parametrize("inverse", [True, False])
@pytest.mark.parametrize("incoming", [True, False])
def test_relational_rows_are_the_edges_and_their_inverses_at_each_node(incoming, inverse):
    g = looped_graph(40, seed=1, extra_edges=120)
    src, dst = g.edge_index
    ids = torch.arange(g.num_edges)
    rel_src, rel_dst = torch.cat([src, dst]), torch.cat([dst, src])  # every edge, then every inverse
    rel_edge, rel_flip = torch.cat([ids, ids]), torch.cat([torch.zeros_like(ids), torch.ones_like(ids)]).bool()
    if not inverse:
        rel_src, rel_dst, rel_edge, rel_flip = src, dst, ids, torch.zeros_like(ids).bool()
    nodes = torch.tensor([3, 0, 5, 17, 3])
    seg, other, edge, flipped = relational_rows(g, nodes, incoming=incoming, inverse=inverse)
    at, far = (rel_dst, rel_src) if incoming else (rel_src, rel_dst)
    for k, v in enumerate(nodes.tolist()):
        mine = seg == k
        got = sorted(zip(other[mine].tolist(), edge[mine].tolist(), flipped[mine].tolist()))
        want = sorted(zip(far[at == v].tolist(), rel_edge[at == v].tolist(), rel_flip[at == v].tolist()))
        assert got == want and (v != 3 or len(got) >= 4)  # node 3 has two loops: each and its inverse


# with lexical features (read at the readout only, whatever the depth), one to three layers, with and
# without inverse edges, on a graph with self-loops and a repeated edge
@pytest.mark.parametrize(
    "layers,lexical,inverse",
    [(1, False, True), (2, False, True), (3, False, True), (2, False, False), (1, True, True), (2, True, True)],
)
def test_targets_have_their_full_graph_scores(layers, lexical, inverse):
    torch.manual_seed(layers)
    g = looped_graph(300, seed=layers, extra_edges=450)
    reader = GNNReader(input_dim=8, hidden_dim=6, num_layers=layers, lexical=lexical, add_inverse=inverse).eval()
    q = torch.randn(4, 8)
    entries = [[0, 5], [7], [11, 3, 40], [99]]
    lex = lexical_inputs([g], [[f"memory {v} word" for v in (5, 7, 40, 99)]]) if lexical else None
    phi_full = None
    if lexical:  # the full pass reads the same per-pair features as the parts (so the reader alone is compared)
        lexical_reader(reader)
        every = torch.arange(4).repeat_interleave(g.num_nodes), torch.arange(g.num_nodes).repeat(4)
        phi_full = pair_features(lex, *every).view(4, g.num_nodes, -1)
        assert torch.allclose(phi_full, dense_features(lex), atol=1e-6) and bool((phi_full > 0).any())
    full = reader.score_graph(g, q, entries, lexical=phi_full).detach()
    gen = torch.Generator().manual_seed(0)
    near = [torch.tensor([3, 1]) if b == 2 else torch.tensor(row) + 1 for b, row in enumerate(entries)]
    target = torch.cat([torch.cat([torch.randint(0, g.num_nodes, (3,), generator=gen), t]) for t in near])
    query = torch.cat([torch.full((3 + t.numel(),), b) for b, t in enumerate(near)])
    seeds = torch.tensor(sorted({b * g.num_nodes + v for b, row in enumerate(entries) for v in row}))
    sub = layered_subgraphs(g, query, target, seeds, layers, inverse)
    phi = None if lex is None else pair_features(lex, query, target)  # each target's query and node
    with torch.no_grad():
        inputs = g.embeddings, g.edge_type, g.edge_attr
        got = ball_scores(reader, *inputs, q, sub, phi)
        assert float((got - full[query, target]).abs().max()) < 1e-5
        read = sum(e.numel() for _, e, _ in sub.layers)
        assert read < 0.5 * layers * g.num_edges  # a real restriction of the graph
        # the mean over the whole in-degree is needed: over the part's own edges only, some score moves
        own = torch.bincount(torch.cat([ei[1] for ei, _, _ in sub.layers]), minlength=sub.node.numel())
        moved = ball_scores(reader, *inputs, q, sub._replace(degree=own.clamp(min=1)), phi)
        assert float((moved - full[query, target]).abs().max()) > 1e-3
    with pytest.raises(ValueError, match="layers"):
        ball_scores(reader, *inputs, q, sub._replace(layers=sub.layers[1:]), phi)


@pytest.mark.parametrize(
    "budget",
    [Budget(), Budget(top_k_neighbors=3, max_hops=3, max_nodes=20), Budget(max_hops=0), Budget(top_k_neighbors=0)],
)
@pytest.mark.parametrize("layers,lexical", [(1, False), (2, False), (1, True), (2, True)])
def test_ball_policy_loads_what_the_full_pass_loads(budget, layers, lexical):
    torch.manual_seed(0)
    g = random_graph(n=200, seed=4, extra_edges=700)
    reader = GNNReader(input_dim=8, hidden_dim=5, num_layers=layers, lexical=lexical)
    if lexical:
        lexical_reader(reader)
    queries = queries_near(g, 12, seed=1)
    ball = GNNPolicy(reader=reader, method="ball").retrieve_batch(g, queries, budget)
    full = GNNPolicy(reader=reader, method="full").retrieve_batch(g, queries, budget)
    rows = [r.entries for r in full]
    walks = [  # on the parts only, and from shared full-graph passes (12 queries, 5 to a pass)
        batched_walk(g, rows, BallScores(reader, g, queries, rows, "cpu", full_share=share, chunk=5), budget)
        .result(pad_rows(rows))
        .split()
        for share in (math.inf, 0.0)
    ]
    for a, b, c, d in zip(ball, full, *walks):
        assert {**retrieval_fields(a), "scores": None} == {**retrieval_fields(b), "scores": None}
        for walk in (c, d):
            assert {**retrieval_fields(walk), "scores": None, "wall_time_s": None} == {
                **retrieval_fields(b),
                "scores": None,
                "wall_time_s": None,
            }
            assert walk.scores == pytest.approx(b.scores, abs=1e-5)
        assert a.scores == pytest.approx(b.scores, abs=1e-5)
    if budget.max_hops and budget.top_k_neighbors:
        assert any(len(r.loaded) > len(r.entries) for r in full)


def test_ball_work_per_query_does_not_grow_with_the_graph():
    """Edges read by the ball reader for one batch of queries on graphs of 10^4 and 10^5 nodes
    (same degree): about the same, and a vanishing share of the graph."""
    budget = Budget()
    read = []
    for n in (10_000, 100_000):
        g = make_synthetic_graph(n, avg_degree=6.0, dim=8, seed=0)
        reader = GNNReader(input_dim=8, hidden_dim=4, num_relations=len(g.relations))
        policy = GNNPolicy(reader=reader)
        edges = []
        import graphmem.policies.gnn as gnn_module

        original = gnn_module.layered_subgraphs

        def counting(*args, **kwargs):
            sub = original(*args, **kwargs)
            edges.append(sum(e.numel() for _, e, _ in sub.layers))
            return sub

        gnn_module.layered_subgraphs = counting
        try:
            policy.retrieve_batch(g, queries_near(g, 8, seed=2), budget)
        finally:
            gnn_module.layered_subgraphs = original
        read.append(sum(edges))
        assert sum(edges) < 0.2 * g.num_edges or n == 10_000
    assert read[1] <= 1.5 * read[0]


@pytest.mark.parametrize("lexical", [False, True])
def test_training_scores_candidates_as_the_full_pass_does(lexical):
    """The layered parts and the shared full-graph pass give the candidates the same scores and the
    same loss (with the lexical features too); the candidates are the nodes within max_hops out-edge
    hops of the entries."""
    from rl.gnn.train import GNNTrainConfig, ReaderExample, candidate_loss, candidate_scores

    torch.manual_seed(3)
    g = random_graph(n=400, seed=7, extra_edges=500)
    reader = GNNReader(input_dim=8, hidden_dim=5, num_layers=2, lexical=lexical)
    if lexical:
        lexical_reader(reader)
    entries = [[0, 9], [31], [77, 5, 200]]
    terms = lexical_inputs([g], [["memory 1 and 2", "memory 3", "memory 4 or 5"]]) if lexical else None
    phi = None if terms is None else dense_features(terms)
    ex = ReaderExample(g, torch.randn(3, 8), entries, [[1, 2], [3], [4, 5]], lexical=phi, terms=terms)
    budget = Budget(max_entries=3, max_hops=2)
    rows = [0, 1, 2]
    q1, n1, sub_scores = candidate_scores(reader, ex, rows, budget, "cpu", max_share=float("inf"))
    q2, n2, full_scores = candidate_scores(reader, ex, rows, budget, "cpu", max_share=0.0)
    assert torch.equal(q1, q2) and torch.equal(n1, n2)
    assert torch.allclose(sub_scores, full_scores, atol=1e-5)
    assert n1.numel() < 3 * g.num_nodes
    out = {int(v) for v in g.edge_index[1, g.edge_index[0] == 31]}
    assert out <= set(n1[q1 == 1].tolist())  # one hop out of the entry
    cfg = GNNTrainConfig()
    loss_sub = candidate_loss(cfg, q1, n1, sub_scores, ex, rows)
    loss_full = candidate_loss(cfg, q2, n2, full_scores, ex, rows)
    assert torch.allclose(loss_sub, loss_full, atol=1e-5) and bool(torch.isfinite(loss_sub))
    loss_sub.backward()
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in reader.parameters())


def test_neighbourhood_recall_reads_the_lexical_features_as_the_full_pass():
    """The reader's validation recall scored on neighbourhoods (each example's lexical inputs, `terms`)
    equals the full-graph one; without the inputs a lexical reader is refused, not scored without them."""
    from rl.gnn.train import ReaderExample, evidence_recall

    g = random_graph(n=300, seed=9, extra_edges=600)
    reader = lexical_reader(GNNReader(input_dim=8, hidden_dim=5, num_layers=2, lexical=True))
    queries = queries_near(g, 10, seed=3)
    terms = lexical_inputs([g], [[q.text for q in queries]])
    gen = torch.Generator().manual_seed(2)
    src = g.edge_index[0].unique()  # entries with out-edges, gold one hop out of the first and one anywhere
    entries = src[torch.randint(0, src.numel(), (10, 3), generator=gen)].tolist()
    gold = [[int(g.edge_index[1, g.edge_index[0] == row[0]][0]), 7 * b] for b, row in enumerate(entries)]
    emb = torch.stack([q.embedding for q in queries])
    ex = ReaderExample(g, emb, entries, gold, lexical=dense_features(terms), terms=terms)
    budget = Budget(max_entries=3, top_k_neighbors=2, max_hops=2, max_nodes=10)
    full = evidence_recall(reader, [ex], budget)
    assert evidence_recall(reader, [ex], budget, neighbourhood=True) == full and full > 0
    with pytest.raises(ValueError, match="terms"):
        evidence_recall(reader, [ReaderExample(g, emb, entries, gold, lexical=ex.lexical)], budget, neighbourhood=True)
