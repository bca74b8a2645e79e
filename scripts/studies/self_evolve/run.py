"""Writer-reader self-evolution (SAGE §4.2): per round, writer update -> rebuild graphs -> reader fine-tune.

    python scripts/studies/self_evolve/run.py data=locomo graphset=outputs/graphs/locomo \
        writer.reader_checkpoint=runs/gnn/locomo.pt writer.model=smollm2

Round ``t``: (1) GRPO-train the writer against the current frozen reader on windows of the training
graphs; (2) the writer's triples replace the ``entity`` edges of every graph (it sees fragment text
only, ``rebuild_batch`` windows per ``generate`` call), joined by the builder's rule with the fan-out
caps and Phase-1 features the graph set was built with (its manifest's ``graph`` settings);
(3) fine-tune the reader on the rebuilt training graphs, best epoch on the validation graphs.
``rounds.json`` records per round the writer reward curve, triples and entity edges, and test-graph
evidence recall of the reader: on the graphs it started from, on the rebuilt graphs before its
fine-tune, and after it. ``max_graphs`` keeps only the first graphs by sorted name (to bound the
rebuild on CPU); the split is then made over those. With ``writer.max_steps=0`` step 1 is skipped
and ``writer.model`` (e.g. the folder ``scripts/train_writer.py save_model=...`` wrote) rebuilds the
graphs as it is.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import GraphConfig
from graphmem.config.cli import load_graphset, restrict_graphs, set_threads
from graphmem.config.entry import main, typed
from graphmem.core import Budget
from graphmem.policies.gnn import load_reader
from graphmem.store.io import write_json
from rl.gnn.split import split_examples
from rl.gnn.train import GNNTrainConfig, evidence_recall, save_checkpoint, train_reader
from rl.writer.grpo import WriterConfig, load_writer, rewrite_graph
from rl.writer.run import plot_curve, run_writer

log = logging.getLogger(__name__)


def entity_edge_count(graphs) -> int:
    return sum(
        int((g.edge_type == g.relations.index("entity")).sum()) for g in graphs.values() if "entity" in g.relations
    )


def run(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    set_threads(cfg)
    wcfg = typed(cfg.writer, WriterConfig)
    tcfg = typed(cfg.train, GNNTrainConfig)
    budget = typed(cfg.budget, Budget)
    reader, _ = load_reader(wcfg.reader_checkpoint, "writer.reader_checkpoint")
    gs = restrict_graphs(load_graphset(cfg), sorted(str(n) for n in cfg.get("graphs") or []))
    graph_cfg = GraphConfig(**gs.provenance["graph"])
    rounds = []
    for t in range(int(cfg.rounds)):
        t0 = time.perf_counter()
        parts, ex = split_examples(gs, cfg.split, budget)
        start = evidence_recall(reader, ex["test"], budget) if ex["test"] else None
        wcfg_t = dataclasses.replace(wcfg, output_dir=str(out_dir / f"writer_round{t}"), seed=wcfg.seed + t)
        if wcfg.max_steps > 0:  # 1. writer update, reader frozen
            trainer, writer_result, _ = run_writer(gs, cfg, wcfg_t, reader)  # per completion: in quarters_by_task
            model, tokenizer = trainer.model, trainer.processing_class
        else:  # writer.max_steps=0: rebuild with the writer as given (e.g. one trained by train_writer.py)
            (model, tokenizer), writer_result = (
                load_writer(wcfg.model, wcfg.seed, wcfg.tiny_hidden, wcfg.tiny_layers),
                {"curve": [], "model": wcfg.model},
            )
        if writer_result["curve"]:
            plot_curve(
                writer_result["curve"], out_dir / f"reward_curve_round{t}.png", f"self-evolution round {t}: writer"
            )
        t1 = time.perf_counter()
        graphs, triples = {}, 0
        for name, graph in gs.graphs.items():  # 2. rebuild graphs, with the caps they were built with
            graphs[name], n = rewrite_graph(
                model, tokenizer, graph, wcfg_t, graph_cfg, int(cfg.get("rebuild_batch", 8))
            )
            triples += n
        entity_before = entity_edge_count(gs.graphs)
        gs = dataclasses.replace(gs, graphs=graphs)
        t2 = time.perf_counter()
        _, ex = split_examples(gs, cfg.split, budget)
        before = evidence_recall(reader, ex["test"], budget) if ex["test"] else None
        reader, history = train_reader(
            ex["train"], dataclasses.replace(tcfg, seed=tcfg.seed + t), budget, val=ex["val"] or None, reader=reader
        )  # 3. reader fine-tune
        after = evidence_recall(reader, ex["test"], budget) if ex["test"] else None
        save_checkpoint(reader, out_dir / f"reader_round{t}.pt", tcfg)
        rounds.append(
            {
                "round": t,
                "split": parts,
                "writer": writer_result,
                "triples_written": triples,
                "entity_edges_before": entity_before,
                "entity_edges_after": entity_edge_count(graphs),
                "test_recall_start_graphs": start,
                "test_recall_rebuilt_before_finetune": before,
                "test_recall_rebuilt_after_finetune": after,
                "reader_history": history,
                "seconds": {
                    "writer": round(t1 - t0, 1),
                    "rebuild": round(t2 - t1, 1),
                    "reader": round(time.perf_counter() - t2, 1),
                },
            }
        )
        log.info(
            "%s", json.dumps({k: v for k, v in rounds[-1].items() if k not in ("writer", "reader_history", "split")})
        )
        write_json(out_dir / "rounds.json", {"writer": asdict(wcfg), "train": asdict(tcfg), "rounds": rounds}, indent=2)


if __name__ == "__main__":
    main("self_evolve", run)
