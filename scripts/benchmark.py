"""Benchmark the heuristic policies on synthetic graphs of growing size.

For every size and policy it measures, on the same graph and queries in the same run:

* the per-query loop (``retrieve`` once per query) and the batched form (``retrieve_batch`` over
  all queries), as milliseconds per query, queries per second and their ratio;
* for ``beta_bfs`` also the traversal alone (Algorithm 1 lines 2-16 from precomputed entries)
  and the batched embedding entry selection, since only the traversal is bounded by the budget.

Writes ``benchmark.json`` and ``benchmark.png`` under ``out_dir``.

    python scripts/benchmark.py sizes=[1000,10000] num_queries=16
"""

from __future__ import annotations

import json
import logging
import statistics
import time
import warnings
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from graphmem.policies import Budget, Query, make_policy
from graphmem.synthetic import make_synthetic_graph

log = logging.getLogger("benchmark")
warnings.filterwarnings("ignore", message="Sparse")


def make_queries(graph, num: int, noise: float, seed: int) -> list[Query]:
    """Queries near random nodes: ``x_v + noise * N(0, I)``."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, graph.num_nodes, (num,), generator=gen)
    emb = graph.embeddings[rows] + noise * torch.randn(num, graph.dim, generator=gen) / graph.dim ** 0.5
    return [Query(f"bench-{i}", f"synthetic query {i}", emb[i]) for i in range(num)]


def time_policy(policy, graph, queries: list[Query], budget: Budget, repeats: int) -> dict:
    """Per-query loop vs batched, side by side; the first (warm-up) call builds the caches."""
    t0 = time.perf_counter()
    policy.retrieve_batch(graph, queries[:1], budget)
    setup = time.perf_counter() - t0
    loop_times, batch_times, per_query = [], [], []
    for _ in range(repeats):
        lat = []
        for q in queries:
            t = time.perf_counter()
            policy.retrieve(graph, q, budget)
            lat.append(time.perf_counter() - t)
        loop_times.append(sum(lat))
        per_query = lat if sum(lat) <= min(loop_times) else per_query
        t = time.perf_counter()
        results = policy.retrieve_batch(graph, queries, budget)
        batch_times.append(time.perf_counter() - t)
    n, loop, batch = len(queries), min(loop_times), min(batch_times)
    return {
        "queries": n, "setup_s": round(setup, 4),
        "loop_ms_per_query": 1e3 * loop / n, "loop_ms_median": 1e3 * statistics.median(per_query),
        "batched_ms_per_query": 1e3 * batch / n,
        "loop_qps": n / loop, "batched_qps": n / batch, "batched_over_loop": loop / batch,
        "mean_loaded": sum(len(r.loaded) for r in results) / n,
        "mean_tokens": sum(r.loaded_tokens for r in results) / n,
    }


def time_traversal(policy, graph, queries: list[Query], budget: Budget, repeats: int) -> dict:
    """Beta BFS split into batched entry selection and the bounded traversal."""
    best_sel, best_trav, lat = float("inf"), float("inf"), []
    for _ in range(max(repeats, 3)):  # sub-millisecond timings: keep the quietest of a few rounds
        t = time.perf_counter()
        entries = policy.entries.select(graph, queries, budget)
        best_sel = min(best_sel, time.perf_counter() - t)
        cur = []
        for e in entries:
            t = time.perf_counter()
            policy.traverse(graph, e, budget)
            cur.append(time.perf_counter() - t)
        if sum(cur) < best_trav:
            best_trav, lat = sum(cur), cur
    n = len(queries)
    return {"entry_ms_per_query": 1e3 * best_sel / n, "traversal_ms_per_query": 1e3 * best_trav / n,
            "traversal_ms_median": 1e3 * statistics.median(lat)}


def run(cfg: DictConfig) -> dict:
    """Run the benchmark described by ``cfg`` (see ``configs/benchmark.yaml``); returns the report."""
    threads = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    try:
        return _run(cfg)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: DictConfig) -> dict:
    budget = Budget(**OmegaConf.to_container(cfg.budget))
    report: dict = {"config": OmegaConf.to_container(cfg, resolve=True), "torch_threads": torch.get_num_threads(),
                    "sizes": {}}
    for size in cfg.sizes:
        t = time.perf_counter()
        graph = make_synthetic_graph(int(size), avg_degree=cfg.avg_degree, dim=cfg.dim, seed=cfg.seed)
        graph.node_tokens()
        entry = {"nodes": graph.num_nodes, "edges": graph.num_edges, "build_s": round(time.perf_counter() - t, 3),
                 "policies": {}}
        log.info("graph %d nodes, %d edges built in %.1fs", graph.num_nodes, graph.num_edges, entry["build_s"])
        queries = make_queries(graph, cfg.num_queries, cfg.query_noise, cfg.seed + 1)
        for name in cfg.policies:
            policy = make_policy(name)
            qs = queries[:cfg.ppr_queries] if name == "ppr" else queries
            res = time_policy(policy, graph, qs, budget, cfg.repeats)
            if name == "beta_bfs":
                res.update(time_traversal(policy, graph, qs, budget, cfg.repeats))
            entry["policies"][name] = res
            log.info("  %-11s loop %8.3f ms/q  batched %8.3f ms/q  (x%.1f)%s", name, res["loop_ms_per_query"],
                     res["batched_ms_per_query"], res["batched_over_loop"],
                     f"  traversal {res['traversal_ms_per_query']:.3f} ms/q" if "traversal_ms_per_query" in res else "")
        report["sizes"][str(size)] = entry
    report["growth"] = growth(report)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(report, indent=2))
    if cfg.plot:
        plot(report, out / "benchmark.png")
    log.info("growth (largest / smallest size): %s", json.dumps(report["growth"]))
    log.info("wrote %s", out / "benchmark.json")
    return report


def growth(report: dict) -> dict:
    """Latency at the largest size over the smallest, per policy (batched), and the spread of the
    median beta_bfs traversal latency across sizes (GraphMemory's bounded retrieval: flat within 2x)."""
    sizes = list(report["sizes"].values())
    if len(sizes) < 2:
        return {}
    first, last = sizes[0]["policies"], sizes[-1]["policies"]
    out = {name: last[name]["batched_ms_per_query"] / first[name]["batched_ms_per_query"] for name in last}
    if "beta_bfs" in last:
        trav = [s["policies"]["beta_bfs"]["traversal_ms_median"] for s in sizes]
        out["beta_bfs_traversal_max_over_min"] = max(trav) / min(trav)
        out["beta_bfs_traversal_flat_within_2x"] = max(trav) / min(trav) <= 2.0
    return out


def plot(report: dict, path: Path) -> None:
    """Latency vs size (log-log) and batched/loop speed-up per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [int(s) for s in report["sizes"]]
    entries = list(report["sizes"].values())
    names = list(entries[0]["policies"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name in names:
        ax1.plot(sizes, [e["policies"][name]["batched_ms_per_query"] for e in entries], marker="o", label=f"{name} (batched)")
    if "beta_bfs" in names:
        ax1.plot(sizes, [e["policies"]["beta_bfs"]["traversal_ms_per_query"] for e in entries], "k--", marker="s",
                 label="beta_bfs traversal only")
    ax1.set(xscale="log", yscale="log", xlabel="nodes", ylabel="ms per query", title="latency vs graph size")
    ax1.legend(fontsize=7)
    width = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        ax2.bar([j + i * width for j in range(len(sizes))], [e["policies"][name]["batched_over_loop"] for e in entries],
                width, label=name)
    ax2.set_xticks([j + 0.4 - width / 2 for j in range(len(sizes))], [f"{s:g}" for s in sizes])
    ax2.axhline(1.0, color="grey", lw=0.8)
    ax2.set(xlabel="nodes", ylabel="batched qps / loop qps", title="batched vs per-query loop")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@hydra.main(config_path="../configs", config_name="benchmark", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
