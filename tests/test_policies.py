"""All heuristic policies: batched == per-query, determinism, budgets, entry selection, configs."""

import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch
import yaml

from graphmem.graph import MemoryGraph
from graphmem.policies import ENTRY_SELECTORS, POLICIES, Budget, Query, make_entry_selector, make_policy
from graphmem.policies.beta_bfs import BetaBFSConfig
from graphmem.policies.dense_topk import DenseTopKConfig
from graphmem.policies.entries import EmbeddingEntrySelector, EntrySelector, validate_entries
from graphmem.policies.ppr import PPRConfig
from graphmem.policies.uniform_bfs import UniformBFS, UniformBFSConfig
from graphmem.synthetic import make_synthetic_graph

sys.path.insert(0, str(Path(__file__).parent))
from varied_graphs import varied_posterior_graph  # noqa: E402

NAMES = ["beta_bfs", "dense_topk", "ppr", "uniform_bfs"]
CONFIGS = {"beta_bfs": BetaBFSConfig, "dense_topk": DenseTopKConfig, "ppr": PPRConfig, "uniform_bfs": UniformBFSConfig}
ROOT = Path(__file__).resolve().parents[1]
BUDGETS = [
    Budget(),
    Budget(max_entries=2, top_k_neighbors=3, max_hops=3, max_nodes=20, max_tokens=400),
    Budget(max_entries=1, top_k_neighbors=0, max_hops=0, max_nodes=5, max_tokens=60),
]


@pytest.fixture(scope="module")
def graph():
    return varied_posterior_graph(400, seed=3)


@pytest.fixture(scope="module")
def queries(graph):
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(0, graph.num_nodes, (10,), generator=gen)
    emb = graph.embeddings[rows] + 0.3 * torch.randn(10, graph.dim, generator=gen)
    return [Query(f"q{i}", f"question {i}", emb[i]) for i in range(10)]


def trace(r):
    return (r.loaded, r.entries, r.edges_considered, r.edges_traversed, r.loaded_tokens, r.max_depth, r.fallback_used)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("budget", BUDGETS, ids=["default", "wide", "tight"])
def test_batched_equals_per_query(graph, queries, name, budget):
    policy = make_policy(name)
    batched = policy.retrieve_batch(graph, queries, budget)
    single = [policy.retrieve(graph, q, budget) for q in queries]
    assert [trace(r) for r in batched] == [trace(r) for r in single]
    reversed_batch = policy.retrieve_batch(graph, queries[::-1], budget)[::-1]
    assert [trace(r) for r in reversed_batch] == [trace(r) for r in batched]


@pytest.mark.parametrize("name", NAMES)
def test_budget_honoured_and_deterministic(graph, queries, name):
    budget = BUDGETS[1]
    first = make_policy(name).retrieve_batch(graph, queries, budget)
    again = make_policy(name).retrieve_batch(graph.copy(), queries, budget)
    assert [trace(r) for r in first] == [trace(r) for r in again]
    tokens = graph.node_tokens()
    for r in first:
        assert 0 < len(r.loaded) <= budget.max_nodes and len(set(r.loaded)) == len(r.loaded)
        assert r.loaded_tokens == int(tokens[r.loaded].sum()) <= budget.max_tokens
        assert len(r.entries) <= budget.max_entries and r.max_depth <= budget.max_hops
        assert r.fallback_used is False and r.wall_time_s >= 0
        assert all(0 <= e < graph.num_edges for e in r.edges_considered + r.edges_traversed)


@pytest.mark.parametrize("name", NAMES)
def test_empty_graph_and_empty_batch(name):
    policy = make_policy(name)
    q = Query("q", "x", torch.ones(8))
    assert policy.retrieve_batch(MemoryGraph.empty(8), [q], Budget())[0].loaded == []
    assert policy.retrieve_batch(MemoryGraph.empty(8), [], Budget()) == []


def test_embedding_entries_ties_by_node_id_and_one_matmul():
    g = MemoryGraph.empty(2)
    # rows 0..4; ids out of order; rows 1, 2, 4 tie on cosine 1.0
    g.add_nodes(
        ["z", "m", "b", "x", "k"], ["t"] * 5, torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0], [1.0, 1.0], [3.0, 0.0]])
    )
    sel = make_entry_selector("embedding")
    assert isinstance(sel, EntrySelector) and isinstance(sel, EmbeddingEntrySelector)
    qs = [Query("a", "", torch.tensor([1.0, 0.0])), Query("b", "", torch.tensor([0.0, 5.0]))]
    got = sel.select(g, qs, Budget(max_entries=4))
    assert got[0] == [2, 4, 1, 3]  # ids b < k < m among ties, then x (cos .707)
    assert got[1] == [0, 3, 2, 4]  # z, x, then cos-0 ties by id: b, k
    assert sel.select(g, qs, Budget(max_entries=10))[0] == [2, 4, 1, 3, 0]
    with pytest.raises(ValueError, match="embedding has 3 values"):
        sel.select(g, [Query("bad", "", torch.ones(3))], Budget())


def test_entry_selector_registry_and_validation():
    assert "embedding" in ENTRY_SELECTORS
    with pytest.raises(ValueError, match="unknown entry selector"):
        make_entry_selector("nope")
    g = make_synthetic_graph(20, dim=4, seed=0)
    assert validate_entries(g, [3, 3, -1, 99, 5, 7], Budget(max_entries=2)) == [3, 5]


def test_dense_topk_loads_by_cosine_under_tokens():
    g = MemoryGraph.empty(2)
    g.add_nodes(["a", "b", "c"], ["short", "very " * 40, "tiny"], torch.tensor([[1.0, 0.0], [1.0, 0.1], [1.0, 0.5]]))
    r = make_policy("dense_topk").retrieve(g, Query("q", "", torch.tensor([1.0, 0.0])), Budget(max_tokens=20))
    assert r.loaded_ids(g) == ["a", "c"] and r.entries == r.loaded and r.edges_considered == []
    assert r.scores[0] == pytest.approx(1.0)


def test_uniform_bfs_seed_per_query_and_within_neighbors(graph, queries):
    policy = UniformBFS(seed=5)
    a = policy.retrieve_batch(graph, queries, Budget())
    b = UniformBFS(seed=5).retrieve_batch(graph, [queries[3]], Budget())[0]
    assert trace(a[3]) == trace(b)
    other = UniformBFS(seed=6).retrieve_batch(graph, queries, Budget())
    assert [r.loaded for r in other] != [r.loaded for r in a]
    src, dst = graph.edge_index
    for r in a:
        for e in r.edges_traversed:
            assert int(src[e]) in r.loaded and int(dst[e]) in r.loaded


@pytest.mark.parametrize("name", NAMES)
def test_yaml_config_mirrors_dataclass(name):
    cfg = yaml.safe_load((ROOT / "configs" / "policy" / f"{name}.yaml").read_text())
    assert cfg["name"] == name and set(cfg) == {f.name for f in fields(CONFIGS[name])}
    assert {k: v for k, v in vars(CONFIGS[name]()).items()} == cfg
    policy = make_policy(**cfg)
    assert policy.name == name and name in POLICIES


def test_unavailable_or_unknown_device_is_refused_at_construction():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            make_policy("beta_bfs", device="cuda")
    with pytest.raises(RuntimeError):
        make_policy("ppr", device="gpu7")
    assert make_policy("dense_topk", device="auto").device.type in ("cpu", "cuda")


def test_uniform_hash_matches_unsigned_64_bit_arithmetic():
    from graphmem.policies.uniform_bfs import _signed, neighbor_priority

    mask = (1 << 64) - 1

    def splitmix(seed: int, v: int, u: int) -> int:  # the module docstring's formula on Python ints
        x = seed ^ ((v * 0x9E3779B97F4A7C15) & mask) ^ ((u * 0xC2B2AE3D27D4EB4F) & mask)
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return (x ^ (x >> 31)) >> 1

    gen = torch.Generator().manual_seed(3)
    seeds = [int(x) for x in torch.randint(0, 2**62, (200,), generator=gen)] + [mask, 1 << 63, 0]
    v = torch.randint(0, 10**7, (len(seeds),), generator=gen)
    u = torch.randint(0, 10**7, (len(seeds),), generator=gen)
    got = neighbor_priority(torch.tensor([_signed(s) for s in seeds]), v, u).tolist()
    assert got == [splitmix(s, a, b) for s, a, b in zip(seeds, v.tolist(), u.tolist())]
