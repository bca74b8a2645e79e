"""Honest latency: per-query serving time beside batched throughput, through the public policy API.

A batched evaluation divides one call's wall time equally among its questions, so its per-question
"latency" is throughput in disguise (p50 = p95). :func:`serving_latency` instead serves the questions
one at a time through the batched kernel, as an agent calls it
(``policy.retrieve_batch(graph, [q], budget)``), and times each call on its own; its percentiles are
real latencies. :func:`batched_throughput` times the batched path over all questions (questions/s).
Report both, labelled: they answer different questions.
"""

from __future__ import annotations

import time
from typing import Mapping, Sequence

from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.eval.metrics import percentile
from graphmem.policies.base import TraversalPolicy


def latency_summary(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """``n`` and mean / p50 / p95 / p99 / max in milliseconds of per-call wall times (linear-interpolated
    percentiles, :func:`graphmem.eval.metrics.percentile`)."""
    ms = [1e3 * s for s in seconds]
    return {
        "n": len(ms),
        "mean_ms": sum(ms) / len(ms) if ms else None,
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "p99_ms": percentile(ms, 99),
        "max_ms": max(ms) if ms else None,
    }


def serving_latency(
    policy: TraversalPolicy,
    graphs: MemoryGraph | Mapping[str, MemoryGraph],
    queries: Sequence[Query],
    budget: Budget,
    graph_of: Sequence[str] | None = None,
    warmup: int = 1,
    repeats: int = 1,
) -> dict[str, object]:
    """Serve ``queries`` one at a time, ``policy.retrieve_batch(graph, [q], budget)``, each call timed alone.

    Args:
        policy: any traversal policy.
        graphs: one graph, or graphs by name with ``graph_of[i]`` naming query ``i``'s graph.
        queries: the questions, in serving order.
        budget: the retrieval budget.
        graph_of: graph name of each query (required with a mapping of graphs).
        warmup: untimed calls first, this many on each graph's first query, so one-off per-graph
            tables (and indexes) are not counted as a query's latency (default: 1).
        repeats: serve each query this many times in a row and keep its fastest call (default: 1,
            every call counts). On a machine shared with other jobs, a call can wait for a core;
            the fastest of a few calls measures the code, not the queue (the benchmarks' practice).

    Returns:
        :func:`latency_summary` of the calls' wall times, ``cpu``: the same of the calling thread's CPU
        time (on a shared machine, wall time includes waiting for a core; CPU time does not, and equals
        the wall time when the policy runs single-threaded on an idle core), and ``seconds`` (wall, per
        query, in order).
    """
    if isinstance(graphs, MemoryGraph):
        pick = lambda i: graphs  # noqa: E731
    else:
        if graph_of is None or len(graph_of) != len(queries):
            raise ValueError("serving_latency: graph_of must name the graph of every query")
        pick = lambda i: graphs[graph_of[i]]  # noqa: E731
    first: dict[int, int] = {}  # one untimed call per graph on its first query builds its tables
    for i in range(len(queries)):
        first.setdefault(id(pick(i)), i)
    for i in list(first.values()) * max(warmup, 0):
        policy.retrieve_batch(pick(i), [queries[i]], budget)
    seconds, cpu = [], []
    for i, q in enumerate(queries):
        graph = pick(i)
        wall = used = float("inf")
        for _ in range(max(1, repeats)):
            c, t = time.thread_time(), time.perf_counter()
            policy.retrieve_batch(graph, [q], budget)
            wall, used = min(wall, time.perf_counter() - t), min(used, time.thread_time() - c)
        seconds.append(wall)
        cpu.append(used)
    return {
        **latency_summary(seconds),
        "cpu": {k: v for k, v in latency_summary(cpu).items() if k != "n"},
        "seconds": seconds,
    }


def batched_throughput(
    policy: TraversalPolicy, graph: MemoryGraph, queries: Sequence[Query], budget: Budget, rounds: int = 3
) -> dict[str, float | int]:
    """Questions per second of ``policy.retrieve_batch(graph, queries, budget)`` (all at once), the
    fastest of ``rounds`` calls after one warm-up call."""
    policy.retrieve_batch(graph, queries[:1], budget)
    best = float("inf")
    for _ in range(max(1, rounds)):
        t = time.perf_counter()
        policy.retrieve_batch(graph, queries, budget)
        best = min(best, time.perf_counter() - t)
    return {
        "queries": len(queries),
        "questions_per_s": len(queries) / best,
        "ms_per_question": 1e3 * best / len(queries),
    }
