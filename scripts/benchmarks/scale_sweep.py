"""The scale sweep: end-to-end serving latency, entry recall and memory from 10^3 to 10^6+ nodes.

For every size in ``sizes`` a synthetic graph (:func:`graphmem.builders.synthetic.make_synthetic_graph`,
dim 64) is built, and for every variant (a policy with its settings, e.g. ``beta_bfs`` with
``entry_selector: {name: ann}``) on the same queries:

* ``end_to_end_p50_ms`` / ``p95`` / ``p99``: wall time of one query at a time through the batched
  kernel (:func:`graphmem.eval.latency.serving_latency`), entry selection included, each query's
  fastest of ``serve_repeats`` calls (the slow variants: one call), and
  ``end_to_end_cpu_*``: the same calls' CPU time (free of the waits for a core on a shared machine);
* ``batched_questions_per_s``: all queries in one ``retrieve_batch`` call (throughput, not latency);
* ``entry_recall_at_k``: share of the exact top-``max_entries`` entries (cosine over all nodes, the
  reference) that the variant's entry selector returns, over all queries; ``None`` for a variant
  whose policy has no entry selector;
* ``peak_mb``: peak resident memory above the warm state while serving single queries
  (:class:`graphmem.tracking.peak_memory.PeakMemory`, outside the timed calls), ``batched_peak_mb`` for the batch;
* ``setup_s``: the first call (per-graph tables); the vector index build is timed separately per size
  (``index_build_s``, ``index_mb``) since all ANN variants of a size share the graph's index.

Growth (largest size over smallest, and each size over the smallest) is reported for every variant.
``ppr`` (forward push) and ``gnn`` (the reader on the walk's neighbourhoods) are bounded per query
like the traversals; with exact entry selection every variant still reads all ``N`` embeddings.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Mapping

import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.core.tokens import node_tokens
from graphmem.eval.latency import batched_throughput, serving_latency
from graphmem.index.vector_index import IndexSpec, index_for
from graphmem.policies import TraversalPolicy, make_policy
from graphmem.policies.ranking import query_matrix
from graphmem.policies.selectors import EmbeddingEntrySelector
from graphmem.tracking.peak_memory import PeakMemory
from rl.common.seeding import seed_everything


def make_queries(graph: MemoryGraph, num: int, noise: float, seed: int) -> list[Query]:
    """Queries near random nodes: ``x_v + noise * N(0, I) / sqrt(D)``."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, graph.num_nodes, (num,), generator=gen)
    emb = graph.embeddings[rows] + noise * torch.randn(num, graph.dim, generator=gen) / graph.dim**0.5
    return [Query(f"bench-{i}", f"synthetic query {i}", emb[i]) for i in range(num)]


def bench_policy(name: str, graph: MemoryGraph, seed: int, /, device: str = "cpu", **kwargs) -> TraversalPolicy:
    """A registered policy on ``device``; ``router`` (the walk) and ``gnn`` get untrained modules sized
    for ``graph`` (timings do not depend on the weights; ``seed`` seeds them, a policy's own ``seed`` is a kwarg)."""
    seed_everything(seed)
    if name == "router" and not kwargs.get("checkpoint"):  # a trained walk when given, else a fresh one
        from models.walk_scorer import ScorerConfig, WalkScorer  # lazily: torch_geometric takes seconds to import

        kwargs["scorer"] = WalkScorer(ScorerConfig(dim=graph.dim))
    elif name == "gnn":
        from models.gnn_reader import GNNReader  # lazily: torch_geometric takes seconds to import

        kwargs["reader"] = GNNReader(input_dim=graph.dim, num_relations=len(graph.relations))
    return make_policy(name, device=device, **kwargs)


def exact_entries(graph: MemoryGraph, queries: list[Query], budget: Budget, chunk: int = 32) -> list[list[int]]:
    """The reference entries: exact top-``max_entries`` by cosine over all nodes, ``chunk`` queries at a time."""
    exact = EmbeddingEntrySelector()
    return [e for i in range(0, len(queries), chunk) for e in exact.select(graph, queries[i : i + chunk], budget)]


def entry_recall(selected: list[list[int]], reference: list[list[int]]) -> float:
    """``sum_q |selected_q ∩ reference_q| / sum_q |reference_q|``."""
    hit = sum(len(set(s) & set(r)) for s, r in zip(selected, reference))
    return hit / max(sum(len(r) for r in reference), 1)


def time_variant(
    policy: TraversalPolicy,
    graph: MemoryGraph,
    queries: list[Query],
    budget: Budget,
    reference: list[list[int]],
    rounds: int,
    memory_queries: int = 8,
    repeats: int = 1,
) -> dict[str, Any]:
    """Setup, serving latency (each query's fastest of ``repeats`` calls), throughput, entry recall and
    peak memory of one variant on one graph."""
    t = time.perf_counter()
    policy.retrieve_batch(graph, queries[:1], budget)
    setup = time.perf_counter() - t
    served = serving_latency(policy, graph, queries, budget, warmup=1, repeats=repeats)
    with PeakMemory() as single_mem:
        for q in queries[:memory_queries]:
            policy.retrieve_batch(graph, [q], budget)
    with PeakMemory() as batch_mem:
        policy.retrieve_batch(graph, queries, budget)
    thr = batched_throughput(policy, graph, queries, budget, rounds)
    selector = policy.entry_selector
    recall = None
    if selector is not None:
        recall = entry_recall(selector.select(graph, queries, budget), reference[: len(queries)])
    return {
        "queries": len(queries),
        "setup_s": setup,
        "end_to_end_mean_ms": served["mean_ms"],
        "end_to_end_p50_ms": served["p50_ms"],
        "end_to_end_p95_ms": served["p95_ms"],
        "end_to_end_p99_ms": served["p99_ms"],
        "end_to_end_max_ms": served["max_ms"],
        "end_to_end_cpu_p50_ms": served["cpu"]["p50_ms"],
        "end_to_end_cpu_p95_ms": served["cpu"]["p95_ms"],
        "end_to_end_cpu_p99_ms": served["cpu"]["p99_ms"],
        "batched_questions_per_s": thr["questions_per_s"],
        "batched_ms_per_question": thr["ms_per_question"],
        "entry_recall_at_k": recall,
        "peak_mb": single_mem.peak_mb,
        "batched_peak_mb": batch_mem.peak_mb,
    }


def ef_search_recall(
    graph: MemoryGraph, spec: IndexSpec, queries: list[Query], reference: list[list[int]], budget: Budget, efs
) -> dict[str, dict[str, float]]:
    """Entry recall and batch-1 search time of the graph's ``spec`` index at each HNSW ``efSearch`` in ``efs``
    (the index is built once; only the search parameter changes)."""
    if spec.kind != "hnsw":
        return {}
    index, out = index_for(graph, spec), {}
    q = query_matrix(graph, queries)
    try:
        for ef in efs:
            index.spec = dataclasses.replace(spec, ef_search=int(ef))
            t = time.perf_counter()
            rows = [index.search(graph, q[i : i + 1], budget.max_entries)[0] for i in range(len(queries))]
            ms = 1e3 * (time.perf_counter() - t) / len(queries)
            found = [[v for v in r.tolist() if v >= 0] for r in rows]
            out[str(ef)] = {"entry_recall_at_k": entry_recall(found, reference), "search_ms_per_query": ms}
    finally:
        index.spec = spec
    return out


def _index_specs(variants: Mapping[str, Mapping[str, Any]]) -> dict[str, IndexSpec]:
    """The distinct index specs the ANN variants use (built once per size, shared)."""
    specs = {}
    for v in variants.values():
        sel = v.get("entry_selector")
        if isinstance(sel, Mapping) and sel.get("name") == "ann":
            spec = IndexSpec.from_mapping(sel.get("index"))
            specs[spec.key] = spec
    return specs


def scaling_sweep(cfg: Mapping[str, Any], budget: Budget, log=print) -> dict[str, Any]:
    """Run the sweep described by ``cfg`` (``configs/suite/scaling.yaml``); returns the report.

    ``cfg`` keys: ``sizes``, ``avg_degree``, ``dim``, ``seed``, ``queries``, ``slow_queries``,
    ``query_noise``, ``rounds``, ``serve_repeats``, ``index_threads``, ``ef_search_probe``, ``variants`` (name ->
    ``{policy, slow, max_nodes, <policy kwargs>}``; ``slow``: served on ``slow_queries`` only; ``max_nodes``:
    not run on larger graphs).
    """
    report = new_report()
    variants = {name: dict(v) for name, v in cfg["variants"].items()}
    specs = _index_specs(variants)
    for size in cfg["sizes"]:
        graph, entry = built(make_synthetic_graph, size, cfg)
        queries = make_queries(graph, cfg["queries"], cfg["query_noise"], cfg["seed"] + 1)
        threads = torch.get_num_threads()
        torch.set_num_threads(int(cfg.get("index_threads") or threads))
        try:
            for key, spec in specs.items():
                with PeakMemory() as mem:
                    t = time.perf_counter()
                    index_for(graph, spec)
                    build_s = time.perf_counter() - t
                entry.setdefault("index", {})[key] = {"build_s": build_s, "mb": mem.peak_mb}
        finally:
            torch.set_num_threads(threads)
        entry["index_build_s"] = sum(v["build_s"] for v in entry.get("index", {}).values()) or None
        reference = exact_entries(graph, queries, budget)
        for key, spec in specs.items():
            entry["index"][key]["recall_by_ef_search"] = ef_search_recall(
                graph, spec, queries, reference, budget, cfg.get("ef_search_probe") or []
            )
        log(
            f"size {graph.num_nodes}: {graph.num_edges} edges, graph built in {entry['graph_build_s']:.1f}s,"
            f" index in {entry['index_build_s']}s"
        )

        def run(name: str, v: dict, graph: MemoryGraph = graph) -> dict[str, Any]:
            kwargs = {k: val for k, val in v.items() if k not in ("policy", "slow", "max_nodes")}
            policy = bench_policy(v["policy"], graph, cfg["seed"], **kwargs)
            return time_slow_or_not(policy, graph, queries, budget, reference, cfg, bool(v.get("slow")))

        entry["policies"] = run_variants(variants, graph, run, log)
        report["sizes"][str(size)] = entry
        del graph
    return finish(report)


def new_report() -> dict[str, Any]:
    """A sweep report's head: torch and OpenMP threads, the load average at its start."""
    return {
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "load_average_at_start": os.getloadavg(),
        "sizes": {},
    }


def built(make, size: int, cfg: Mapping[str, Any]) -> tuple[MemoryGraph, dict[str, Any]]:
    """``make(size, avg_degree, dim, seed)`` from ``cfg`` with its token counts, and the size's report entry
    (nodes, edges, ``graph_build_s``)."""
    t = time.perf_counter()
    graph = make(int(size), avg_degree=cfg["avg_degree"], dim=cfg["dim"], seed=cfg["seed"])
    node_tokens(graph)
    entry: dict[str, Any] = {"nodes": graph.num_nodes, "edges": graph.num_edges}
    entry["graph_build_s"] = time.perf_counter() - t
    return graph, entry


def time_slow_or_not(policy, graph, queries, budget, reference, cfg: Mapping[str, Any], slow: bool) -> dict:
    """:func:`time_variant` with the sweep's settings: a ``slow`` variant on ``slow_queries`` queries, one call
    each and one batched round; the others on every query, ``serve_repeats`` calls each and ``rounds``."""
    qs = queries[: cfg["slow_queries"]] if slow else queries
    repeats = 1 if slow else int(cfg.get("serve_repeats") or 1)
    return time_variant(policy, graph, qs, budget, reference, 1 if slow else cfg["rounds"], 2 if slow else 8, repeats)


def run_variants(variants: Mapping[str, Mapping[str, Any]], graph: MemoryGraph, run, log) -> dict[str, Any]:
    """``{name: run(name, variant)}`` for every variant, those with ``max_nodes`` below the graph's size
    skipped (said so); one log line per variant."""
    out: dict[str, Any] = {}
    for name, v in variants.items():
        if v.get("max_nodes") and graph.num_nodes > v["max_nodes"]:
            out[name] = {"skipped": f"above max_nodes={v['max_nodes']} (its cost grows with N)"}
            log(f"  {name:<14} skipped: {out[name]['skipped']}")
            continue
        res = out[name] = run(name, dict(v))
        log(
            f"  {name:<14} p50 {res['end_to_end_p50_ms']:9.3f} ms  p95 {res['end_to_end_p95_ms']:9.3f} ms"
            f"  cpu p50 {res['end_to_end_cpu_p50_ms']:9.3f} ms  batched {res['batched_questions_per_s']:9.1f} q/s"
            f"  entry recall {res['entry_recall_at_k']}  peak {res['peak_mb']} MB"
        )
    return out


def finish(report: dict[str, Any]) -> dict[str, Any]:
    """The report with the load average at its end and the growth of every variant."""
    report["load_average_at_end"] = os.getloadavg()
    report["growth"] = growth(report)
    return report


def growth(report: Mapping[str, Any]) -> dict[str, Any]:
    """Per variant: end-to-end p50 (wall and CPU) at each size over the smallest size, and the largest
    size over the smallest."""
    sizes = list(report["sizes"].items())
    if len(sizes) < 2:
        return {}
    first = sizes[0][1]["policies"]
    out: dict[str, Any] = {}
    for name in first:
        out[name] = {}
        for key, label in (("end_to_end_p50_ms", "p50"), ("end_to_end_cpu_p50_ms", "cpu_p50")):
            base = first[name][key]
            ratios = {s: e["policies"][name][key] / base for s, e in sizes if key in e["policies"].get(name, {})}
            out[name][f"{label}_over_smallest"] = ratios
            out[name][f"{label}_largest_over_smallest"] = list(ratios.values())[-1]
    return out
