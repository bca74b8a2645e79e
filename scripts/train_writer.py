"""Train the memory writer: supervised warm start on silver triples, then GRPO against a frozen
GNN reader (SAGE §4.1).

    python scripts/train_writer.py data=locomo graphset=outputs/graphs/locomo \\
        writer.reader_checkpoint=runs/gnn/reader.pt save_model=runs/writer/model
    python scripts/train_writer.py data=locomo writer.model=tiny sft.learning_rate=1e-3   # the fast test writer

Tasks are windows of fragments of the *training* graphs (fold ``split.fold`` of
:func:`rl.common.splits.conversation_folds`, the same split as ``scripts/train_gnn.py``). The warm start
(:mod:`rl.writer.sft`, TRL's ``SFTTrainer``) fits the silver triples the graph builder's entity
extractor gives on those tasks; the share of well-formed greedy outputs is measured on tasks of
the *validation* graphs before and after it. GRPO follows. ``writer.report_to=wandb`` sends both
trainers' logs (GRPO: reward, its parts and the well-formed share per step) to W&B. Writes
``reward_curve.json`` (the per-step means TRL logs), ``reward_curve.png``, ``completion_rewards.jsonl``
(task, step and reward parts of every sampled completion) and, last, ``results.json``, with the
first- and last-quarter means per step and the paired-by-task comparison of the two quarters
(:func:`rl.writer.grpo.quarter_comparison`).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import load_graphset, set_threads
from graphmem.config.entry import main, typed
from graphmem.eval.harness import write_jsonl
from graphmem.policies.gnn import load_reader
from graphmem.store.io import atomic_write, write_json
from rl.writer.grpo import WriterConfig
from rl.writer.run import plot_curve, report_to_wandb, run_warm_start, run_writer
from rl.writer.sft import SFTConfig

log = logging.getLogger(__name__)


def _quarter_line(quarters: dict) -> str:
    """``part: Δ [lo, hi] (n tasks)`` for each part of :func:`rl.writer.grpo.quarter_comparison`."""
    return "; ".join(
        f"{part}: {c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] p={c['p_value']:.3g} (n={c['n']})"
        if c
        else f"{part}: n/a"
        for part, c in quarters.items()
    )


def run(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    set_threads(cfg)
    wcfg = typed(cfg.writer, WriterConfig)
    if not wcfg.reader_checkpoint:
        raise ValueError("writer.reader_checkpoint is required: train a reader with scripts/train_gnn.py first")
    sft = typed(cfg.sft, SFTConfig)
    reader, _ = load_reader(wcfg.reader_checkpoint, "writer.reader_checkpoint")
    gs = load_graphset(cfg)
    report_to_wandb(wcfg, gs, out_dir)  # both trainers report there (TRL's W&B callback)
    model, tokenizer, warm = run_warm_start(gs, cfg, wcfg, sft)
    result, completions = {"curve": []}, []
    if wcfg.max_steps > 0:  # writer.max_steps=0: the warm start only
        trainer, result, completions = run_writer(gs, cfg, wcfg, reader, model, tokenizer)
        model, tokenizer = trainer.model, trainer.processing_class
        log.info("GRPO reward by quarter: %s", result["reward_quarters"])
        log.info("last - first quarter, paired by task: %s", _quarter_line(result["quarters_by_task"]))
    if cfg.save_model:
        model.save_pretrained(cfg.save_model)
        tokenizer.save_pretrained(cfg.save_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {"writer": asdict(wcfg), "sft": asdict(sft), "warm_start": warm, **result}
    write_jsonl(completions, out_dir / "completion_rewards.jsonl")
    write_json(out_dir / "reward_curve.json", result["curve"], indent=2)
    if result["curve"]:
        title = f"GRPO writer ({wcfg.model}) on {gs.dataset}"
        atomic_write(out_dir / "reward_curve.png", lambda tmp: plot_curve(result["curve"], tmp, title))
    write_json(out_dir / "results.json", payload, indent=2)  # last: its presence marks a finished run
    for row in result["curve"]:
        log.info("%s", row)


if __name__ == "__main__":
    main("writer", run)
