"""Train the memory writer with GRPO against a frozen GNN reader (SAGE §4.1).

    python scripts/train_writer.py data=locomo graphset=outputs/graphs/locomo \\
        writer.reader_checkpoint=runs/gnn/locomo.pt
    python scripts/train_writer.py data=locomo writer.model=smollm2 writer.max_steps=30 save_model=runs/writer/model

Tasks are windows of fragments of the *training* graphs (fold ``split.fold`` of
:func:`rl.splits.conversation_folds`, the same split as ``scripts/train_gnn.py``); writes
``results.json`` with the per-step reward curve, ``reward_curve.json`` and ``reward_curve.png``.
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
from train_gnn import load_graphset, set_threads, split_parts  # noqa: E402  (sibling script: shared loading and split)

from graphmem.cli import guard_argv, run_or_exit  # noqa: E402
from rl.gnn_train import load_reader  # noqa: E402
from rl.grpo_writer import WriterConfig, tasks_from_graphset, train_writer  # noqa: E402

REWARD_KEYS = (
    "reward",
    "reward_std",
    "rewards/task_reward/mean",
    "rewards/format_reward/mean",
    "completions/mean_length",
)


def writer_tasks(gs, cfg: DictConfig, wcfg: WriterConfig):
    parts = split_parts(gs, cfg.split)
    train = set(parts["train"])
    tasks = tasks_from_graphset(
        gs, [i for i, q in enumerate(gs.questions) if q.graph in train], wcfg.fragments_per_task
    )
    random.Random(wcfg.seed).shuffle(tasks)
    return tasks[: cfg.max_tasks], parts


def run_writer(gs, cfg: DictConfig, wcfg: WriterConfig, reader):
    tasks, parts = writer_tasks(gs, cfg, wcfg)
    t0 = time.perf_counter()
    trainer, history = train_writer(tasks, reader, wcfg)
    curve = [{k: h[k] for k in ("step",) + REWARD_KEYS if k in h} for h in history]
    return trainer, {"tasks": len(tasks), "split": parts, "seconds": round(time.perf_counter() - t0, 2), "curve": curve}


def plot_curve(curve: list[dict], path: Path, title: str) -> Path:
    """Mean group reward (± its std across completions) and its task / format parts per GRPO step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [c["step"] for c in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    reward = [c["reward"] for c in curve]
    std = [c.get("reward_std", 0.0) for c in curve]
    ax.plot(steps, reward, marker="o", label="reward (task + λ_fmt·format)")
    ax.fill_between(steps, [r - s for r, s in zip(reward, std)], [r + s for r, s in zip(reward, std)], alpha=0.2)
    for key, label in (("rewards/task_reward/mean", "r_task − λ_rep·ρ_rep"), ("rewards/format_reward/mean", "r_fmt")):
        if all(key in c for c in curve):
            ax.plot(steps, [c[key] for c in curve], linestyle="--", label=label)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reward")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@hydra.main(config_path="../configs", config_name="writer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_or_exit(run, cfg)


def run(cfg: DictConfig) -> None:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    set_threads(cfg)
    wcfg = WriterConfig(**OmegaConf.to_container(cfg.writer, resolve=True))
    if not wcfg.reader_checkpoint:
        raise ValueError("writer.reader_checkpoint is required: train a reader with scripts/train_gnn.py first")
    reader = load_reader(wcfg.reader_checkpoint)
    gs = load_graphset(cfg)
    trainer, result = run_writer(gs, cfg, wcfg, reader)
    if cfg.save_model:
        trainer.model.save_pretrained(cfg.save_model)
        trainer.processing_class.save_pretrained(cfg.save_model)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps({"writer": asdict(wcfg), **result}, indent=2))
    (out_dir / "reward_curve.json").write_text(json.dumps(result["curve"], indent=1))
    if result["curve"]:
        plot_curve(result["curve"], out_dir / "reward_curve.png", f"GRPO writer ({wcfg.model}) on {gs.dataset}")
    for row in result["curve"]:
        print(row)


if __name__ == "__main__":
    guard_argv()  # before Hydra writes the overrides to .hydra/
    main()
