"""GNN reader: exact message passing on a 4-node toy graph, batching, the ``gnn`` policy's budget,
and a short supervised training run on a synthetic bridge task."""

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.policies.batched import pad_rows
from graphmem.policies.gnn import GNNPolicy, batched_walk
from graphmem.policies.selectors import EmbeddingEntrySelector
from models.gnn_reader import GatedRelationalConv, GNNReader, ReaderConfig, start_mask
from rl.common.splits import conversation_folds
from rl.gnn.train import GNNTrainConfig, ReaderExample, evidence_recall, graph_split, save_checkpoint, train_reader

sys.path.insert(0, str(Path(__file__).parent))
from policy_references import REFERENCES, walk_and_load  # noqa: E402


def toy_conv():
    conv = GatedRelationalConv(hidden_dim=2, num_relations=2, edge_dim=4)
    with torch.no_grad():
        conv.relation.copy_(torch.tensor([[1.0, 1.0], [2.0, 0.5]]))
        conv.gate_bias.zero_()
        conv.gate_edge.weight.zero_()
        conv.gate_edge.weight[:, 0] = math.log(3.0)  # feature 0 = 1 -> gate sigmoid(ln 3) = 0.75
        conv.lin_msg.weight.copy_(torch.eye(2))
        conv.lin_self.weight.copy_(0.5 * torch.eye(2))
        conv.lin_self.bias.copy_(torch.tensor([0.0, -0.5]))
    edge_index = torch.tensor([[0, 1, 2], [2, 2, 3]])
    edge_type = torch.tensor([0, 1, 1])
    edge_attr = torch.tensor([[1.0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    return conv, edge_index, edge_type, edge_attr


def test_conv_matches_hand_computation():
    conv, ei, et, ea = toy_conv()
    h = torch.tensor([[1.0, 2.0], [0.0, 1.0], [1.0, 0.0], [3.0, 3.0]]).T.unsqueeze(2)  # [H=2, N=4, B=1]
    out = conv(h, ei, et, ea)
    # messages: 0->2: 0.75*[1,1]*[1,2] = [.75,1.5]; 1->2: 0.5*[2,.5]*[0,1] = [0,.25]; 2->3: 0.5*[2,.5]*[1,0] = [1,0]
    # mean at 2: [.375,.875]; at 3: [1,0]; nodes 0 and 1 receive nothing.
    # h' = h + relu(mbar + 0.5 h + [0,-.5])
    expected = torch.tensor([[1.5, 2.5], [0.0, 1.0], [1.875, 0.375], [5.5, 4.0]]).T.unsqueeze(2)
    assert out.shape == (2, 4, 1)
    assert torch.allclose(out, expected, atol=1e-6)
    # the result does not depend on the order in which edges are stored
    perm = torch.tensor([2, 0, 1])
    assert torch.allclose(conv(h, ei[:, perm], et[perm], ea[perm]), expected, atol=1e-6)


def test_conv_batched_over_queries_equals_per_query():
    conv, ei, et, ea = toy_conv()
    h = torch.randn(2, 4, 3)  # [H, N, B]
    batched = conv(h, ei, et, ea)
    single = torch.cat([conv(h[:, :, b : b + 1], ei, et, ea) for b in range(3)], dim=2)
    assert torch.allclose(batched, single, atol=1e-6)


def test_fused_aggregation_equals_per_edge_messages():
    """``message_and_aggregate`` (what runs) against PyG's ``message`` + ``aggregate``, outputs and gradients."""
    torch.manual_seed(3)
    conv = GatedRelationalConv(hidden_dim=5, num_relations=3, edge_dim=4)
    n, e = 9, 30
    edge_index = torch.randint(0, n, (2, e))
    edge_index[1, :3] = 0  # a target with several in-edges; some have none
    edge_type, edge_attr = torch.randint(0, 3, (e,)), torch.rand(e, 4)
    h = torch.randn(5, n, 4, requires_grad=True)  # [H, N, B]
    outputs, grads = [], []
    for fuse in (True, False):
        conv.fuse = fuse
        out = conv(h, edge_index, edge_type, edge_attr)
        outputs.append(out)
        grads.append(
            torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), [h, *conv.parameters()])
        )
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6)
    for fused, plain in zip(*grads):
        assert torch.allclose(fused, plain, atol=1e-5)
    conv.fuse = True
    no_edges = conv(h, edge_index[:, :0], edge_type[:0], edge_attr[:0])
    assert torch.allclose(no_edges, h + torch.relu(conv.lin_self(h.permute(1, 2, 0))).permute(2, 0, 1))


def test_seed_is_start_mask_times_projected_query():
    torch.manual_seed(0)
    reader = GNNReader(input_dim=3, hidden_dim=2, num_relations=2, num_layers=1)
    q = torch.randn(2, 3)
    start = start_mask([[0, 2], [3]], 4)
    h0 = reader.seed(q, start)  # [H, N, B]
    proj = reader.query_proj(q)
    assert h0.shape == (2, 4, 2)
    assert (
        torch.allclose(h0[:, 0, 0], proj[0])
        and torch.allclose(h0[:, 2, 0], proj[0])
        and torch.allclose(h0[:, 3, 1], proj[1])
    )
    assert h0[:, 1].abs().sum() == 0 and h0[:, 3, 0].abs().sum() == 0


def random_graph(n=12, dim=8, seed=0, extra_edges=30):
    gen = torch.Generator().manual_seed(seed)
    g = MemoryGraph.empty(dim)
    emb = torch.nn.functional.normalize(torch.randn(n, dim, generator=gen), dim=1)
    g.add_nodes(
        [f"n{i}" for i in range(n)],
        [f"memory {i} " + "word " * int(torch.randint(1, 30, (1,), generator=gen)) for i in range(n)],
        emb,
    )
    src = torch.randint(0, n, (extra_edges,), generator=gen)
    dst = (src + torch.randint(1, n, (extra_edges,), generator=gen)) % n
    g.add_edges(src, dst, torch.randint(0, 4, (extra_edges,), generator=gen))
    return g


def test_reader_batched_equals_per_query():
    torch.manual_seed(1)
    g = random_graph()
    reader = GNNReader(input_dim=8, hidden_dim=6, num_layers=3)
    q = torch.randn(5, 8)
    entries = [[0, 1], [2], [3, 4, 5], [6], [7, 0]]
    batched = reader.score_graph(g, q, entries)
    single = torch.cat([reader.score_graph(g, q[b : b + 1], entries[b : b + 1]) for b in range(5)])
    assert batched.shape == (5, 12)
    assert torch.allclose(batched, single, atol=1e-5)


@pytest.mark.parametrize(
    "budget",
    [
        Budget(),
        Budget(max_entries=2, top_k_neighbors=1, max_hops=2, max_nodes=4, max_tokens=40),
        Budget(max_entries=1, top_k_neighbors=0, max_hops=0, max_nodes=3),
    ],
)
def test_gnn_policy_honours_budget(budget, tmp_path):
    torch.manual_seed(2)
    g = random_graph(n=20, extra_edges=60)
    reader = GNNReader(input_dim=8, hidden_dim=4)
    path = save_checkpoint(reader, tmp_path / "reader.pt")
    policy = GNNPolicy(checkpoint=path)  # default EmbeddingEntrySelector
    queries = [Query(f"q{i}", "text", torch.randn(8)) for i in range(6)]
    results = policy.retrieve_batch(g, queries, budget)
    tokens = node_tokens(g)
    for r, q in zip(results, queries):
        assert len(r.entries) <= budget.max_entries
        assert len(r.loaded) <= budget.max_nodes and len(set(r.loaded)) == len(r.loaded)
        assert r.loaded_tokens == int(tokens[r.loaded].sum()) <= budget.max_tokens
        assert r.max_depth <= budget.max_hops
        # every non-entry node was reached through a traversed edge from a reached node
        reached = set(r.entries) | {int(g.edge_index[1, e]) for e in r.edges_traversed}
        assert set(r.loaded) <= reached
        for e in r.edges_traversed:
            assert int(g.edge_index[1, e]) in r.loaded
        assert r.scores == sorted(r.scores, reverse=True)
        assert r.entries == EmbeddingEntrySelector().select(g, [q], budget)[0]
        single = REFERENCES["gnn"](policy, g, q, budget)
        assert {**retrieval_fields(single), "scores": None} == {**retrieval_fields(r), "scores": None}
        assert single.scores == pytest.approx(r.scores, abs=1e-5)


def bridge_task(num_graphs, seed, n=14, dim=16):
    """Query ~ a target node t; gold = {t, c(t)} where c(t) is t's 'causal' neighbor; t also has
    two 'semantic' distractor neighbors that are more similar to the query than c(t)."""
    gen = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(num_graphs):
        g = MemoryGraph.empty(dim)
        emb = torch.nn.functional.normalize(torch.randn(n, dim, generator=gen), dim=1)
        g.add_nodes([f"n{i}" for i in range(n)], [f"m{i}" for i in range(n)], emb)
        queries, gold = [], []
        for t in range(0, n - 3, 4):
            cause, d1, d2 = t + 1, t + 2, t + 3
            g.add_edges([t, t], [d1, d2], "semantic")
            g.add_edges([t], [cause], "causal")
            emb2 = g.embeddings.clone()
            emb2[d1] = torch.nn.functional.normalize(emb[t] + 0.8 * emb[d1], dim=0)
            emb2[d2] = torch.nn.functional.normalize(emb[t] + 0.8 * emb[d2], dim=0)
            g.embeddings = emb2
            queries.append(emb[t] + 0.05 * torch.randn(dim, generator=gen))
            gold.append([t, cause])
        q = torch.stack(queries)
        entries = [[t] for t, _ in gold]
        examples.append(ReaderExample(g, q, entries, gold))
    return examples


def test_supervised_training_raises_recall():
    budget = Budget(max_entries=1, top_k_neighbors=3, max_hops=1, max_nodes=2)
    train, val = bridge_task(6, seed=0), bridge_task(3, seed=1)
    cfg = GNNTrainConfig(hidden_dim=16, num_layers=1, epochs=40, lr=1e-2, seed=0, lexical=False)
    torch.manual_seed(cfg.seed)
    untrained = GNNReader(input_dim=16, hidden_dim=16, num_layers=1)
    before = evidence_recall(untrained, val, budget)
    reader, history = train_reader(train, cfg, budget, val=val)
    after = evidence_recall(reader, val, budget)
    assert after >= 0.95 and after >= before + 0.2, (before, after)
    assert history[-1]["loss"] < history[0]["loss"]
    # same seed, same reader
    again, _ = train_reader(train, GNNTrainConfig(**{**cfg.__dict__, "epochs": 3}), budget)
    again2, _ = train_reader(train, GNNTrainConfig(**{**cfg.__dict__, "epochs": 3}), budget)
    for (k, a), (_, b) in zip(again.state_dict().items(), again2.state_dict().items()):
        assert torch.equal(a, b), k


def test_trained_reader_takes_its_shape_from_the_train_config():
    """The trainer's ``hidden_dim``/``num_layers``/``add_inverse`` are the reader's (one declaration,
    :class:`ReaderShape`); each keeps its own ``lexical`` default (reader off, trainer on)."""
    assert ReaderConfig().lexical is False and GNNTrainConfig().lexical is True
    assert (
        GNNTrainConfig().shape() == ReaderConfig().shape() == {"hidden_dim": 32, "num_layers": 2, "add_inverse": True}
    )
    cfg = GNNTrainConfig(hidden_dim=8, num_layers=3, add_inverse=False, epochs=1, lexical=False)
    reader, _ = train_reader(
        bridge_task(2, seed=0), cfg, Budget(max_entries=1, top_k_neighbors=3, max_hops=1, max_nodes=2)
    )
    assert reader.config.shape() == {"hidden_dim": 8, "num_layers": 3, "add_inverse": False}
    assert reader.config.input_dim == 16 and reader.config.lexical is False


def scattered_graph(n: int, e: int, seed: int) -> MemoryGraph:
    """Random edges, plus self-loops and parallel edges of a second relation (the walk must skip
    the former and reach a node through the smallest id of the latter)."""
    gen = torch.Generator().manual_seed(seed)
    g = MemoryGraph.empty(4)
    texts = [" ".join(["w"] * int(k)) for k in torch.randint(1, 40, (n,), generator=gen)]
    g.add_nodes([f"n{(7 * i) % n:03d}" for i in range(n)], texts, torch.randn(n, 4, generator=gen))
    src, dst = torch.randint(0, n, (e,), generator=gen), torch.randint(0, n, (e,), generator=gen)
    keep = src != dst
    g.add_edges(src[keep].tolist(), dst[keep].tolist(), "semantic")
    g.add_edges(list(range(0, n, 5)), list(range(0, n, 5)), "semantic")
    g.add_edges(src[keep][::4].tolist(), dst[keep][::4].tolist(), "causal")
    return g


def retrieval_fields(r) -> dict:
    return {k: v for k, v in dataclasses.asdict(r).items() if k != "wall_time_s"}


@pytest.mark.parametrize(
    "budget",
    [
        Budget(),
        Budget(max_tokens=60),
        Budget(top_k_neighbors=3, max_hops=3, max_nodes=20),
        Budget(top_k_neighbors=0),
        Budget(max_hops=0),
        Budget(max_nodes=1),
        Budget(max_entries=2, max_hops=1, max_nodes=3),
    ],
)
def test_batched_walk_equals_per_query_walk(budget):
    g = scattered_graph(40, 160, seed=1)
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(10, g.num_nodes, generator=gen).round(decimals=1)  # rounded: ties broken by node id
    scores[8, ::3] = -math.inf
    entries = [torch.randperm(g.num_nodes, generator=gen)[:k].tolist() for k in (1, 2, 3, 6, 6, 4, 0, 5, 6, 3)]
    entries[9] = [entries[9][0], entries[9][1], entries[9][0]]  # a repeated entry
    entries = [e[: budget.max_entries] for e in entries]
    walk = batched_walk(g, entries, scores, budget)
    batched = walk.result(pad_rows(entries)).split()
    expected = [walk_and_load(g, entries[b], scores[b], budget) for b in range(len(entries))]
    for b, (got, want) in enumerate(zip(batched, expected)):
        assert retrieval_fields(got) == retrieval_fields(want), b
        assert walk.loaded_mask()[b].nonzero().flatten().tolist() == sorted(want.loaded)
    if budget.max_tokens == 60:  # some query skips a node that does not fit, then loads a later one
        skipped = walk.ranked.lt(g.num_nodes) & ~walk.taken
        assert (skipped & walk.taken.flip(1).cummax(1).values.flip(1)).any()


def test_batched_walk_without_edges_or_nodes():
    empty, edgeless = MemoryGraph.empty(4), MemoryGraph.empty(4)
    edgeless.add_nodes(["a", "b", "c"], ["x", "y y", "z"], torch.randn(3, 4))
    for g, scores, entries in [
        (empty, torch.empty(2, 0), [[], []]),
        (edgeless, torch.tensor([[0.1, 0.3, 0.2], [1.0, 0.0, 0.0]]), [[2, 0], []]),
    ]:
        batched = batched_walk(g, entries, scores, Budget()).result(pad_rows(entries)).split()
        expected = [walk_and_load(g, e, s, Budget()) for e, s in zip(entries, scores)]
        assert [retrieval_fields(r) for r in batched] == [retrieval_fields(r) for r in expected]


def test_graph_split_is_a_conversation_fold():
    names = [f"g{i}" for i in range(10)]
    parts = graph_split(names, k=5, fold=1, seed=3, val_fraction=0.2)
    fold = conversation_folds(names, k=5, seed=3, val_fraction=0.2)[1]
    assert parts == {"train": list(fold.train), "val": list(fold.val), "test": list(fold.test)}
    assert not set(parts["train"]) & set(parts["test"]) and not set(parts["val"]) & set(parts["test"])


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    from graphmem.policies.gnn import GNNPolicy
    from graphmem.store.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match=r"policy.checkpoint='.*no-reader.pt': no such checkpoint file"):
        GNNPolicy(checkpoint=tmp_path / "no-reader.pt")
