"""Writer-reader self-evolution (SAGE §4.2): per round, writer update -> rebuild graphs -> reader fine-tune.

    python scripts/self_evolve.py +experiment=self_evolve data=locomo

Round ``t``: (1) GRPO-train the writer against the current frozen reader; (2) the writer's
triples replace the ``entity`` edges of every graph (it sees fragment text only); (3) fine-tune the
reader on the rebuilt training graphs. ``rounds.json`` records per round the writer reward curve,
the entity-edge counts, and test recall of the reader on the rebuilt graphs before and after its
fine-tune (best epoch chosen on validation graphs).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gnn import load_graphset, split_examples  # noqa: E402  (sibling scripts)
from train_writer import run_writer  # noqa: E402

from graphmem.policies.base import Budget  # noqa: E402
from models.gnn_reader import GNNReader  # noqa: E402
from rl.gnn_train import GNNTrainConfig, evidence_recall, save_checkpoint, train_reader  # noqa: E402
from rl.grpo_writer import WriterConfig, rewrite_graph  # noqa: E402


@hydra.main(config_path="../configs", config_name="writer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if "rounds" not in cfg:
        raise ValueError("run with +experiment=self_evolve (it sets rounds, train and budget)")
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    wcfg = WriterConfig(**OmegaConf.to_container(cfg.writer, resolve=True))
    tcfg = GNNTrainConfig(**OmegaConf.to_container(cfg.train, resolve=True))
    budget = Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
    reader = GNNReader.from_checkpoint(wcfg.reader_checkpoint)
    gs = load_graphset(cfg)
    rounds = []
    for t in range(int(cfg.rounds)):
        wcfg_t = dataclasses.replace(wcfg, output_dir=str(out_dir / f"writer_round{t}"), seed=wcfg.seed + t)
        trainer, writer_result = run_writer(gs, cfg, wcfg_t, reader)           # 1. writer update, reader frozen
        graphs, triples = {}, 0
        for name, graph in gs.graphs.items():                                  # 2. rebuild graphs
            graphs[name], n = rewrite_graph(trainer.model, trainer.processing_class, graph, wcfg_t)
            triples += n
        gs = dataclasses.replace(gs, graphs=graphs)
        _, ex = split_examples(gs, cfg.split, budget)
        before = evidence_recall(reader, ex["test"], budget) if ex["test"] else None
        reader, history = train_reader(ex["train"], dataclasses.replace(tcfg, seed=tcfg.seed + t), budget,
                                       val=ex["val"] or None, reader=reader)    # 3. reader fine-tune
        after = evidence_recall(reader, ex["test"], budget) if ex["test"] else None
        save_checkpoint(reader, out_dir / f"reader_round{t}.pt", tcfg)
        entity = sum(int((g.edge_type == g.relations.index("entity")).sum()) for g in graphs.values() if "entity" in g.relations)
        rounds.append({"round": t, "writer": writer_result, "triples_written": triples, "entity_edges": entity,
                       "test_recall_before_finetune": before, "test_recall_after_finetune": after,
                       "reader_history": history})
        print(json.dumps({k: v for k, v in rounds[-1].items() if k not in ("writer", "reader_history")}))
        (out_dir / "rounds.json").write_text(json.dumps({"writer": asdict(wcfg), "train": asdict(tcfg), "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
