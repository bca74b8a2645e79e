"""Train the learned router with REINFORCE and compare it with the heuristic policies on held-out conversations.

    python scripts/train.py                                   # one fold, small default trainer (minutes on CPU)
    python scripts/train.py +experiment=hage_full             # 5 folds x 200 epochs, paper hyperparameters
    python scripts/train.py +experiment=ablation              # every ablation variant over 5 folds, one table

For each fold (splits by conversation, :mod:`rl.splits`) and each variant (trainer overrides),
the router trains on the training conversations, is selected on the validation conversations,
and is evaluated once on the test conversations, next to the baselines, under the same budget.
Writes ``results.json`` (per fold, mean ± std over folds with ddof = 1, and paired per-question
statistics of every policy against ``stats.reference`` over all folds' test questions),
``results.md``, ``questions_<policy>.jsonl`` (every fold's test rows, with their fold) and
checkpoints in ``out_dir`` (in a multirun, in each job's sweep folder instead).
``train_extra=true`` adds the training-only files of the dataset (``data.train_files``) to the
training part of every fold.

    torchrun --nproc_per_node=4 scripts/train.py graphset=outputs/graphs/locomo   # data-parallel training
    python scripts/train.py -m hydra/launcher=joblib trainer.seed=0,1,2            # a local parallel sweep

Under ``torchrun`` every rank loads the graphs and trains its slice of each batch
(:mod:`rl.distributed`); rank 0 alone logs, evaluates and writes results.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from graphmem.cli import METRICS, guard_argv, load_graphset, policy_config, restrict_graphs, run_or_exit
from graphmem.device import resolve_device
from graphmem.eval.harness import evaluate_policy, write_jsonl
from graphmem.eval.report import fold_markdown, paired_table
from graphmem.eval.stats import compare_policies, comparisons_markdown, fold_summary
from graphmem.graphset import GraphSet, check_configs, open_train_graphset, union
from graphmem.io import atomic_write
from graphmem.policies import POLICIES, Budget, make_policy
from graphmem.policies.router import RouterPolicy
from graphmem.tracking import make_tracker
from rl.distributed import init_from_env, shutdown
from rl.logging import MultiLogger, PrintLogger
from rl.reinforce import TrainConfig, train
from rl.run_folder import open_run_folder_on_main
from rl.splits import check_fraction, conversation_folds

ARTIFACTS = ("results.json", "results.md", "questions_*.jsonl", "fold*/*/last.pt", "fold*/*/best.pt", "tracking")
"""What a run writes in its folder (rl.run_folder moves an earlier run's aside)."""


def load_train_graphset(cfg: DictConfig) -> GraphSet | None:
    """The dataset's training-only graphs and questions (``data.train_files``), built with the same graph config."""
    return open_train_graphset(
        OmegaConf.to_container(cfg.data, resolve=True),
        OmegaConf.to_container(cfg.graph, resolve=True),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=cfg.progress,
    )


def summarize(per_fold: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """policy -> metric -> {mean, std (ddof = 1; None for one fold), folds} over the folds."""
    return fold_summary(per_fold, METRICS)


def stats_config(cfg: DictConfig) -> dict[str, Any]:
    """The ``stats`` group (``reference`` policy of the paired comparisons, ``n_boot``); empty when absent."""
    return OmegaConf.to_container(cfg.stats, resolve=True) if cfg.get("stats") else {}


def question_counts(rows: dict[str, list[dict]]) -> dict[str, int]:
    """Test questions each policy was scored on, over all folds."""
    return {policy: len(r) for policy, r in rows.items()}


def output_dir(cfg: DictConfig) -> Path:
    """``out_dir``, or this job's own sweep folder in a multirun (so parallel jobs never share files)."""
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        return Path(hc.runtime.output_dir)
    return Path(hydra.utils.to_absolute_path(cfg.out_dir))


def run(cfg: DictConfig) -> dict[str, Any] | None:
    world = init_from_env(str(cfg.trainer.device))
    out = output_dir(cfg)
    budget = Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
    base = OmegaConf.to_container(cfg.trainer, resolve=True)
    variants = OmegaConf.to_container(cfg.variants, resolve=True) or {"router": {}}
    for name, overrides in variants.items():  # reject impossible settings before any work
        TrainConfig(**{**base, **overrides})
    stats = stats_config(cfg)
    reference = stats.get("reference")
    baseline_names = list(cfg.baselines)
    if reference and reference not in baseline_names and reference not in variants:
        baseline_names.append(reference)  # the paired statistics need the reference's test rows
    if cfg.get("train_extra") and not cfg.data.get("train_files"):
        raise ValueError(f"train_extra=true, but data {cfg.data.name!r} lists no train_files")
    baselines = {}
    for name in baseline_names:
        try:
            POLICIES.resolve(name)
        except ValueError:
            raise ValueError(f"unknown baseline policy {name!r}; registered: {sorted(POLICIES)}") from None
        try:
            baselines[name] = make_policy(name, **policy_config(name))
        except (OSError, TypeError, ValueError, KeyError) as err:
            raise ValueError(f"baseline {name!r} cannot be built from its policy config: {err}") from None
    if cfg.cv.k < 3 or any(not 0 <= f < cfg.cv.k for f in (cfg.cv.folds or [])):
        raise ValueError(
            f"cv.k must be >= 3 and cv.folds within [0, {cfg.cv.k}), got k={cfg.cv.k}, folds={cfg.cv.folds}"
        )
    check_fraction("cv.val_fraction", cfg.cv.val_fraction)
    check_configs(OmegaConf.to_container(cfg.data, resolve=True), OmegaConf.to_container(cfg.graph, resolve=True))
    device = world.device(resolve_device(base.get("device", "auto")))
    config = OmegaConf.to_container(cfg, resolve=True)
    with open_run_folder_on_main(world, out, config, base["resume"], device, artifacts=ARTIFACTS) as folder:
        return train_and_test(cfg, world, out, folder, budget, base, variants, baselines)


def train_and_test(cfg, world, out: Path, folder, budget: Budget, base, variants, baselines) -> dict[str, Any] | None:
    """Train every variant of every fold and test it next to the baselines; rank 0 returns the results."""
    if not world.is_main:
        world.barrier()  # rank 0 loads (or builds and caches) the graph set first
    gs = load_graphset(cfg)
    extra = load_train_graphset(cfg) if cfg.get("train_extra") else None
    if world.is_main:
        world.barrier()
        print("\n".join(gs.report.lines()))
        folder.check_graphset(gs.config_hash)
        if extra is not None:
            print(
                f"training-only: {len(extra.graphs)} graphs, {len(extra.questions)} questions ({cfg.data.train_files})"
            )
    train_graphs = gs.graphs if extra is None else union(gs, extra).graphs  # refuses shared graph names
    splits = conversation_folds(list(gs.graphs), k=cfg.cv.k, seed=cfg.cv.seed, val_fraction=cfg.cv.val_fraction)
    folds = list(cfg.cv.folds) if cfg.cv.folds is not None else list(range(cfg.cv.k))
    per_fold, records = [], []
    test_rows: dict[str, list[dict]] = {}
    started = time.perf_counter()
    tracker = make_tracker(
        cfg.logger if world.is_main else {"backend": "none"}, run_config=cfg, out_dir=out, name=f"train-{gs.dataset}"
    )
    for k in folds:
        split = splits[k]
        if world.is_main:
            print(f"fold {k}: train {len(split.train)} / val {len(split.val)} / test {len(split.test)} conversations")
        train_set, val_set, test_set = (restrict_graphs(gs, part) for part in (split.train, split.val, split.test))
        train_q, train_e = train_set.questions, train_set.query_embeddings
        if extra is not None:
            train_q, train_e = train_q + extra.questions, torch.cat([train_e, extra.query_embeddings])
        val_q, val_e = val_set.questions, val_set.query_embeddings
        test_q = test_set.questions
        fold_metrics: dict[str, dict[str, float]] = {}
        for name, overrides in variants.items():
            tc = TrainConfig(
                **{**base, **overrides, "checkpoint_dir": str(out / f"fold{k}" / name), "run_id": folder.run_id}
            )
            prefix = f"fold{k}/{name}/"
            logger = MultiLogger(
                PrintLogger(every=max(1, tc.epochs // 10)), _Prefixed(tracker, prefix, offset=1000 * k)
            )
            t0 = time.perf_counter()
            result = train(tc, train_graphs, train_q, train_e, val_q, val_e, budget=budget, logger=logger, world=world)
            train_s = time.perf_counter() - t0
            if not world.is_main:  # the other ranks only help train
                continue
            policy = RouterPolicy(
                router=result.router,
                intent=result.intent,
                edge_features=result.edges,
                device=tc.device,
                **{
                    k2: v
                    for k2, v in OmegaConf.to_container(cfg.policy).items()
                    if k2 in ("search", "beam_width", "entry_selector")
                },
            )
            res = evaluate_policy(policy, test_set, budget, progress=False)
            fold_metrics[name] = {m: res.overall.get(m) for m in METRICS}
            test_rows.setdefault(name, []).extend({"fold": k, **row} for row in res.rows)
            records.append(
                {
                    "fold": k,
                    "policy": name,
                    "best_epoch": result.best_epoch,
                    "val_recall": result.best_score,
                    "train_wall_s": round(train_s, 2),
                    "test": res.overall,
                    "trainer": dataclasses.asdict(tc),
                }
            )
        if not world.is_main:
            continue
        for name, policy in baselines.items():
            res = evaluate_policy(policy, test_set, budget, progress=False)
            fold_metrics[name] = {m: res.overall.get(m) for m in METRICS}
            test_rows.setdefault(name, []).extend({"fold": k, **row} for row in res.rows)
            records.append({"fold": k, "policy": name, "test": res.overall})
        per_fold.append(fold_metrics)
        print(fold_markdown(summarize([fold_metrics]), {p: len(test_q) for p in fold_metrics}))
    if not world.is_main:
        tracker.finish()
        return None
    summary = summarize(per_fold)
    stats = stats_config(cfg)
    reference = stats.get("reference")
    paired = (
        compare_policies(test_rows, reference, n_boot=int(stats.get("n_boot", 10_000)), seed=int(cfg.cv.seed))
        if reference
        else []
    )
    table = fold_markdown(summary, question_counts(test_rows))
    table += "\n\n" + comparisons_markdown(paired) if paired else ""
    print(f"\n{gs.dataset}: test graphs, {len(folds)} fold(s), budget {dataclasses.asdict(budget)}\n{table}")
    payload = {
        "run_id": folder.run_id,
        "dataset": gs.dataset,
        "graphset": gs.provenance,
        "budget": dataclasses.asdict(budget),
        "folds": folds,
        "summary": summary,
        "questions": question_counts(test_rows),
        "reference": reference,
        "paired": [c.to_json() for c in paired],
        "train_extra": None if extra is None else {"graphs": len(extra.graphs), "questions": len(extra.questions)},
        "records": records,
        "splits": [dataclasses.asdict(splits[k]) for k in folds],
        "wall_s": round(time.perf_counter() - started, 2),
        "device": str(resolve_device(base.get("device", "auto"))),
        "world_size": world.size,
    }
    atomic_write(out / "results.json", lambda tmp: tmp.write_text(json.dumps(payload, indent=1, default=str)))
    atomic_write(out / "results.md", lambda tmp: tmp.write_text(table + "\n"))
    for name, rows in test_rows.items():
        write_jsonl(rows, out / f"questions_{name}.jsonl")
    tracker.log_table(
        "summary", ["policy", *METRICS], [[p, *(ms[m]["mean"] for m in METRICS)] for p, ms in summary.items()]
    )
    if paired:
        tracker.log_table("paired_vs_reference", *paired_table(paired))
    tracker.finish()
    print(f"results written to {out}")
    return payload


class _Prefixed:
    """Forwards training rows to the tracker under ``prefix`` (steps offset per fold)."""

    def __init__(self, tracker, prefix: str, offset: int):
        self.tracker, self.prefix, self.offset = tracker, prefix, offset

    def log(self, metrics, step):
        self.tracker.log(
            {self.prefix + k: v for k, v in metrics.items() if isinstance(v, (int, float))}, step=step + self.offset
        )


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> None:
    try:
        run_or_exit(run, cfg)
    finally:
        shutdown()


if __name__ == "__main__":
    guard_argv()  # before Hydra writes the overrides to .hydra/
    main()
