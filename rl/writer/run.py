"""Runs of the writer on a graph set: the tasks of a split's part, GRPO with its reward summary
(:func:`run_writer`), the warm start measured before and after (:func:`run_warm_start`) and the
reward curve (:func:`plot_curve`); used by ``scripts/train_writer.py`` and ``scripts/studies/self_evolve/run.py``."""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path

from omegaconf import DictConfig

from graphmem.builders import GraphConfig
from graphmem.builders.entities import make_entity_extractor
from graphmem.tracking import experiment_group
from rl.gnn.split import split_parts
from rl.writer.grpo import (
    WriterConfig,
    generation_failures,
    quarter_comparison,
    tasks_from_graphset,
    train_writer,
    trainable_writer,
)
from rl.writer.model import trainable_state, weight_change
from rl.writer.sft import SFTConfig, warm_start, well_formed_fraction

log = logging.getLogger(__name__)

REWARD_KEYS = (
    "reward",
    "reward_std",
    "rewards/task_reward/mean",
    "rewards/format_reward/mean",
    "rewards/well_formed/mean",
    "rewards/r_rec/mean",
    "rewards/r_pre/mean",
    "rewards/rho_rep/mean",
    "completions/mean_length",
    "frac_reward_zero_std",
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
    questions = [i for i, q in enumerate(gs.questions) if q.graph in keep]
    whole = wcfg.reward_graph == "whole"
    tasks = tasks_from_graphset(gs, questions, wcfg.fragments_per_task, wcfg.min_gold, whole)
    random.Random(wcfg.seed).shuffle(tasks)
    return tasks[: cfg.max_tasks if limit is None else limit], parts


def report_to_wandb(wcfg: WriterConfig, gs, out_dir: Path, job_type: str = "train") -> None:
    """With ``wandb`` in ``wcfg.report_to``, both trainers' TRL callbacks report to one W&B run group
    (offline unless ``WANDB_MODE`` says otherwise), the run folder under ``out_dir``; else nothing."""
    if "wandb" not in wcfg.report_to:
        return

    os.environ.setdefault("WANDB_RUN_GROUP", experiment_group("train", gs.dataset))
    os.environ.setdefault("WANDB_JOB_TYPE", job_type)
    os.environ.setdefault("WANDB_PROJECT", "graphmem")
    os.environ.setdefault("WANDB_MODE", "offline")
    out_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("WANDB_DIR", str(out_dir))


def run_writer(gs, cfg: DictConfig, wcfg: WriterConfig, reader, model=None, tokenizer=None):
    """GRPO of the writer (``model`` or ``wcfg.model``) on the training tasks; ``(trainer, result, records)``
    with the per-completion reward records of :func:`rl.writer.grpo.train_writer`. ``result`` holds how far
    GRPO moved the trained parameters (:func:`rl.writer.model.weight_change`)."""
    tasks, parts = writer_tasks(gs, cfg, wcfg)
    if model is None:
        model, tokenizer, _ = trainable_writer(wcfg)
    start = trainable_state(model)
    t0 = time.perf_counter()
    graph_cfg = GraphConfig(**gs.provenance["graph"]) if wcfg.reward_graph == "whole" else None
    trainer, history, records = train_writer(tasks, reader, wcfg, model, tokenizer, graph_cfg)
    curve = [{k: h[k] for k in ("step",) + REWARD_KEYS if k in h} for h in history]
    failures = generation_failures(records)
    moved = weight_change(trainer.model, start)
    log.info("GRPO rollouts: %s; trained parameters moved: %s", json.dumps(failures), json.dumps(moved))
    return (
        trainer,
        {
            "tasks": len(tasks),
            "split": parts,
            "seconds": round(time.perf_counter() - t0, 2),
            "reward_quarters": quarter_means(curve),
            "quarters_by_task": quarter_comparison(records, wcfg.lambda_fmt),
            "generation_failures": failures,
            "weight_change": moved,
            "curve": curve,
        },
        records,
    )


def run_warm_start(gs, cfg: DictConfig, wcfg: WriterConfig, sft: SFTConfig):
    """Load the writer, measure well-formed output on validation tasks, warm-start it, measure again."""
    model, tokenizer, params = trainable_writer(wcfg)
    log.info("writer %s: %d of %d parameters trained", wcfg.model, params["trainable"], params["total"])
    held_out, _ = writer_tasks(gs, cfg, wcfg, "val", sft.eval_tasks)
    result: dict = {
        "parameters": params,
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
    over ``window`` steps; the task and format parts, the well-formed share and the parts r_rec, r_pre,
    ρ_rep of the task reward as moving means (each where the curve has it)."""
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
        ("C1", "C2", "C3", "C4", "C5", "C6"),
        (
            ("rewards/task_reward/mean", "r_task − λ_rep·ρ_rep"),
            ("rewards/format_reward/mean", "r_fmt"),
            ("rewards/well_formed/mean", "well-formed share"),
            ("rewards/r_rec/mean", "r_rec"),
            ("rewards/r_pre/mean", "r_pre"),
            ("rewards/rho_rep/mean", "ρ_rep"),
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
