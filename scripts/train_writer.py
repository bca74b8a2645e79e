"""Train the memory writer: supervised warm start on silver triples, then GRPO against a frozen
GNN reader (SAGE §4.1).

    python scripts/train_writer.py data=locomo graphset=outputs/graphs/locomo \\
        writer.reader_checkpoint=runs/gnn/reader.pt save_model=runs/writer/model
    python scripts/train_writer.py data=locomo writer.model=smollm2 writer.chat_template=true sft.learning_rate=5e-5

Tasks are windows of fragments of the *training* graphs (fold ``split.fold`` of
:func:`rl.splits.conversation_folds`, the same split as ``scripts/train_gnn.py``). The warm start
(:mod:`rl.writer_sft`, TRL's ``SFTTrainer``) fits the silver triples the graph builder's entity
extractor gives on those tasks; the share of well-formed greedy outputs is measured on tasks of
the *validation* graphs before and after it. GRPO follows. ``writer.report_to=wandb`` sends both
trainers' logs (GRPO: reward, its parts and the well-formed share per step) to W&B. Writes
``reward_curve.json`` (the per-step means TRL logs), ``reward_curve.png``, ``completion_rewards.jsonl``
(task, step and reward parts of every sampled completion) and, last, ``results.json``, with the
first- and last-quarter means per step and the paired-by-task comparison of the two quarters
(:func:`rl.grpo_writer.quarter_comparison`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_gnn import set_threads, split_parts  # noqa: E402  (sibling script: shared split)

from graphmem.build.entities import make_entity_extractor  # noqa: E402
from graphmem.cli import load_graphset, run_or_exit  # noqa: E402
from graphmem.eval.harness import write_jsonl  # noqa: E402
from graphmem.eval.report import write_json  # noqa: E402
from graphmem.io import atomic_write  # noqa: E402
from graphmem.launch import check_command_line  # noqa: E402
from graphmem.tracking import experiment_group  # noqa: E402
from rl.gnn_train import load_reader  # noqa: E402
from rl.grpo_writer import (  # noqa: E402
    WriterConfig,
    load_writer,
    quarter_comparison,
    tasks_from_graphset,
    train_writer,
)
from rl.writer_sft import SFTConfig, warm_start, well_formed_fraction  # noqa: E402

log = logging.getLogger(__name__)

REWARD_KEYS = (
    "reward",
    "reward_std",
    "rewards/task_reward/mean",
    "rewards/format_reward/mean",
    "rewards/well_formed/mean",
    "completions/mean_length",
)


def quarter_means(curve: list[dict], key: str = "reward") -> dict[str, float | None]:
    """Mean of ``key`` over the first and the last quarter of the steps."""
    values = [c[key] for c in curve if key in c]
    q = len(values) // 4
    if q == 0:
        return {"first_quarter": None, "last_quarter": None}
    return {"first_quarter": sum(values[:q]) / q, "last_quarter": sum(values[-q:]) / q}


def writer_tasks(gs, cfg: DictConfig, wcfg: WriterConfig, part: str = "train", limit: int | None = None):
    """Seeded windows of the ``part`` graphs (at most ``limit``, default ``cfg.max_tasks``) and the split."""
    parts = split_parts(gs, cfg.split)
    keep = set(parts[part])
    tasks = tasks_from_graphset(gs, [i for i, q in enumerate(gs.questions) if q.graph in keep], wcfg.fragments_per_task)
    random.Random(wcfg.seed).shuffle(tasks)
    return tasks[: cfg.max_tasks if limit is None else limit], parts


def run_writer(gs, cfg: DictConfig, wcfg: WriterConfig, reader, model=None, tokenizer=None):
    """GRPO of the writer (``model`` or ``wcfg.model``) on the training tasks; ``(trainer, result, records)``
    with the per-completion reward records of :func:`rl.grpo_writer.train_writer`."""
    tasks, parts = writer_tasks(gs, cfg, wcfg)
    t0 = time.perf_counter()
    trainer, history, records = train_writer(tasks, reader, wcfg, model=model, tokenizer=tokenizer)
    curve = [{k: h[k] for k in ("step",) + REWARD_KEYS if k in h} for h in history]
    return (
        trainer,
        {
            "tasks": len(tasks),
            "split": parts,
            "seconds": round(time.perf_counter() - t0, 2),
            "reward_quarters": quarter_means(curve),
            "quarters_by_task": quarter_comparison(records, wcfg.lambda_fmt),
            "curve": curve,
        },
        records,
    )


def run_warm_start(gs, cfg: DictConfig, wcfg: WriterConfig, sft: SFTConfig):
    """Load the writer, measure well-formed output on validation tasks, warm-start it, measure again."""
    model, tokenizer = load_writer(wcfg.model, wcfg.seed, wcfg.tiny_hidden, wcfg.tiny_layers)
    held_out, _ = writer_tasks(gs, cfg, wcfg, "val", sft.eval_tasks)
    result: dict = {
        "eval_tasks": len(held_out),
        "well_formed_before": well_formed_fraction(model, tokenizer, held_out, wcfg),
    }
    if sft.enabled:
        tasks, _ = writer_tasks(gs, cfg, wcfg, "train", cfg.sft_tasks)
        extractor = make_entity_extractor(cfg.graph.entity_extractor)
        t0 = time.perf_counter()
        model, losses = warm_start(model, tokenizer, tasks, extractor, wcfg, sft)
        result |= {"tasks": len(tasks), "seconds": round(time.perf_counter() - t0, 1), "loss": losses}
        result["well_formed_after"] = well_formed_fraction(model, tokenizer, held_out, wcfg)
    log.info("warm start: well-formed %s", json.dumps({k: v for k, v in result.items() if k.startswith("well")}))
    return model, tokenizer, result


def moving_mean(values: list[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each position (fewer at the start)."""
    return [sum(values[max(0, i + 1 - window) : i + 1]) / (i + 1 - max(0, i + 1 - window)) for i in range(len(values))]


def plot_curve(curve: list[dict], path: Path, title: str, window: int = 8) -> Path:
    """Per GRPO step: the mean reward (thin, ± its std across completions) and, bold, its moving mean
    over ``window`` steps; the task and format parts and the well-formed share as moving means."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in curve]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    reward = [c["reward"] for c in curve]
    std = [c.get("reward_std", 0.0) for c in curve]
    ax.plot(steps, reward, color="C0", linewidth=0.7, alpha=0.5, label="reward (task + λ_fmt·format), per step")
    ax.fill_between(steps, [r - s for r, s in zip(reward, std)], [r + s for r, s in zip(reward, std)], alpha=0.1)
    ax.plot(steps, moving_mean(reward, window), color="C0", linewidth=2.2, label=f"reward, mean of {window} steps")
    for color, (key, label) in zip(
        ("C1", "C2", "C3"),
        (
            ("rewards/task_reward/mean", "r_task − λ_rep·ρ_rep"),
            ("rewards/format_reward/mean", "r_fmt"),
            ("rewards/well_formed/mean", "well-formed share"),
        ),
    ):
        if all(key in c for c in curve):
            values = moving_mean([c[key] for c in curve], window)
            ax.plot(steps, values, color=color, linestyle="--", label=f"{label}, mean of {window} steps")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
    return path


def _quarter_line(quarters: dict) -> str:
    """``part: Δ [lo, hi] (n tasks)`` for each part of :func:`rl.grpo_writer.quarter_comparison`."""
    return "; ".join(
        f"{part}: {c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] p={c['p_value']:.3g} (n={c['n']})"
        if c
        else f"{part}: n/a"
        for part, c in quarters.items()
    )


@hydra.main(config_path="../configs", config_name="writer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_or_exit(run, cfg)


def run(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    set_threads(cfg)
    wcfg = WriterConfig(**OmegaConf.to_container(cfg.writer, resolve=True))
    if not wcfg.reader_checkpoint:
        raise ValueError("writer.reader_checkpoint is required: train a reader with scripts/train_gnn.py first")
    sft = SFTConfig(**OmegaConf.to_container(cfg.sft, resolve=True))
    reader = load_reader(wcfg.reader_checkpoint)
    gs = load_graphset(cfg)
    if "wandb" in wcfg.report_to:  # both trainers report there (TRL's W&B callback): group, job type, folder
        os.environ.setdefault("WANDB_RUN_GROUP", experiment_group("train", gs.dataset))
        os.environ.setdefault("WANDB_JOB_TYPE", "train")
        os.environ.setdefault("WANDB_PROJECT", "graphmem")
        os.environ.setdefault("WANDB_MODE", "offline")
        out_dir.mkdir(parents=True, exist_ok=True)
        os.environ.setdefault("WANDB_DIR", str(out_dir))
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
    write_json(result["curve"], out_dir / "reward_curve.json")
    if result["curve"]:
        title = f"GRPO writer ({wcfg.model}) on {gs.dataset}"
        atomic_write(out_dir / "reward_curve.png", lambda tmp: plot_curve(result["curve"], tmp, title))
    write_json(payload, out_dir / "results.json")  # last: its presence marks a finished run
    for row in result["curve"]:
        log.info("%s", row)


if __name__ == "__main__":
    check_command_line("writer")  # every job's config composed and checked before Hydra writes .hydra/
    main()
