"""The text scale sweep: lexical and hybrid retrieval served one query at a time from 10^3 to 10^6 nodes.

For every size in ``sizes`` a graph with note-like texts (:func:`graphmem.builders.synthetic.make_text_graph`:
Zipf vocabulary, topic words, names, dates and numbers; topic-clustered embeddings, no encoder) is
built with its per-graph tables: the BM25 index with its impact-ordered postings (``bm25_build_s``), the
vector index of every hybrid variant's spec (``index``: build seconds and MB, at ``index_threads``) and
the lexical feature tables (``lexical_tables_s``). Queries quote a random node's words
(:func:`graphmem.builders.synthetic.text_queries`). Each variant names a policy file of ``configs/policy/``
(``config``), made with those settings on the CPU (``router``: a fresh scorer of the trainer's default
shape, :func:`scale_sweep.bench_policy`), and is timed as in the ANN sweep
(:func:`scale_sweep.time_variant`: end-to-end p50/p95/p99 wall and CPU, batched throughput,
peak memory).

``entry_recall_at_k`` is the top-``max_entries`` overlap (:func:`scale_sweep.entry_recall`)
of the variant's selector as served (bounded above its ``min_nodes``) against the same selector forced
exact (``min_nodes`` above ``N``: the ``[Q, N]`` cosine and the full BM25 ranking); for the ``hybrid``
and ``bm25`` policies their fusion / BM25 entries, for a walk with the exact cosine selector ``None``
(nothing bounded). ``rss_mb`` is the process's resident memory once the size's tables are built.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from typing import Any, Mapping

import torch
from scale_sweep import (
    bench_policy,
    built,
    entry_recall,
    finish,
    new_report,
    run_variants,
    scaling_sweep,
    time_slow_or_not,
)

from graphmem.builders.synthetic import make_text_graph, text_queries
from graphmem.config.schemas import policy_option
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.index.lexical import bm25_for
from graphmem.index.lexical_features import graph_tables
from graphmem.index.vector_index import index_for
from graphmem.policies import TraversalPolicy
from graphmem.policies.bm25 import BM25EntrySelector, BM25Policy
from graphmem.policies.hybrid import HybridEntrySelector, HybridPolicy
from graphmem.tracking.peak_memory import PeakMemory


def variant_kwargs(variant: Mapping[str, Any]) -> dict[str, Any]:
    """The policy settings of a sweep variant: its ``config`` file (``configs/policy/<name>.yaml`` as
    composed on its schema) without target, name, checkpoint and device, then the variant's own keys."""
    from omegaconf import OmegaConf

    out: dict[str, Any] = {}
    if variant.get("config"):
        out = OmegaConf.to_container(policy_option(variant["config"]), resolve=True)
        for key in ("_target_", "name", "checkpoint", "device", "strict_split"):
            out.pop(key, None)
    out.update({k: v for k, v in variant.items() if k not in ("policy", "config", "slow", "max_nodes")})
    return out


def bounded_selector(policy: TraversalPolicy):
    """The entry selector a policy serves with when it bounds its entries (else ``None``)."""
    if isinstance(policy, HybridPolicy):
        return policy.fusion
    if isinstance(policy, BM25Policy):
        return BM25EntrySelector(policy.k1, policy.b, policy.min_nodes)
    selector = policy.entry_selector
    return selector if isinstance(selector, (HybridEntrySelector, BM25EntrySelector)) else None


def exact_twin(selector):
    """A copy of ``selector`` that ranks every graph exactly (``min_nodes`` above any size)."""
    twin = copy.copy(selector)
    twin.min_nodes = sys.maxsize
    return twin


def selector_recall(selector, graph: MemoryGraph, queries: list[Query], budget: Budget, chunk: int = 16) -> float:
    """:func:`entry_recall` of ``selector``'s entries against its exact twin's, ``chunk`` queries at a time."""
    exact = exact_twin(selector)
    got, want = [], []
    for i in range(0, len(queries), chunk):
        part = queries[i : i + chunk]
        got += selector.select(graph, part, budget)
        want += exact.select(graph, part, budget)
    return entry_recall(got, want)


def _rss_mb() -> float:
    """Resident memory of this process now (MB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _tables(graph: MemoryGraph, specs: dict, threads: int, entry: dict) -> None:
    """Build the size's per-graph tables outside the timed calls, recording their cost in ``entry``."""
    t = time.perf_counter()
    bm25_for(graph)._d()
    entry["bm25_build_s"] = time.perf_counter() - t
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        for key, spec in specs.items():
            with PeakMemory() as mem:
                t = time.perf_counter()
                index_for(graph, spec)
            entry.setdefault("index", {})[key] = {"build_s": time.perf_counter() - t, "mb": mem.peak_mb}
    finally:
        torch.set_num_threads(before)
    t = time.perf_counter()
    graph_tables(graph)
    entry["lexical_tables_s"] = time.perf_counter() - t
    entry["rss_mb"] = _rss_mb()


def _run_variant(v: dict, graph: MemoryGraph, queries: list[Query], cfg, budget: Budget) -> dict:
    """Time one variant on one graph and measure its entry recall (module docstring)."""
    policy = bench_policy(v["policy"], graph, cfg["seed"], **variant_kwargs(v))
    res = time_slow_or_not(policy, graph, queries, budget, [], cfg, bool(v.get("slow")))
    selector = bounded_selector(policy)
    res["entry_recall_at_k"] = None if selector is None else selector_recall(selector, graph, queries, budget)
    res["bounded"] = None if selector is None else graph.num_nodes >= max(selector.min_nodes, 1)
    return res


def text_scaling_sweep(cfg: Mapping[str, Any], budget: Budget, log=print) -> dict[str, Any]:
    """Run the sweep described by ``cfg`` (``configs/suite/scaling_text.yaml``); returns the report.

    ``cfg`` keys: ``sizes``, ``avg_degree``, ``dim``, ``seed``, ``queries``, ``slow_queries``, ``query_noise``,
    ``quote`` (words a query quotes), ``rounds``, ``serve_repeats``, ``index_threads``, ``variants`` (name ->
    ``{policy, config, slow, max_nodes, <policy kwargs>}``).
    """
    report = new_report()
    variants = {name: dict(v) for name, v in cfg["variants"].items()}
    specs = {}
    for v in variants.values():
        probe = bench_policy(v["policy"], make_text_graph(8, dim=cfg["dim"]), cfg["seed"], **variant_kwargs(v))
        selector = bounded_selector(probe)
        if isinstance(selector, HybridEntrySelector):
            specs[selector.spec.key] = selector.spec
    for size in cfg["sizes"]:
        graph, entry = built(make_text_graph, size, cfg)
        _tables(graph, specs, int(cfg.get("index_threads") or 0), entry)
        queries = text_queries(graph, cfg["queries"], cfg["query_noise"], cfg["seed"] + 1, int(cfg.get("quote", 4)))
        log(
            f"size {graph.num_nodes}: graph {entry['graph_build_s']:.1f}s, bm25 {entry['bm25_build_s']:.1f}s,"
            f" lexical tables {entry['lexical_tables_s']:.1f}s, index {entry.get('index')},"
            f" rss {entry['rss_mb']:.0f} MB"
        )
        entry["policies"] = run_variants(
            variants, graph, lambda name, v, g=graph: _run_variant(v, g, queries, cfg, budget), log
        )
        report["sizes"][str(size)] = entry
        del graph
    return finish(report)


SWEEPS = {"scaling": scaling_sweep, "scaling_text": text_scaling_sweep}
"""Benchmark suite name (``suite.name``) -> its sweep function."""


def sweep_for(name: str):
    """The sweep function of suite ``name``; ``ValueError`` naming the known ones otherwise."""
    if name not in SWEEPS:
        raise ValueError(f"unknown benchmark suite {name!r}; known: {sorted(SWEEPS)}")
    return SWEEPS[name]
