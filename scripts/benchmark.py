"""Benchmark every policy: batched vs per-query loop, and latency vs graph size.

For every graph and policy it measures, on the same graph and queries in the same run:

* the per-query reference loop (the policy's oracle in ``scripts/benchmarks/policy_references.py``, once per query; a
  policy without one: ``retrieve``, its batched code for one query), the batched code called once per
  query (``retrieve_batch([q])``) and the batched form over all queries (``retrieve_batch``), as
  milliseconds per query, queries per second and the ratios ``batched_over_loop`` (vs the
  reference loop) and ``batched_over_single`` (vs batches of one);
* for the bounded policies (``beta_bfs``, ``router``) also the traversal alone (batched, from
  precomputed entries: :meth:`TraversalPolicy.retrieve_scope`) and the embedding entry selection
  (:meth:`TraversalPolicy.select_entries`), since only the traversal is bounded by the budget:
  entry selection ranks all ``N`` nodes;
* peak memory of one query and of the full batch (:class:`graphmem.tracking.peak_memory.PeakMemory`);
* with ``compare_devices`` (e.g. ``[cuda]``), the batched path again on each of those devices and
  its speed-up over the main ``device``.

Graphs: the saved LoCoMo graph set (``locomo.path``; each conversation graph with its own
questions) and synthetic graphs of ``sizes`` nodes (their build time is recorded; the LoCoMo set's
build statistics come from its manifest). For every saved graph set in ``datasets`` (LoCoMo: 8
large graphs; HotpotQA: one small graph per question) all questions are also timed as the
evaluation harness runs them (``retrieve_graphs`` over unions of graphs), next to one
``retrieve_batch`` per graph and the per-query reference loop. ``router`` and ``gnn`` run with freshly initialised
(untrained) modules: the timing does not depend on the weights. Timings use ``threads`` torch
intra-op threads. Writes ``benchmark.json`` and ``benchmark.png`` under ``out_dir`` and tracks one
``benchmark`` run (:func:`track`): the saved graph sets as inputs, latency against graph size as a
curve, every timing as a table, the growth figures in the summary, the two files as its results.

    python scripts/benchmark.py sizes=[1000,10000] num_queries=16
    python scripts/benchmark.py device=cpu compare_devices=[cuda]      # CUDA vs CPU, side by side
"""

from __future__ import annotations

import json
import logging
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from omegaconf import DictConfig
from tqdm.auto import tqdm

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.config.cli import set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget, Query
from graphmem.core.device import resolve_device
from graphmem.core.tokens import node_tokens
from graphmem.eval.harness import run_retrievals
from graphmem.policies import Scope
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from graphmem.store.paths import check_name, run_path
from graphmem.tracking import describe_artifact, experiment_group, make_tracker, use_graphset
from graphmem.tracking.peak_memory import PeakMemory

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))  # the benchmarks' helpers, by their names
from policy_references import REFERENCES  # noqa: E402
from scale_sweep import bench_policy, make_queries  # noqa: E402
from text_sweep import sweep_for  # noqa: E402
from train_throughput import training_throughput  # noqa: E402

log = logging.getLogger("benchmark")
warnings.filterwarnings("ignore", message="Sparse")


build_policy = bench_policy  # a registered policy; router and gnn with untrained modules sized for the graph


def reference_loop(policy, graph, budget):
    """One query's per-query reference, ``fn(query)``: the policy's oracle from ``policy_references``
    (``scripts/benchmarks/``) when registered there, else ``policy.retrieve`` (its batched code for one query)."""
    ref = REFERENCES.get(policy.name)
    if ref is None:
        return lambda q: policy.retrieve(graph, q, budget)
    return lambda q: ref(policy, graph, q, budget)


def policy_device(policy) -> str:
    """Where the policy's batched tensor work runs."""
    return str(getattr(policy, "device", "cpu"))


def fastest(fn, rounds: int) -> float:
    """Seconds taken by the fastest of ``rounds`` calls of ``fn()`` (timings on a shared machine: keep the quietest)."""
    best = float("inf")
    for _ in range(max(1, rounds)):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _loop(fn, queries) -> tuple[float, list[float]]:
    lat = []
    for q in queries:
        t = time.perf_counter()
        fn(q)
        lat.append(time.perf_counter() - t)
    return sum(lat), lat


def time_policy(policy, graph, queries: list[Query], budget: Budget, repeats: int, loop_queries: int) -> dict:
    """Reference loop, batches of one and the full batch, side by side; a warm-up call builds the caches.

    The loops run over the first ``loop_queries`` queries (per-query cost), the batch over all.
    Peak memory above the warm state (:class:`PeakMemory`) is taken for one query and for the full
    batch before the timed rounds.
    """
    t0 = time.perf_counter()
    policy.retrieve_batch(graph, queries[:1], budget)
    setup = time.perf_counter() - t0
    device = policy_device(policy)
    loop_fn = reference_loop(policy, graph, budget)
    with PeakMemory(device) as one_mem:
        policy.retrieve(graph, queries[0], budget)
    with PeakMemory(device) as batch_mem:
        policy.retrieve_batch(graph, queries, budget)
    few = queries[:loop_queries]
    loop, single, batch, lat = float("inf"), float("inf"), float("inf"), []
    for _ in range(repeats):
        total, cur = _loop(loop_fn, few)
        if total < loop:
            loop, lat = total, cur
        single = min(single, _loop(lambda q: policy.retrieve_batch(graph, [q], budget), few)[0])
        t = time.perf_counter()
        results = policy.retrieve_batch(graph, queries, budget)
        batch = min(batch, time.perf_counter() - t)
    n, m = len(queries), len(few)
    loop_q, single_q, batch_q = loop / m, single / m, batch / n
    return {
        "queries": n,
        "loop_queries": m,
        "setup_s": round(setup, 4),
        "device": device,
        "single_peak_mb": one_mem.peak_mb,
        "batched_peak_mb": batch_mem.peak_mb,
        "loop_ms_per_query": 1e3 * loop_q,
        "loop_ms_median": 1e3 * statistics.median(lat),
        "single_batch_ms_per_query": 1e3 * single_q,
        "batched_ms_per_query": 1e3 * batch_q,
        "loop_qps": 1 / loop_q,
        "batched_qps": 1 / batch_q,
        "batched_over_loop": loop_q / batch_q,
        "batched_over_single": single_q / batch_q,
        "mean_loaded": sum(len(r.loaded) for r in results) / n,
        "mean_tokens": sum(r.loaded_tokens for r in results) / n,
    }


# bounded policies: their retrieve_batch split into its two stages, entry selection and the traversal from the entries
TRAVERSALS = ("beta_bfs", "router")


def select_stage(policy, graph, queries: list[Query], budget: Budget):
    """Entry selection as ``retrieve_batch`` runs it: the scope (which keeps the cosines the router's
    walk reuses) and the entry rows."""
    scope = Scope.single(graph, queries, policy.device)
    return scope, policy.select_entries(scope, budget)


def traverse_stage(policy, selected, budget: Budget):
    """The traversal from the selected entries, results included."""
    scope, entries = selected
    return policy.retrieve_scope(scope, budget, entries)


def time_other_device(policy, graph, queries: list[Query], budget: Budget, repeats: int, main_ms: float) -> dict:
    """The batched path of ``policy`` (built on another device) on the same queries: ms per query,
    peak memory, and the speed-up over the main device's batched path (``main_ms``)."""
    policy.retrieve_batch(graph, queries[:1], budget)  # warm-up: per-graph tables move to the device
    with PeakMemory(policy_device(policy)) as mem:
        policy.retrieve_batch(graph, queries, budget)
    # Retrieval lists are read back, so the device is synchronised when the call returns
    ms = 1e3 * fastest(lambda: policy.retrieve_batch(graph, queries, budget), repeats) / len(queries)
    return {
        "batched_ms_per_query": ms,
        "batched_qps": 1e3 / ms,
        "batched_peak_mb": mem.peak_mb,
        "speedup_over_main_device": main_ms / ms,
    }


def time_traversal(policy, graph, queries: list[Query], budget: Budget, rounds: int) -> dict:
    """A bounded policy split into batched entry selection and the batched bounded traversal, each
    the fastest of ``rounds`` (millisecond timings on a shared machine: keep the quietest).

    ``traversal_ms_per_query`` follows a fresh selection each round, as in ``retrieve_batch``;
    ``traversal_warm_ms_per_query`` repeats the traversal back to back on one selection, so the
    graph's tables stay in cache: the difference is the cost of cache misses, not of work.
    """
    best_sel, best_trav = float("inf"), float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        selected = select_stage(policy, graph, queries, budget)
        best_sel = min(best_sel, time.perf_counter() - t)
        t = time.perf_counter()
        traverse_stage(policy, selected, budget)
        best_trav = min(best_trav, time.perf_counter() - t)
    best_warm = fastest(lambda: traverse_stage(policy, selected, budget), rounds)
    n = len(queries)
    return {
        "entry_ms_per_query": 1e3 * best_sel / n,
        "traversal_ms_per_query": 1e3 * best_trav / n,
        "traversal_warm_ms_per_query": 1e3 * best_warm / n,
    }


def time_graph(cfg: DictConfig, graph, queries: list[Query], budget: Budget, synthetic: bool) -> dict:
    """All policies on one graph."""
    out = {}
    for name in cfg.policies:
        policy = build_policy(name, graph, cfg.seed, resolve_device(cfg.device))
        qs = queries[: cfg.get(f"{name}_queries", None) or len(queries)] if synthetic else queries
        res = time_policy(policy, graph, qs, budget, cfg.repeats, min(len(qs), cfg.loop_queries))
        if name in TRAVERSALS:
            res.update(time_traversal(policy, graph, qs, budget, cfg.traversal_rounds))
        res["on"] = {
            dev: time_other_device(
                build_policy(name, graph, cfg.seed, resolve_device(dev)),
                graph,
                qs,
                budget,
                cfg.repeats,
                res["batched_ms_per_query"],
            )
            for dev in cfg.compare_devices
        }
        out[name] = res
        log.info(
            "  %-11s loop %8.3f ms/q  batch-of-1 %8.3f ms/q  batched %8.4f ms/q"
            "  (x%.1f vs loop, x%.1f vs batch-of-1)%s",
            name,
            res["loop_ms_per_query"],
            res["single_batch_ms_per_query"],
            res["batched_ms_per_query"],
            res["batched_over_loop"],
            res["batched_over_single"],
            f"  traversal {res['traversal_ms_per_query']:.4f} ms/q" if "traversal_ms_per_query" in res else "",
        )
    return out


def locomo_benchmark(cfg: DictConfig, budget: Budget) -> dict | None:
    """Every policy on each saved LoCoMo graph with its own questions; ratios over the whole set."""
    path = Path(cfg.locomo.path)
    if not cfg.locomo.enabled or not (path / "manifest.json").exists():
        return None
    gs = GraphSet.load(path)
    names = list(gs.graphs)[: cfg.locomo.graphs or None]
    by_graph: dict[str, list[Query]] = {}
    for q, meta in zip(gs.queries(), gs.questions):
        by_graph.setdefault(meta.graph, []).append(q)
    report = {"path": str(path), "build_stats": gs.stats, "graphs": {}, "total": {}}
    for name in names:
        graph = gs.graphs[name]
        log.info(
            "locomo %s: %d nodes, %d edges, %d questions", name, graph.num_nodes, graph.num_edges, len(by_graph[name])
        )
        report["graphs"][name] = {
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "policies": time_graph(cfg, graph, by_graph.get(name, []), budget, False),
        }
    for policy in cfg.policies:
        rows = [g["policies"][policy] for g in report["graphs"].values()]
        n = sum(r["queries"] for r in rows)
        loop = sum(r["loop_ms_per_query"] * r["queries"] for r in rows)
        single = sum(r["single_batch_ms_per_query"] * r["queries"] for r in rows)
        batch = sum(r["batched_ms_per_query"] * r["queries"] for r in rows)
        report["total"][policy] = {
            "queries": n,
            "loop_qps": 1e3 * n / loop,
            "batched_qps": 1e3 * n / batch,
            "batched_over_loop": loop / batch,
            "batched_over_single": single / batch,
        }
        for dev in cfg.compare_devices:
            other = sum(r["on"][dev]["batched_ms_per_query"] * r["queries"] for r in rows)
            report["total"][policy][f"{dev}_batched_qps"] = 1e3 * n / other
            report["total"][policy][f"{dev}_over_main_device"] = batch / other
    return report


def dataset_benchmark(cfg: DictConfig, name: str, path: str, budget: Budget) -> dict | None:
    """Every question of a saved graph set, per policy, side by side: the per-query reference
    loop (on ``dataset_loop_queries`` questions spread over the set), one ``retrieve_batch`` per
    graph, and the evaluation harness's batched path (:func:`graphmem.eval.harness.run_retrievals`:
    ``retrieve_graphs`` over groups of graphs, each group one call over the graphs' union)."""
    if not (Path(path) / "manifest.json").exists():
        log.info("dataset %s: no graph set at %s, skipped", name, path)
        return None
    gs = GraphSet.load(path)
    queries, graph_of = gs.queries(), [q.graph for q in gs.questions]
    by_graph: dict[str, list[Query]] = {}
    for q, g in zip(queries, graph_of):
        by_graph.setdefault(g, []).append(q)
    step = max(1, len(queries) // max(1, cfg.dataset_loop_queries))
    sample = list(zip(graph_of, queries))[::step][: cfg.dataset_loop_queries]
    first = gs.graphs[graph_of[0]]
    out = {
        "path": str(path),
        "graphs": len(by_graph),
        "questions": len(queries),
        "nodes": sum(gs.graphs[g].num_nodes for g in by_graph),
        "policies": {},
    }
    for policy_name in cfg.policies:
        policy = build_policy(policy_name, first, cfg.seed, resolve_device(cfg.device))
        t = time.perf_counter()
        run_retrievals(policy, gs.graphs, queries, graph_of, budget)  # warm-up: unions and their tables are built
        setup = time.perf_counter() - t
        rounds = cfg.dataset_repeats
        loops = [(reference_loop(policy, gs.graphs[g], budget), q) for g, q in sample]
        loop = fastest(lambda: [fn(q) for fn, q in loops], rounds) / len(sample)
        per_graph = fastest(
            lambda: [policy.retrieve_batch(gs.graphs[g], qs, budget) for g, qs in by_graph.items()], rounds
        ) / len(queries)
        batched = fastest(lambda: run_retrievals(policy, gs.graphs, queries, graph_of, budget), rounds) / len(queries)
        res = {
            "loop_ms_per_query": 1e3 * loop,
            "per_graph_ms_per_query": 1e3 * per_graph,
            "batched_ms_per_query": 1e3 * batched,
            "setup_s": round(setup, 3),
            "loop_queries": len(sample),
            "batched_over_loop": loop / batched,
            "batched_over_per_graph": per_graph / batched,
            "per_graph_over_loop": loop / per_graph,
            "on": {},
        }
        for dev in cfg.compare_devices:
            other = build_policy(policy_name, first, cfg.seed, resolve_device(dev))
            run_retrievals(other, gs.graphs, queries, graph_of, budget)
            best = fastest(lambda: run_retrievals(other, gs.graphs, queries, graph_of, budget), rounds) / len(queries)
            res["on"][dev] = {"batched_ms_per_query": 1e3 * best, "speedup_over_main_device": batched / best}
        out["policies"][policy_name] = res
        log.info(
            "  %s %-11s loop %7.3f ms/q  one call per graph %7.3f ms/q  batched %7.4f ms/q"
            "  (x%.1f vs loop, x%.1f vs per graph)",
            name,
            policy_name,
            res["loop_ms_per_query"],
            res["per_graph_ms_per_query"],
            res["batched_ms_per_query"],
            res["batched_over_loop"],
            res["batched_over_per_graph"],
        )
    return out


def train_benchmark(cfg: DictConfig) -> dict:
    """Router training episodes/s of the walk trainer's step (``rollout`` + ``update``) at batch 1 and
    batched, per phase (:func:`train_throughput.training_throughput`), on ``device`` and each of
    ``compare_devices``, with each one's batched rate (reinforce phase) over the main device's."""
    t = cfg.train
    runs = {}
    for dev in [cfg.device, *cfg.compare_devices]:
        name = str(resolve_device(dev))
        runs[name] = training_throughput(t.nodes, t.dim, t.batch, t.single, t.repeats, name, cfg.seed)
        for phase, r in runs[name]["phases"].items():
            log.info(
                "train %s on %s: %.0f episodes/s at batch 1, %.0f batched (x%.1f)",
                phase,
                name,
                r["batch1_episodes_per_s"],
                r["batched_episodes_per_s"],
                r["speedup"],
            )
    main = next(iter(runs.values()))
    for run in runs.values():
        run["batched_over_main_device"] = run["batched_episodes_per_s"] / main["batched_episodes_per_s"]
    return runs


def run(cfg: DictConfig) -> dict:
    """Run the benchmark described by ``cfg`` (see ``configs/benchmark.yaml``); returns the report."""
    threads = torch.get_num_threads()
    set_threads(cfg)
    try:
        return _run(cfg)
    finally:
        torch.set_num_threads(threads)


def scaling_suite(cfg: DictConfig, budget: Budget) -> dict:
    """``+suite=scaling`` / ``scaling_ann`` / ``scaling_text``: only that scale sweep
    (:func:`scale_sweep.scaling_sweep`, :func:`text_sweep.text_scaling_sweep`), written to
    ``<out_dir>/<suite.out_file>``."""
    suite = plain(cfg.suite)
    report = {"config": plain(cfg)}
    report["command"] = " ".join(["python scripts/benchmark.py", *sys.argv[1:]])
    report.update(sweep_for(suite["name"])(suite, budget, log=log.info))
    report["process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = run_path(cfg.out_dir, check_name("suite.out_file", suite["out_file"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, report, indent=2)
    log.info(
        "growth of end-to-end p50 (largest / smallest size): %s",
        {k: v["p50_largest_over_smallest"] for k, v in report["growth"].items()},
    )
    log.info("wrote %s", out)
    return report


def _run(cfg: DictConfig) -> dict:
    budget = typed(cfg.budget, Budget)
    suite = cfg.get("suite")
    if suite is not None:
        sweep_for(suite.get("name"))  # an unknown suite name: the error names the known ones
        run_path(cfg.out_dir, check_name("suite.out_file", suite.get("out_file")))  # inside out_dir, before the sweep
        return scaling_suite(cfg, budget)
    report: dict = {
        "config": plain(cfg),
        "torch_threads": torch.get_num_threads(),
        "sizes": {},
    }
    progress = bool(cfg.get("progress", True))
    report["locomo"] = locomo_benchmark(cfg, budget)
    report["datasets"] = {
        Path(path).name: res
        for path in tqdm(cfg.datasets, desc="graph sets", disable=not progress)
        if (res := dataset_benchmark(cfg, Path(path).name, path, budget)) is not None
    }
    if cfg.train.enabled:
        report["train"] = train_benchmark(cfg)
    for size in tqdm(cfg.sizes, desc="synthetic sizes", disable=not progress):
        t = time.perf_counter()
        graph = make_synthetic_graph(int(size), avg_degree=cfg.avg_degree, dim=cfg.dim, seed=cfg.seed)
        node_tokens(graph)
        entry = {"nodes": graph.num_nodes, "edges": graph.num_edges, "build_s": round(time.perf_counter() - t, 3)}
        log.info("graph %d nodes, %d edges built in %.1fs", graph.num_nodes, graph.num_edges, entry["build_s"])
        queries = make_queries(graph, cfg.num_queries, cfg.query_noise, cfg.seed + 1)
        entry["policies"] = time_graph(cfg, graph, queries, budget, True)
        report["sizes"][str(size)] = entry
    report["growth"] = growth(report)
    report["process_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "benchmark.json", report, indent=2)
    if cfg.plot and report["sizes"]:
        plot(report, out / "benchmark.png")
    log.info("growth (largest / smallest size): %s", json.dumps(report["growth"]))
    log.info("wrote %s", out / "benchmark.json")
    track(cfg, report, out)
    return report


TIMINGS = ("loop_ms_per_query", "single_batch_ms_per_query", "batched_ms_per_query", "batched_over_loop")
SET_TIMINGS = ("loop_ms_per_query", "per_graph_ms_per_query", "batched_ms_per_query", "batched_over_loop")


def track(cfg: DictConfig, report: dict, out: Path) -> None:
    """One ``benchmark`` run: the saved graph sets read as inputs; batched ms per query against the
    synthetic graph size as a curve (step metric ``nodes``); tables of every synthetic, LoCoMo-graph,
    whole-set and training timing; the growth figures in the summary; ``benchmark.json`` and
    ``benchmark.png`` as one results artifact."""
    group = experiment_group("benchmark", "latency")
    with make_tracker(cfg.logger, cfg, out, name="benchmark", job_type="benchmark", group=group) as tracker:
        for path in {*cfg.datasets, *([cfg.locomo.path] if report.get("locomo") else [])}:
            use_graphset(tracker, Path(path).resolve())
        tracker.define_metric("nodes")
        tracker.define_metric("latency/*", step_metric="nodes")
        rows = []
        for entry in report["sizes"].values():
            policies = entry["policies"]
            tracker.log(
                {"nodes": entry["nodes"], **{f"latency/{p}": r["batched_ms_per_query"] for p, r in policies.items()}}
            )
            rows += [
                [entry["nodes"], p, *(r[k] for k in TIMINGS), r.get("traversal_ms_per_query")]
                for p, r in policies.items()
            ]
        tracker.log_table("synthetic", ["nodes", "policy", *TIMINGS, "traversal_ms_per_query"], rows)
        if report.get("locomo"):
            graphs = report["locomo"]["graphs"].items()
            tracker.log_table(
                "locomo_graphs",
                ["graph", "nodes", "policy", *TIMINGS],
                [[g, e["nodes"], p, *(r[k] for k in TIMINGS)] for g, e in graphs for p, r in e["policies"].items()],
            )
        sets = report.get("datasets", {}).items()
        tracker.log_table(
            "graph_sets",
            ["graph_set", "questions", "policy", *SET_TIMINGS],
            [
                [name, d["questions"], p, *(r[k] for k in SET_TIMINGS)]
                for name, d in sets
                for p, r in d["policies"].items()
            ],
        )
        if report.get("train"):
            columns = ["device", "batch1_episodes_per_s", "batched_episodes_per_s", "speedup"]
            tracker.log_table("train", columns, [[d, *(r[c] for c in columns[1:])] for d, r in report["train"].items()])
        tracker.update_summary({f"growth/{k}": v for k, v in report["growth"].items()})
        files = [f for f in ("benchmark.json", "benchmark.png") if (out / f).is_file()]
        tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


def growth(report: dict) -> dict:
    """Latency at the largest size over the smallest, per policy (batched), and the spread
    (max / min over sizes) of each bounded policy's traversal latency (flat: within 2x)."""
    sizes = list(report["sizes"].values())
    if len(sizes) < 2:
        return {}
    first, last = sizes[0]["policies"], sizes[-1]["policies"]
    out = {name: last[name]["batched_ms_per_query"] / first[name]["batched_ms_per_query"] for name in last}
    for name in TRAVERSALS:
        if name in last:
            for kind in ("traversal", "traversal_warm"):
                trav = [s["policies"][name][f"{kind}_ms_per_query"] for s in sizes]
                out[f"{name}_{kind}_max_over_min"] = max(trav) / min(trav)
                out[f"{name}_{kind}_flat_within_2x"] = max(trav) / min(trav) <= 2.0
    return out


def plot(report: dict, path: Path) -> None:
    """Latency vs size (log-log) and batched/loop speed-up on the LoCoMo set and per synthetic size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in report["sizes"]]
    entries = list(report["sizes"].values())
    names = list(entries[0]["policies"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        ax1.plot(
            sizes, [e["policies"][name]["batched_ms_per_query"] for e in entries], marker="o", label=f"{name} (batched)"
        )
    for name, style in zip(TRAVERSALS, ("k--", "k:")):
        if name in names:
            ax1.plot(
                sizes,
                [e["policies"][name]["traversal_ms_per_query"] for e in entries],
                style,
                marker="s",
                label=f"{name} traversal only",
            )
    ax1.set(xscale="log", yscale="log", xlabel="nodes", ylabel="ms per query", title="latency vs graph size")
    ax1.legend(fontsize=7)
    groups = [(f"{s:,}", {n: e["policies"][n]["batched_over_loop"] for n in names}) for s, e in zip(sizes, entries)]
    for label, res in reversed(list(report.get("datasets", {}).items())):
        groups.insert(0, (f"{label}\nwhole set", {n: r["batched_over_loop"] for n, r in res["policies"].items()}))
    if report.get("locomo"):
        groups.insert(
            0, ("LoCoMo\nper graph", {n: t["batched_over_loop"] for n, t in report["locomo"]["total"].items()})
        )
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        ax2.bar([j + i * width for j in range(len(groups))], [g.get(name, 0.0) for _, g in groups], width, label=name)
    ax2.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], [label for label, _ in groups])
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.axhline(50.0, color="red", lw=0.8, ls="--")  # 50x reference line
    ax2.tick_params(axis="x", labelsize=7)
    ax2.set(
        yscale="log",
        xlabel="graph sets / synthetic nodes",
        ylabel="batched qps / reference loop qps",
        title="batched vs per-query loop",
    )
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main("benchmark", run)
