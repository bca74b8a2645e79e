"""Every registered policy: batched == its per-query reference, determinism, budgets; entry
selection and policy configs.

Policy names come from the registry (:data:`graphmem.policies.POLICIES`), so a new policy is
tested here without editing this file; its reference oracle is registered in ``references.py``
(or next to the policy) with ``@reference(name)``.
"""

import inspect
import sys
from pathlib import Path

import pytest
import torch
import yaml

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.policies import ENTRY_SELECTORS, POLICIES, make_entry_selector, make_policy
from graphmem.policies.selectors import EmbeddingEntrySelector, EntrySelector, validate_entries
from graphmem.policies.uniform_bfs import UniformBFS

sys.path.insert(0, str(Path(__file__).parent))
from policy_references import REFERENCES, make_test_policy  # noqa: E402
from varied_graphs import varied_posterior_graph  # noqa: E402

NAMES = sorted(POLICIES)
ROOT = Path(__file__).resolve().parents[1]
BUDGETS = [
    Budget(),
    Budget(max_entries=2, top_k_neighbors=3, max_hops=3, max_nodes=20, max_tokens=400),
    Budget(max_entries=1, top_k_neighbors=0, max_hops=0, max_nodes=5, max_tokens=60),
]


@pytest.fixture(scope="module")
def graph():
    g = varied_posterior_graph(400, seed=3)
    g.edge_attr = torch.rand(g.num_edges, g.edge_attr.shape[1], generator=torch.Generator().manual_seed(2))
    return g


@pytest.fixture(scope="module")
def queries(graph):
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(0, graph.num_nodes, (10,), generator=gen)
    emb = graph.embeddings[rows] + 0.3 * torch.randn(10, graph.dim, generator=gen)
    return [Query(f"q{i}", f"question {i}", emb[i]) for i in range(10)]


def trace(r):
    return (r.loaded, r.entries, r.edges_considered, r.edges_traversed, r.loaded_tokens, r.max_depth)


def policy(name, graph):
    return make_test_policy(name, graph.dim, len(graph.relations))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("budget", BUDGETS, ids=["default", "wide", "tight"])
def test_batched_equals_per_query_reference(graph, queries, name, budget):
    assert name in REFERENCES, f"policy {name!r} has no reference oracle: register one with @reference({name!r})"
    p = policy(name, graph)
    batched = p.retrieve_batch(graph, queries, budget)
    single = [REFERENCES[name](p, graph, q, budget) for q in queries]
    assert [trace(r) for r in batched] == [trace(r) for r in single]
    for rb, rs in zip(batched, single):
        assert (rb.scores is None) == (rs.scores is None)
        if rs.scores is not None:
            assert rb.scores == pytest.approx(rs.scores, abs=1e-5)
    assert [trace(p.retrieve(graph, q, budget)) for q in queries[:3]] == [trace(r) for r in single[:3]]
    reversed_batch = p.retrieve_batch(graph, queries[::-1], budget)[::-1]
    assert [trace(r) for r in reversed_batch] == [trace(r) for r in batched]
    if budget.max_hops and budget.top_k_neighbors and p.entry_selector is not None:
        assert any(r.max_depth > 0 for r in batched)  # the traversal left the entries


@pytest.mark.parametrize("name", NAMES)
def test_budget_honoured_and_deterministic(graph, queries, name):
    budget = BUDGETS[1]
    first = policy(name, graph).retrieve_batch(graph, queries, budget)
    again = policy(name, graph).retrieve_batch(graph.copy(), queries, budget)
    assert [trace(r) for r in first] == [trace(r) for r in again]
    tokens = node_tokens(graph)
    for r in first:
        assert 0 < len(r.loaded) <= budget.max_nodes and len(set(r.loaded)) == len(r.loaded)
        assert r.loaded_tokens == int(tokens[r.loaded].sum()) <= budget.max_tokens
        assert len(r.entries) <= budget.max_entries and r.max_depth <= budget.max_hops
        assert r.wall_time_s >= 0
        assert all(0 <= e < graph.num_edges for e in r.edges_considered + r.edges_traversed)


@pytest.mark.parametrize("name", NAMES)
def test_empty_graph_and_empty_batch(name):
    p = make_test_policy(name, 8)
    q = Query("q", "x", torch.ones(8))
    assert p.retrieve_batch(MemoryGraph.empty(8), [q], Budget())[0].loaded == []
    assert p.retrieve_batch(MemoryGraph.empty(8), [], Budget()) == []
    together = p.retrieve_graphs([MemoryGraph.empty(8), MemoryGraph.empty(8)], [[q], [q, q]], Budget())
    assert [[r.loaded for r in rs] for rs in together] == [[[]], [[], []]]


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


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "policy").glob("*.yaml")), ids=lambda p: p.stem)
def test_policy_yaml_matches_the_constructor(path, tmp_path):
    """``configs/policy/<name>.yaml`` on its schema names the registered class (``_target_``), every
    other key is a constructor parameter (the registry checks it), every parameter with a plain
    default is listed in the file, and the config builds the policy."""
    from omegaconf import OmegaConf

    from graphmem.config.schemas import policy_option
    from graphmem.policies import make_policy

    listed = set(yaml.safe_load(path.read_text())) - {"defaults", "_target_"}
    cfg = OmegaConf.to_container(policy_option(path), resolve=True)
    target, name = cfg.pop("_target_"), cfg.pop("name")
    assert name == path.stem and POLICIES[name] is POLICIES.resolve(target)
    params = inspect.signature(POLICIES[name]).parameters
    POLICIES.check(name, cfg)
    plain = {n for n, p in params.items() if isinstance(p.default, (bool, int, float, str)) and n != "self"}
    assert plain <= listed, f"{path.name} does not list {sorted(plain - listed)}"
    if cfg.get("checkpoint"):  # a reader checkpoint that exists here
        from models.gnn_reader import GNNReader
        from rl.gnn.train import save_checkpoint

        cfg["checkpoint"] = str(save_checkpoint(GNNReader(input_dim=8), tmp_path / "reader.pt"))
    elif "scorer" in params:
        from models.walk_scorer import ScorerConfig, WalkScorer

        cfg["scorer"] = WalkScorer(ScorerConfig(dim=8))
    built = make_policy({"_target_": target, **cfg})
    assert built.name == name and isinstance(built, POLICIES[name])


def test_unknown_config_key_is_refused_with_the_parameters():
    with pytest.raises(ValueError, match=r"policy 'ppr' has no parameter 'alpah'; its parameters: \['alpha'"):
        make_policy("ppr", alpah=0.2)
    with pytest.raises(ValueError, match="unknown policy 'nope'; registered"):
        make_policy("nope")


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


def test_a_policy_class_is_named_by_its_dotted_path():
    from example_policy import CosineBFS

    assert POLICIES.resolve("example_policy.CosineBFS") is CosineBFS
    assert make_policy("example_policy.CosineBFS").name == "cosine_bfs"
    with pytest.raises(ValueError, match="is not a policy class"):
        POLICIES.resolve("graphmem.core.retrieval.Budget")
    with pytest.raises(ValueError, match="cannot import"):
        POLICIES.resolve("no_such_package.Policy")


@pytest.mark.parametrize("sizes", [(5, 0, 7), (3000, 2500, 1200)], ids=["sorted", "placed"])
def test_merge_by_query_equals_a_stable_sort_of_the_parts(sizes):
    from graphmem.core.retrieval import SORT_BELOW, group_by_query, merge_by_query

    gen = torch.Generator().manual_seed(0)
    parts = []
    for h, n in enumerate(sizes):  # each part grouped by query, as one hop of a walk is
        query = torch.sort(torch.randint(0, 40, (n,), generator=gen)).values
        parts.append((query, torch.randint(0, 10**6, (n,), generator=gen), torch.full((n,), h)))
    merged = merge_by_query(parts, 40)
    expected = group_by_query(*(torch.cat(f) for f in zip(*parts)))
    assert (sum(sizes) > SORT_BELOW) == (sizes[0] > 100)  # both code paths are exercised
    assert all(torch.equal(a, b) for a, b in zip(merged, expected))
