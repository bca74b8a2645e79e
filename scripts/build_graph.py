"""Build and save a graph set: ``python scripts/build_graph.py data=locomo|hotpotqa graph=default|onehot``.

The set goes to ``graphset=<folder>`` when given, else to its own folder under ``graphset_dir``
(:func:`graphmem.builders.pipeline.graphset_dir`: another data file or other settings, another folder). A
folder holding a set of another source is refused, naming what it holds and what was asked;
``force=true`` replaces it and keeps the old set in ``<folder>/replaced-<its config hash>/``.

Logs the load report, node/edge counts by relation and degree statistics per graph and in
total, and the build time (embedding vs graph); writes a PNG of one node's 2-hop neighbourhood.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import to_absolute_path
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import check_configs, graphset_dir, reuse_or_build
from graphmem.config.cli import ConfigError, set_threads
from graphmem.config.entry import main, plain
from graphmem.core.graph import MemoryGraph
from graphmem.tracking import experiment_group, graphset_artifact, make_tracker

log = logging.getLogger(__name__)


def degree_stats(graphs: list[MemoryGraph]) -> dict:
    """Counts by relation and out-degree mean/median/max over the nodes of ``graphs``."""
    degrees = torch.cat([torch.bincount(g.edge_index[0], minlength=g.num_nodes) for g in graphs]).float()
    relations = graphs[0].relations
    by_rel = sum(
        (torch.bincount(g.edge_type, minlength=len(relations)) for g in graphs),
        torch.zeros(len(relations), dtype=torch.long),
    )
    return {
        "graphs": len(graphs),
        "nodes": int(degrees.numel()),
        "edges": int(degrees.sum()),
        "edges_by_relation": dict(zip(relations, by_rel.tolist())),
        "out_degree_mean": round(float(degrees.mean()), 2),
        "out_degree_median": float(degrees.median()),
        "out_degree_max": int(degrees.max()),
        "nodes_without_out_edges": int((degrees == 0).sum()),
    }


def plot_neighbourhood(graph: MemoryGraph, center: str | None, max_nodes: int, path: Path) -> Path:
    """Draw ``center``'s 2-hop out-neighbourhood: hop rings, edges coloured by relation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    src, dst = graph.edge_index
    c = graph.index_of(center) if center else int(torch.bincount(src, minlength=graph.num_nodes).argmax())
    hops = {c: 0}
    for depth in (1, 2):
        frontier = [v for v, d in hops.items() if d == depth - 1]
        for u in frontier:
            for v in dst[src == u].tolist():
                if v not in hops and len(hops) < max_nodes:
                    hops[v] = depth
    pos = {}
    for depth in (0, 1, 2):
        ring = sorted(v for v, d in hops.items() if d == depth)
        for k, v in enumerate(ring):
            angle = 2 * math.pi * k / max(len(ring), 1)
            pos[v] = (depth * math.cos(angle), depth * math.sin(angle))
    colours = dict(zip(graph.relations, ["tab:blue", "tab:green", "tab:red", "tab:orange", "tab:purple", "tab:gray"]))
    fig, ax = plt.subplots(figsize=(9, 9))
    drawn = set()
    for e in range(graph.num_edges):
        u, v = int(src[e]), int(dst[e])
        if u in pos and v in pos:
            rel = graph.relations[int(graph.edge_type[e])]
            ax.plot(*zip(pos[u], pos[v]), color=colours[rel], alpha=0.5, lw=1, label=rel if rel not in drawn else None)
            drawn.add(rel)
    for v, (x, y) in pos.items():
        ax.scatter(
            [x], [y], s=160 if v == c else 40, color="black" if v == c else "white", edgecolors="black", zorder=3
        )
        ax.annotate(graph.node_ids[v], (x, y), fontsize=6, ha="center", va="bottom")
    ax.set_title(
        f"{graph.info.get('sample_id') or graph.info.get('qid') or graph.info.get('corpus', '')}: "
        f"2-hop neighbourhood of {graph.node_ids[c]}"
    )
    ax.legend(loc="upper right")
    ax.set_axis_off()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def build(cfg: DictConfig) -> dict:
    """Build (or reuse) the graph set, log its statistics, and track one ``build`` run whose output
    is the set as a ``dataset`` artifact (an input, when a verified saved set was reused)."""
    set_threads(cfg)
    data_cfg, graph_cfg = check_configs(plain(cfg.data), plain(cfg.graph))
    if cfg.get("graphset"):
        out_dir = Path(to_absolute_path(cfg.graphset))
    else:
        out_dir = graphset_dir(to_absolute_path(cfg.graphset_dir), data_cfg, graph_cfg)
    run_dir = Path(to_absolute_path(cfg.out_dir) if cfg.get("out_dir") else HydraConfig.get().runtime.output_dir)
    start = time.perf_counter()
    graphset, status = reuse_or_build(
        data_cfg, graph_cfg, out_dir, progress=cfg.progress, force=cfg.force, check=lambda gs: check_plot(cfg, gs)
    )
    if status == "reused":
        log.info(
            "reused the saved graph set in %s (config hash matches, every file verified; force=true rebuilds)", out_dir
        )
    elif status != "built":
        log.warning("%s: %s", out_dir, status)
    total_s = time.perf_counter() - start

    log.info("%s", "\n".join(graphset.report.lines()))
    graphs = list(graphset.graphs.values())
    per_graph = {name: degree_stats([g]) for name, g in graphset.graphs.items()}
    for name, row in list(per_graph.items())[:20]:
        log.info("%s: %s", name, json.dumps(row))
    if len(graphs) > 20:
        log.info("... %d more graphs", len(graphs) - 20)
    total = degree_stats(graphs)
    log.info("total: %s", json.dumps(total))
    stats = graphset.stats
    log.info(
        "time: embedding %.2fs, graphs %.2fs, total %.2fs (%d questions) -> %s",
        stats.get("embed_s", 0.0),
        stats.get("graph_s", 0.0),
        total_s,
        len(graphset.questions),
        out_dir,
    )
    png = None
    if cfg.plot and graphs:
        name = cfg.plot_graph or next(iter(graphset.graphs))
        png = plot_neighbourhood(
            graphset.graphs[name], cfg.plot_node, cfg.plot_max_nodes, out_dir / "neighbourhood.png"
        )
        log.info("plot: %s", png)
    summary = {
        "status": status,
        "questions": len(graphset.questions),
        "config_hash": graphset.config_hash,
        "embed_s": stats.get("embed_s", 0.0),
        "graph_s": stats.get("graph_s", 0.0),
        "total_s": round(total_s, 2),
        **{k: v for k, v in total.items() if k != "edges_by_relation"},
        **{f"edges/{rel}": n for rel, n in total["edges_by_relation"].items()},
    }
    _track(cfg, run_dir, graphset.dataset, out_dir, status, summary, per_graph, png)
    return summary


def check_plot(cfg: DictConfig, graphset) -> None:
    """Refuse a ``plot_graph`` / ``plot_node`` the set does not have, before the set is committed."""
    if not cfg.plot:
        return
    name = cfg.plot_graph or next(iter(graphset.graphs))
    if name not in graphset.graphs:
        raise ConfigError(
            f"plot_graph={name!r} is not a graph of this set; its graphs: {list(graphset.graphs)[:5]} ..."
        )
    if cfg.plot_node is not None and str(cfg.plot_node) not in graphset.graphs[name].node_ids:
        raise ConfigError(f"plot_node={cfg.plot_node!r} is not a node of graph {name!r}")


def _track(cfg, run_dir: Path, dataset: str, out_dir: Path, status: str, summary, per_graph, png) -> None:
    """One ``build`` run: statistics in the summary, a per-graph table, the graph set as its output."""
    ref = graphset_artifact(out_dir)
    group = experiment_group("build", dataset)
    with make_tracker(cfg.logger, cfg, run_dir, name=f"build-{ref.name}", job_type="build", group=group) as tracker:
        tracker.update_summary(summary)
        columns = ["graph", "nodes", "edges", "out_degree_mean", "out_degree_max", "nodes_without_out_edges"]
        tracker.log_table(
            "graphs", columns, [[name, *(row[c] for c in columns[1:])] for name, row in per_graph.items()]
        )
        if status == "reused":  # made by an earlier build: this run read it
            tracker.use_artifact(ref)
        else:
            tracker.log_artifact(ref)
        if png is not None:
            tracker.log_artifact(png, "plot", name=tracker.run_artifact_name("neighbourhood"))


if __name__ == "__main__":
    main("build_graph", build)
