"""Per-query serving latency and batched throughput (graphmem.eval.latency) and the scale sweep."""

import sys
import time
from pathlib import Path

import pytest
import torch
from scale_sweep import entry_recall, growth, scaling_sweep

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query, RetrievalBatch
from graphmem.eval.latency import batched_throughput, latency_summary, serving_latency
from graphmem.policies import TraversalPolicy, make_policy

sys.path.insert(0, str(Path(__file__).parent))


def nothing(num_queries: int) -> RetrievalBatch:
    """Empty retrievals of ``num_queries`` queries."""
    empty = torch.zeros(0, dtype=torch.long)
    return RetrievalBatch(entries=0, tokens=torch.zeros(num_queries, dtype=torch.long), query=empty, loaded=empty)


class Sleepy(TraversalPolicy):
    """Each call sleeps ``delay[qid]`` seconds per query: known per-call latencies."""

    name = "sleepy"

    def __init__(self, delay):
        self.delay, self.calls = delay, []

    def traverse(self, scope, entries, budget):
        self.calls.append([q.qid for q in scope.queries])
        time.sleep(self.sleep_s(scope.queries))
        return nothing(len(scope.queries))

    def sleep_s(self, queries) -> float:
        return sum(self.delay[q.qid] for q in queries)


def test_serving_latency_times_each_query_alone():
    g = make_synthetic_graph(50, dim=8)
    delay = {f"q{i}": (0.080 if i % 10 == 9 else 0.002) for i in range(20)}  # two slow queries in 20
    queries = [Query(f"q{i}", "", g.embeddings[i]) for i in range(20)]
    p = Sleepy(delay)
    res = serving_latency(p, g, queries, Budget(), warmup=1)
    assert p.calls[0] == ["q0"] and p.calls[1:] == [[q.qid] for q in queries]  # warm-up, then batches of one
    assert res["n"] == 20 and len(res["seconds"]) == 20
    # p95 falls on a slow call, p50 on a fast one (margins for a loaded machine)
    assert 2.0 <= res["p50_ms"] < 40.0 and res["p95_ms"] >= 80.0 and res["p50_ms"] < res["p95_ms"] <= res["max_ms"]
    assert res["cpu"]["p95_ms"] < 40.0  # sleeping costs no CPU: wall and CPU time are measured apart


def test_serving_latency_over_graphs_warms_each_graph_once():
    graphs = {"a": make_synthetic_graph(30, dim=8, seed=1), "b": make_synthetic_graph(30, dim=8, seed=2)}
    queries = [Query(f"q{i}", "", torch.randn(8)) for i in range(5)]
    graph_of = ["a", "b", "a", "b", "b"]
    p = Sleepy({q.qid: 0.0 for q in queries})
    serving_latency(p, graphs, queries, Budget(), graph_of=graph_of)
    assert p.calls[:2] == [["q0"], ["q1"]] and len(p.calls) == 7
    with pytest.raises(ValueError, match="graph_of"):
        serving_latency(p, graphs, queries, Budget())


def test_latency_summary_and_throughput():
    s = latency_summary([0.001, 0.002, 0.003, 0.004])
    assert s["n"] == 4 and s["p50_ms"] == pytest.approx(2.5) and s["max_ms"] == pytest.approx(4.0)
    assert latency_summary([])["p50_ms"] is None
    g = make_synthetic_graph(200, dim=8)
    queries = [Query(f"q{i}", "", g.embeddings[i]) for i in range(16)]
    thr = batched_throughput(make_policy("beta_bfs"), g, queries, Budget(), rounds=2)
    assert thr["queries"] == 16 and thr["questions_per_s"] == pytest.approx(1e3 / thr["ms_per_question"])


def test_entry_recall_and_growth():
    assert entry_recall([[1, 2, 3], [4]], [[1, 2, 9], [4]]) == pytest.approx(3 / 4)
    rep = {
        "sizes": {
            "10": {"policies": {"a": {"end_to_end_p50_ms": 2.0, "end_to_end_cpu_p50_ms": 1.0}}},
            "20": {"policies": {"a": {"end_to_end_p50_ms": 3.0, "end_to_end_cpu_p50_ms": 4.0}}},
        }
    }
    g = growth(rep)["a"]
    assert g["p50_largest_over_smallest"] == 1.5 and g["cpu_p50_over_smallest"] == {"10": 1.0, "20": 4.0}


def test_scaling_sweep_small():
    cfg = {
        "sizes": [300, 600],
        "avg_degree": 4.0,
        "dim": 8,
        "seed": 0,
        "queries": 12,
        "slow_queries": 3,
        "query_noise": 0.3,
        "rounds": 1,
        "index_threads": 1,
        "variants": {
            "beta_bfs+ann": {
                "policy": "beta_bfs",
                "entry_selector": {"name": "ann", "min_nodes": 0, "index": {"m": 8}},
            },
            "ppr": {"policy": "ppr", "slow": True},
        },
    }
    rep = scaling_sweep(cfg, Budget(), log=lambda *_: None)
    assert list(rep["sizes"]) == ["300", "600"]
    for entry in rep["sizes"].values():
        assert entry["index_build_s"] > 0 and list(entry["index"]) == ["hnsw-m8-efc80"]
        ann, ppr = entry["policies"]["beta_bfs+ann"], entry["policies"]["ppr"]
        assert ann["queries"] == 12 and ppr["queries"] == 3
        assert 0.95 <= ann["entry_recall_at_k"] <= 1.0
        for res in (ann, ppr):
            assert 0 < res["end_to_end_p50_ms"] <= res["end_to_end_p95_ms"] <= res["end_to_end_p99_ms"]
            assert res["batched_questions_per_s"] > 0 and res["peak_mb"] is not None
    assert set(rep["growth"]) == {"beta_bfs+ann", "ppr"}


def test_evaluation_reports_served_latency_beside_batched_throughput():
    from test_harness import toy_set

    from graphmem.eval.harness import LATENCY_BATCH_SHARE, LATENCY_SERVED, evaluate_policy
    from graphmem.eval.report import comparison_table

    gs = toy_set()
    delay = {"g1#0": 0.001, "g2#0": 0.002, "g1#1": 0.020, "g1#2": 0.001}
    served = evaluate_policy(Sleepy(delay), gs, Budget(), progress=False, serve_latency=True)
    s = served.summary["all"]
    assert served.info["latency"] == LATENCY_SERVED and served.info["batched_questions_per_s"] > 0
    assert s["latency_ms_p50"] < s["latency_ms_p95"] and s["latency_ms_p95"] > 10.0  # the slow question shows
    shared = evaluate_policy(Sleepy(delay), gs, Budget(), progress=False)
    assert shared.info["latency"] == LATENCY_BATCH_SHARE
    table = comparison_table([served])
    assert "batched q/s" in table and "served alone" in table
    assert "throughput, not latency" in comparison_table([shared])


def test_serving_latency_repeats_keep_each_querys_fastest_call():
    g = make_synthetic_graph(50, dim=8)
    queries = [Query(f"q{i}", "", g.embeddings[i]) for i in range(4)]

    class FirstSlow(Sleepy):
        def sleep_s(self, queries) -> float:  # the first call of each query waits 50 ms
            return 0.050 if all(q.qid not in sum(self.calls[:-1], []) for q in queries) else 0.001

    p = FirstSlow({})
    res = serving_latency(p, g, queries, Budget(), warmup=0, repeats=3)
    assert len(p.calls) == 12 and res["n"] == 4 and res["max_ms"] < 40.0
