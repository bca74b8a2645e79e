"""Is entity linking by mention worth it on a set? Decided on the *validation* graphs, before any writer is trained.

    python scripts/studies/writer_heldout/link_check.py experiment=writer_heldout_2wiki

The proxy writer is the builder's own silver triples (:func:`rl.writer.sft.warm_start_silver`, what the warm start
imitates: ``sft.max_entities`` entities, ``sft.max_lines`` lines per window of ``writer.fragments_per_task``).
Its triples replace the validation graphs' entity edges three times: without linking, with it, and with it keeping
only the entities their fragments name (``grounded``; :func:`rl.writer.grpo.rewrite_entity_edges`), beside the
builder's graphs and the graphs with no entity edges.
The study's frozen reader (trained as ``run.py`` trains it, saved under ``out_dir``) answers the validation
questions over each arm, paired by question against the builder's graphs and ``linked − unlinked``.
The same differences against the graphs with no entity edges are also split by where a question's gold passages
lie (``by_window``, :func:`gold_windows`): all in one window of the writer (the only questions a reward read on the
window's own graph can score) or in different windows.
Writes ``link_results`` (default ``docs/results/writer_link_check_<data.name>.json``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from frozen import command_line, frozen_reader, paired_json, reader_recall
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import GraphConfig, make_entity_extractor
from graphmem.config.cli import load_graphset, restrict_graphs, set_threads
from graphmem.config.entry import main, typed
from graphmem.core import Budget
from graphmem.store.io import write_json
from rl.gnn.split import split_examples
from rl.writer.format import parse_triples
from rl.writer.grpo import WriterConfig, graph_windows, rewrite_entity_edges
from rl.writer.sft import SFTConfig, warm_start_silver

log = logging.getLogger(__name__)
ARMS = ("builder", "none", "silver", "silver_linked", "silver_grounded")
PAIRS = (
    ("silver", "builder"),
    ("silver_linked", "builder"),
    ("silver_linked", "silver"),
    ("silver_grounded", "silver_linked"),
    ("builder", "none"),
)


def silver_arms(gs, names, cfg: DictConfig, graph_cfg: GraphConfig) -> tuple[dict, dict]:
    """The four arms' graphs over ``names`` and the silver triple and entity-edge counts."""
    extractor = make_entity_extractor(cfg.graph.entity_extractor)  # the warm start's extractor
    sft = typed(cfg.sft, SFTConfig)
    wcfg = typed(cfg.writer, WriterConfig)
    arms = {arm: {} for arm in ARMS}
    counts = {"triples": 0, "entity_edges": {arm: 0 for arm in ARMS}}
    for name in names:
        graph, triples = gs.graphs[name], []
        for window in graph_windows(graph, wcfg.fragments_per_task, name):
            triples += parse_triples(warm_start_silver(window, extractor, sft, wcfg), window.fragment_ids)[0]
        arms["builder"][name] = graph
        arms["none"][name] = rewrite_entity_edges(graph, [], graph_cfg)
        arms["silver"][name] = rewrite_entity_edges(graph, triples, graph_cfg)
        arms["silver_linked"][name] = rewrite_entity_edges(graph, triples, graph_cfg, link=True)
        arms["silver_grounded"][name] = rewrite_entity_edges(graph, triples, graph_cfg, link=True, grounded=True)
        counts["triples"] += len(triples)
        for arm in ARMS:
            g = arms[arm][name]
            counts["entity_edges"][arm] += int((g.edge_type == g.relations.index("entity")).sum())
    return arms, counts


def gold_windows(gs, names, k: int) -> dict[str, str]:
    """Per question of the graphs ``names`` with two or more gold passages in its graph: ``one_window`` when they all
    lie in one window of ``k`` consecutive nodes (:func:`rl.writer.grpo.graph_windows`), else ``across_windows``."""
    keep, out = set(names), {}
    for q in gs.questions:
        if q.graph in keep:
            graph = gs.graphs[q.graph]
            rows = [graph.index_of(e) for e in q.evidence if graph.has_node(e)]
            if len(rows) >= 2:
                out[q.qid] = "one_window" if len({r // k for r in rows}) == 1 else "across_windows"
    return out


def by_window(recall: dict, where: dict[str, str]) -> dict:
    """``builder − none`` and ``silver_linked − none`` paired over the questions of each :func:`gold_windows` group."""
    out = {}
    for group in ("one_window", "across_windows"):
        pick = {arm: {q: v for q, v in recall[arm].items() if where.get(q) == group} for arm in recall}
        out[group] = {"questions": len(pick["builder"])} | {
            f"{a}_minus_none": paired_json(a, pick[a], "none", pick["none"], "evidence_recall")
            for a in ("builder", "silver_linked")
        }
    return out


def run(cfg: DictConfig) -> dict:
    set_threads(cfg)
    t0 = time.perf_counter()
    budget = typed(cfg.budget, Budget)
    gs = restrict_graphs(load_graphset(cfg), sorted(str(n) for n in cfg.get("graphs") or []))
    graph_cfg = GraphConfig(**gs.provenance["graph"])
    parts, _ = split_examples(gs, cfg.split, budget)
    out_dir = Path(cfg.out_dir or HydraConfig.get().runtime.output_dir)
    reader, reader_info = frozen_reader(gs, cfg, budget, out_dir, cfg.writer.reader_checkpoint)
    arms, counts = silver_arms(gs, parts["val"], cfg, graph_cfg)
    recall = {arm: reader_recall(reader, gs, arms[arm], parts["val"], budget) for arm in ARMS}
    payload = {
        "command": cfg.get("command") or command_line("link_check.py"),
        "dataset": cfg.data.name,
        "fold": int(cfg.split.fold),
        "graphs": parts["val"],
        "reader": reader_info,
        "questions": len(recall["builder"]),
        **counts,
        "reader_recall": {arm: sum(v.values()) / max(len(v), 1) for arm, v in recall.items()},
        "paired": {f"{a}_minus_{b}": paired_json(a, recall[a], b, recall[b], "evidence_recall") for a, b in PAIRS},
        "fragments_per_task": int(cfg.writer.fragments_per_task),
        "shown_only": bool(cfg.sft.get("shown_only")),
        "by_window": by_window(recall, gold_windows(gs, parts["val"], int(cfg.writer.fragments_per_task))),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    results = Path(cfg.get("link_results") or f"docs/results/writer_link_check_{cfg.data.name}.json")
    write_json(results, payload, indent=2)
    log.info("validation recall %s", payload["reader_recall"])
    return payload


if __name__ == "__main__":
    main("writer_heldout", run)
