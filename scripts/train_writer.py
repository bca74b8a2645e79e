"""Train the memory writer with GRPO against a frozen GNN reader (SAGE §4.1).

    python scripts/train_writer.py data=locomo writer.model=tiny writer.max_steps=20
    python scripts/train_writer.py data=hotpotqa writer.model=smollm2 save_model=runs/writer/model

Tasks are windows of fragments of the *training* graphs (same seeded graph split as
``scripts/train_gnn.py``); writes ``results.json`` with the per-step reward curve.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gnn import load_graphset  # noqa: E402  (sibling script: shared graph-set loading)

from models.gnn_reader import GNNReader  # noqa: E402
from rl.gnn_train import split_graphs  # noqa: E402
from rl.grpo_writer import WriterConfig, tasks_from_graphset, train_writer  # noqa: E402

REWARD_KEYS = ("reward", "reward_std", "rewards/task_reward/mean", "rewards/format_reward/mean", "completions/mean_length")


def writer_tasks(gs, cfg: DictConfig, wcfg: WriterConfig):
    parts = split_graphs(list(gs.graphs), cfg.split.val_fraction, cfg.split.test_fraction, cfg.split.seed)
    train = set(parts["train"])
    tasks = tasks_from_graphset(gs, [i for i, q in enumerate(gs.questions) if q.graph in train], wcfg.fragments_per_task)
    random.Random(wcfg.seed).shuffle(tasks)
    return tasks[:cfg.max_tasks], parts


def run_writer(gs, cfg: DictConfig, wcfg: WriterConfig, reader):
    tasks, parts = writer_tasks(gs, cfg, wcfg)
    t0 = time.perf_counter()
    trainer, history = train_writer(tasks, reader, wcfg)
    curve = [{k: h[k] for k in ("step",) + REWARD_KEYS if k in h} for h in history]
    return trainer, {"tasks": len(tasks), "split": parts, "seconds": round(time.perf_counter() - t0, 2), "curve": curve}


@hydra.main(config_path="../configs", config_name="writer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    wcfg = WriterConfig(**OmegaConf.to_container(cfg.writer, resolve=True))
    if not wcfg.reader_checkpoint:
        raise ValueError("writer.reader_checkpoint is required: train a reader with scripts/train_gnn.py first")
    reader = GNNReader.from_checkpoint(wcfg.reader_checkpoint)
    trainer, result = run_writer(load_graphset(cfg), cfg, wcfg, reader)
    if cfg.save_model:
        trainer.model.save_pretrained(cfg.save_model)
        trainer.processing_class.save_pretrained(cfg.save_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps({"writer": asdict(wcfg), **result}, indent=2))
    for row in result["curve"]:
        print(row)


if __name__ == "__main__":
    main()
