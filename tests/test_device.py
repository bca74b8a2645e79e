"""Every batched policy path keeps its tensors on the policy's device.

No GPU is needed to check the plumbing: under ``with torch.device("meta")`` any tensor created
without an explicit device lands on the meta device, and mixing it with the policy's CPU tensors
(or reading it back with ``tolist``) fails. A policy constructed with ``device="cpu"`` must
therefore give the same results inside that context as outside it.
"""

import sys
from pathlib import Path

import pytest
import torch

from graphmem.core import Budget, Query
from graphmem.policies import POLICIES

sys.path.insert(0, str(Path(__file__).parent))
from policy_references import make_test_policy  # noqa: E402
from varied_graphs import varied_posterior_graph  # noqa: E402

NAMES = sorted(POLICIES)


@pytest.fixture(scope="module")
def graph():
    return varied_posterior_graph(300, seed=5)


def make(name: str, graph):
    return make_test_policy(name, graph.dim, len(graph.relations))


def trace(r):
    return r.loaded, r.entries, r.edges_considered, r.edges_traversed, r.loaded_tokens, r.max_depth


@pytest.mark.parametrize(
    "budget",
    [Budget(), Budget(max_entries=2, top_k_neighbors=3, max_hops=3, max_nodes=20, max_tokens=150)],
    ids=["default", "tight-tokens"],
)
@pytest.mark.parametrize("name", NAMES)
def test_batched_path_creates_no_tensor_off_the_policy_device(graph, name, budget):
    gen = torch.Generator().manual_seed(1)
    queries = [
        Query(f"q{i}", "x", graph.embeddings[i * 7] + 0.3 * torch.randn(graph.dim, generator=gen)) for i in range(9)
    ]
    policy = make(name, graph)
    assert policy.device == torch.device("cpu")
    expected = policy.retrieve_batch(graph, queries, budget)  # also builds the per-graph caches
    with torch.device("meta"):
        got = policy.retrieve_batch(graph, queries, budget)
    assert [trace(r) for r in got] == [trace(r) for r in expected]
    assert any(r.loaded for r in got)


@pytest.mark.parametrize("name", NAMES)
def test_graph_batch_path_creates_no_tensor_off_the_policy_device(graph, name):
    other = varied_posterior_graph(80, seed=6)
    gen = torch.Generator().manual_seed(2)
    queries = [
        [
            Query(f"{g.num_nodes}-{i}", "x", g.embeddings[i * 5] + 0.3 * torch.randn(g.dim, generator=gen))
            for i in range(4)
        ]
        for g in (graph, other)
    ]
    policy = make(name, graph)
    expected = policy.retrieve_graphs([graph, other], queries, Budget())  # also builds the union and its caches
    with torch.device("meta"):
        got = policy.retrieve_graphs([graph, other], queries, Budget())
    assert [[trace(r) for r in rs] for rs in got] == [[trace(r) for r in rs] for rs in expected]


@pytest.mark.parametrize("name", NAMES)
def test_device_auto_is_resolved_before_anything_moves(graph, name):
    """``device="auto"`` is ``cuda`` where available, else ``cpu``, for every policy (the learned ones
    move their modules there after resolving it)."""
    policy = make_test_policy(name, graph.dim, len(graph.relations), device="auto")
    assert policy.device == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    q = Query("q", "x", graph.embeddings[0])
    assert policy.retrieve(graph, q, Budget()).loaded
