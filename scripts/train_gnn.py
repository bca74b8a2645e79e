"""Train the GNN reader on gold evidence of the training graphs; report budgeted evidence recall.

    python scripts/train_gnn.py data=locomo graphset=outputs/graphs/locomo checkpoint=runs/gnn/locomo.pt
    python scripts/train_gnn.py data=hotpotqa graphset=outputs/graphs/hotpotqa checkpoint=runs/gnn/hotpotqa.pt
    python scripts/train_gnn.py +experiment=multihop_gnn checkpoint=<dir>/gnn.pt out_dir=<dir>   # the multihop pools

Splits the graph set by graph with fold ``split.fold`` of :func:`rl.common.splits.conversation_folds`
(the router's split for the same settings), trains with ``rl.gnn.train.train_reader`` (best epoch
on validation), writes the checkpoint, ``<checkpoint>.split.json`` (the graph names of each part,
which ``scripts/evaluate.py graphs=<file>`` reads to evaluate on the test graphs only) and
``results.json`` (train/val/test recall of the reader and of the cosine-ranked walk under the same
budget, per-epoch history, the training-only sets ``train_sets`` whose graphs joined the training split:
file, SHA-256, counts). Tracked as one ``train`` run (:mod:`graphmem.tracking`): the graph set as
its input, the loss and validation-recall curve per epoch, the recalls in the run summary, the
checkpoint as model artifact ``gnn-<dataset>-fold<k>`` and ``results.json`` as a result artifact.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import hydra
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import check_configs
from graphmem.builders.pipeline import TRAIN_SETS_EXAMPLE, open_train_graphset, train_sources
from graphmem.config.cli import config_list, graphset_location, load_graphset, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.errors import DivergedError
from graphmem.eval.provenance import run_provenance
from graphmem.policies.gnn import load_reader
from graphmem.store.checkpoint import checkpoint_inputs
from graphmem.store.io import write_json
from graphmem.store.lockfile import FileLock, LockBusyError, describe
from graphmem.store.run_folder import RunFolderError, open_run_folder
from graphmem.tracking import experiment_group, make_tracker, use_graphset
from rl.common.checkpoint import CheckpointError
from rl.common.logging import TrackerLogger
from rl.common.splits import check_fraction, check_share
from rl.gnn.split import split_examples, write_split
from rl.gnn.train import (
    GNNTrainConfig,
    cosine_walk_recall,
    evidence_recall,
    save_checkpoint,
    train_reader,
)

log = logging.getLogger(__name__)


def run(cfg: DictConfig) -> dict:
    out_dir = Path(cfg.out_dir or hydra.core.hydra_config.HydraConfig.get().runtime.output_dir)
    train_cfg = typed(cfg.train, GNNTrainConfig)
    budget = typed(cfg.budget, Budget)
    check_fraction("split.val_fraction", cfg.split.val_fraction)
    check_share("train_fraction", cfg.get("train_fraction", 1.0))
    data = plain(cfg.data)
    check_configs(data, plain(cfg.graph))
    train_sources(data, train_set_items(cfg), train_files=False)
    checkpoint = Path(hydra.utils.to_absolute_path(cfg.checkpoint))
    with open_run_folder(out_dir, plain(cfg), resume=False, kind="train_gnn") as folder:
        try:  # the checkpoint path is shared by default (runs/gnn/reader.pt): one writer at a time
            ckpt_lock = FileLock(checkpoint.with_name(checkpoint.name + ".lock"), {"run_id": folder.run_id}).acquire()
        except LockBusyError as err:
            raise RunFolderError(f"checkpoint {checkpoint} is being written by {describe(err.holder)}") from None
        try:
            return train_and_save(cfg, out_dir, folder.run_id, train_cfg, budget)
        finally:
            ckpt_lock.release()


def train_set_items(cfg: DictConfig) -> list:
    """``train_sets``: the training-only sets of any kind, each a mapping of data keys; empty when absent."""
    return config_list(cfg, "train_sets", TRAIN_SETS_EXAMPLE)


def train_and_save(cfg: DictConfig, out_dir: Path, run_id: str, train_cfg: GNNTrainConfig, budget: Budget) -> dict:
    """Train on the split's training graphs, select on validation; write checkpoint, split and results."""
    threads = set_threads(cfg)
    gs = load_graphset(cfg)
    extra = open_train_graphset(
        plain(cfg.data),
        plain(cfg.graph),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=cfg.progress,
        train_sets=train_set_items(cfg),
        train_files=False,
        main=gs,
    )
    fraction, seed = float(cfg.get("train_fraction", 1.0)), int(cfg.get("train_seed", 0))
    parts, ex = split_examples(gs, cfg.split, budget, extra, fraction, seed)
    log.info(
        "%s graphs; %s questions; %d threads",
        {k: len(v) for k, v in parts.items()},
        {k: sum(len(e.gold) for e in v) for k, v in ex.items()},
        threads,
    )
    name = f"gnn-{gs.dataset}-fold{cfg.split.fold}"
    with make_tracker(
        cfg.logger, cfg, out_dir, name=name, job_type="train", group=experiment_group("train", gs.dataset)
    ) as tracker:
        use_graphset(tracker, graphset_location(cfg))
        init = None
        if cfg.init_checkpoint:
            init, _ = load_reader(hydra.utils.to_absolute_path(cfg.init_checkpoint), "init_checkpoint")
        t0 = time.perf_counter()
        try:
            reader, history = train_reader(
                ex["train"], train_cfg, budget, val=ex["val"] or None, reader=init, progress=cfg.progress
            )
        except DivergedError as err:  # nothing of a diverged reader is a result
            raise DivergedError(f"fold {cfg.split.fold} reader: {err}; no checkpoint or results.json written") from None
        curve = TrackerLogger(tracker)
        for row in history:
            curve.log(row, row["epoch"])
        metrics = {"train_seconds": round(time.perf_counter() - t0, 2)}
        for part, examples in ex.items():
            if examples:
                metrics[f"{part}_recall_gnn"] = evidence_recall(reader, examples, budget, chunk=train_cfg.eval_chunk)
                metrics[f"{part}_recall_cosine_walk"] = cosine_walk_recall(examples, budget)
        inputs = checkpoint_inputs(gs, parts["train"] + parts.get("train_only", []), parts["val"])
        save_checkpoint(reader, cfg.checkpoint, train_cfg, metrics, run_id=run_id, inputs=inputs)
        split_file = write_split(parts, cfg.checkpoint, run_id)
        out_dir.mkdir(parents=True, exist_ok=True)
        payload = {
            "run_id": run_id,
            "dataset": gs.dataset,
            "graphset": gs.provenance,
            "budget": asdict(budget),
            "split": parts,
            "train_questions": sum(len(e.qids) for e in ex["train"]),  # those trained on (with a gold node)
            "split_file": str(split_file),
            "train_sets": [] if extra is None else extra.provenance["train_sets"],  # each set: file, sha256, counts
            "train": asdict(train_cfg),
            "metrics": metrics,
            "history": history,
            "checkpoint": str(cfg.checkpoint),
            "provenance": run_provenance(plain(cfg), gs, {}),  # written last: finished
        }
        write_json(out_dir / "results.json", payload, indent=2)
        best_val = max((r["val_recall"] for r in history if "val_recall" in r), default=None)
        summary = {k.replace("_", "/", 1) if k != "train_seconds" else k: v for k, v in metrics.items()}
        tracker.update_summary({"val/best_recall": best_val, **summary})  # e.g. test/recall_gnn
        ckpt_meta = {"dataset": gs.dataset, "fold": int(cfg.split.fold), "config_hash": gs.config_hash}
        tracker.log_artifact(hydra.utils.to_absolute_path(cfg.checkpoint), "model", name, ["best"], ckpt_meta)
        tracker.log_artifact(out_dir / "results.json", "results")
    log.info("%s", json.dumps(metrics, indent=2))
    return payload


if __name__ == "__main__":
    main("gnn", run, errors=(CheckpointError,))
