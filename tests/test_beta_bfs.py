"""GraphMemory Algorithm 1 conformance on hand-built toy graphs (expected orders computed by hand)."""

import sys
from pathlib import Path

import pytest
import torch

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import count_tokens, serialize_node
from graphmem.policies import make_policy
from graphmem.policies.beta_bfs import BetaBFS

sys.path.insert(0, str(Path(__file__).parent))
from policy_references import REFERENCES  # noqa: E402


class Fixed:
    """Entry selector returning given node ids (an LLM selector would be plugged in the same way)."""

    def __init__(self, *ids):
        self.ids = ids

    def select(self, graph, queries, budget):
        return [[graph.index_of(i) for i in self.ids][: budget.max_entries] for _ in queries]


def toy(ids, edges, texts=None):
    """Graph with node ids ``ids`` (rows in that order) and edges ``(src_id, dst_id, relation[, S, F])``."""
    g = MemoryGraph.empty(4)
    g.add_nodes(ids, texts or [f"note {i}" for i in ids], torch.eye(4)[torch.arange(len(ids)) % 4])
    for e in edges:
        src, dst, rel = e[:3]
        s, f = (e[3], e[4]) if len(e) > 3 else (0.0, 0.0)
        g.add_edges([g.index_of(src)], [g.index_of(dst)], rel, S=torch.tensor([s]), F=torch.tensor([f]))
    return g


Q = Query("q0", "toy question", torch.ones(4))


def both(graph, entries, budget=Budget()):
    """(per-query reference, batched) loaded ids; asserts they agree, including the trace."""
    policy = BetaBFS(entry_selector=Fixed(*entries))
    ref = REFERENCES["beta_bfs"](policy, graph, Q, budget)
    bat = policy.retrieve(graph, Q, budget)
    for field in ("loaded", "entries", "edges_considered", "edges_traversed", "loaded_tokens", "max_depth"):
        assert getattr(ref, field) == getattr(bat, field), field
    return ref, ref.loaded_ids(graph)


def test_top2_by_target_id_and_depth_two():
    # Rows are not in id order, so the tie-break must use the string id.
    g = toy(
        ["a", "d", "c", "b", "e", "f", "g", "h"],
        [
            ("a", "d", "semantic"),
            ("a", "c", "semantic"),
            ("a", "b", "semantic"),
            ("b", "e", "temporal"),
            ("b", "f", "temporal"),
            ("c", "g", "causal"),
            ("e", "h", "entity"),
        ],
    )
    r, loaded = both(g, ["a"])
    assert loaded == ["a", "b", "c", "e", "f", "g"]  # d: third of three ties; h: depth 3
    assert r.max_depth == 2
    names = [(g.node_ids[int(g.edge_index[0, e])], g.node_ids[int(g.edge_index[1, e])]) for e in r.edges_traversed]
    assert names == [("a", "b"), ("a", "c"), ("b", "e"), ("b", "f"), ("c", "g")]
    # out-edges of a, b, c are inspected (depth < 2); e, f, g are at depth 2 and not expanded
    assert len(r.edges_considered) == 3 + 2 + 1
    assert r.loaded_tokens == sum(count_tokens(serialize_node(i, f"note {i}")) for i in loaded)


def test_posterior_mean_beats_id_after_observe():
    g = toy(["a", "d", "c", "b"], [("a", "d", "semantic"), ("a", "c", "semantic"), ("a", "b", "semantic")])
    g.observe("a", "d", "helpful", 1.0)  # w(a,d) = 2/3 > 1/2
    assert both(g, ["a"])[1] == ["a", "d", "b"]
    g.observe("a", "b", "harmful", 0.5)  # w(a,b) = 1/2.5 = 0.4 < w(a,c) = 0.5
    assert both(g, ["a"])[1] == ["a", "d", "c"]


def test_directed_weights_differ():
    g = toy(
        ["x", "y", "z", "w"],
        [
            ("x", "w", "semantic"),
            ("x", "y", "semantic"),
            ("x", "z", "semantic"),
            ("y", "x", "semantic"),
            ("y", "z", "semantic"),
        ],
    )
    one = Budget(top_k_neighbors=1, max_hops=1)
    assert both(g, ["x"], one)[1] == ["x", "w"]
    g.observe("y", "x", "harmful", 1.0)  # only y->x changes; x->y keeps 1/2
    w = g.posterior_mean
    assert float(w[g.edges_between(g.index_of("x"), g.index_of("y"))]) == 0.5
    assert float(w[g.edges_between(g.index_of("y"), g.index_of("x"))]) == pytest.approx(1 / 3)
    assert both(g, ["x"], one)[1] == ["x", "w"]
    assert both(g, ["y"], one)[1] == ["y", "z"]  # x now below z from y
    g.observe("x", "y", "helpful", 1.0)
    assert both(g, ["x"], one)[1] == ["x", "y"]


def test_node_cap_twelve_in_bfs_order():
    ids, edges = [], []
    for i in range(6):
        ids += [f"e{i}", f"c{i}a", f"c{i}b", f"g{i}"]
        edges += [(f"e{i}", f"c{i}a", "semantic"), (f"e{i}", f"c{i}b", "semantic"), (f"c{i}a", f"g{i}", "semantic")]
    g = toy(ids, edges)
    r, loaded = both(g, [f"e{i}" for i in range(6)])
    assert loaded == [f"e{i}" for i in range(6)] + ["c0a", "c0b", "c1a", "c1b", "c2a", "c2b"]
    assert len(loaded) == 12 and r.max_depth == 1
    # every loaded node at depth < 2 was expanded, the 12th included (cap is checked by the loop)
    assert len(r.edges_considered) == 6 * 2 + 3


def test_token_budget_skips_long_node_and_keeps_going():
    texts = {"a": "alpha", "b": " ".join(["long"] * 50), "c": "gamma", "d": "delta", "e": "epsilon"}
    g = toy(
        list(texts),
        [("a", "b", "semantic"), ("a", "c", "semantic"), ("c", "d", "semantic"), ("b", "e", "semantic")],
        texts=list(texts.values()),
    )
    tok = {i: count_tokens(serialize_node(i, t)) for i, t in texts.items()}
    assert tok["a"] == 4  # "[", "a", "]", "alpha"
    budget = Budget(max_tokens=tok["a"] + tok["c"] + tok["d"])  # exactly enough: <= is allowed
    r, loaded = both(g, ["a"], budget)
    assert loaded == ["a", "c", "d"]  # b too long (skipped, never expanded: e unreachable)
    assert r.loaded_tokens == budget.max_tokens
    _, loaded = both(g, ["a"], Budget(max_tokens=budget.max_tokens - 1))
    assert loaded == ["a", "c"]


def test_node_reached_twice_loaded_once():
    g = toy(
        ["a", "b", "c", "d"],
        [
            ("a", "b", "semantic"),
            ("a", "c", "semantic"),
            ("b", "d", "semantic"),
            ("c", "d", "semantic"),
            ("d", "a", "semantic"),
        ],
    )
    r, loaded = both(g, ["a", "b"])
    assert loaded == ["a", "b", "c", "d"]
    names = [(g.node_ids[int(g.edge_index[0, e])], g.node_ids[int(g.edge_index[1, e])]) for e in r.edges_traversed]
    assert names == [("a", "c"), ("b", "d")]  # b was an entry; d loaded via b's push only
    assert r.entries == [0, 1] and r.max_depth == 1


def test_parallel_edges_count_once_with_max_weight():
    g = toy(
        ["a", "b", "c", "d"],
        [
            ("a", "b", "semantic", 0.0, 0.0),
            ("a", "b", "causal", 3.0, 0.0),
            ("a", "c", "semantic", 1.0, 0.0),
            ("a", "d", "semantic"),
        ],
    )
    r, loaded = both(g, ["a"], Budget(max_hops=1))
    assert loaded == ["a", "b", "c"]  # w(a,b) = max(0.5, 0.8); b is not counted twice
    assert g.relations[int(g.edge_type[r.edges_traversed[0]])] == "causal"
    assert len(r.edges_considered) == 4


def test_no_entries_means_empty_memory():
    g = toy(["a", "b"], [("a", "b", "semantic")])
    r = BetaBFS(entry_selector=Fixed()).retrieve(g, Q, Budget())
    assert r.loaded == [] and r.entries == [] and r.loaded_tokens == 0
    empty = MemoryGraph.empty(4)
    assert make_policy("beta_bfs").retrieve_batch(empty, [Q], Budget())[0].loaded == []


def test_invalid_entry_ids_are_discarded():
    class Sloppy:  # e.g. an LLM selector that hallucinates ids
        def select(self, graph, queries, budget):
            return [[99, -1, 1, 1, 0] for _ in queries]

    g = toy(["a", "b", "c"], [("b", "c", "semantic")])
    r = BetaBFS(entry_selector=Sloppy()).retrieve(g, Q, Budget(max_entries=2))
    assert r.entries == [1, 0] and r.loaded_ids(g) == ["b", "a", "c"]
    assert BetaBFS().retrieve_from_entries(g, [Q], [[5, 1]], Budget())[0].loaded_ids(g) == ["b", "c"]


def test_neighbor_table_cache_follows_counters():
    g = toy(["a", "b", "c"], [("a", "b", "semantic"), ("a", "c", "semantic")])
    policy, one = BetaBFS(entry_selector=Fixed("a")), Budget(top_k_neighbors=1)
    assert policy.retrieve_batch(g, [Q], one)[0].loaded_ids(g) == ["a", "b"]
    g.observe("a", "c", "helpful", 0.5)  # in-place counter update: cached table must be rebuilt
    assert policy.retrieve_batch(g, [Q], one)[0].loaded_ids(g) == ["a", "c"]
    g.S = torch.zeros_like(g.S)  # replaced tensor
    assert policy.retrieve_batch(g, [Q], one)[0].loaded_ids(g) == ["a", "b"]


def test_traverse_from_given_entries_matches_algorithm():
    g = toy(["a", "b", "c"], [("a", "b", "semantic"), ("b", "c", "semantic")])
    r = BetaBFS().retrieve_from_entries(g, [Q], [[0]], Budget())[0]
    assert r.loaded_ids(g) == ["a", "b", "c"] and r.max_depth == 2
    with pytest.raises(ValueError, match="no entry selector"):
        make_policy("dense_topk").retrieve_from_entries(g, [Q], [[0]], Budget())
