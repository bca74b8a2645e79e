"""What ``run.py`` and ``link_check.py`` share: the study's frozen reader, how it is measured on a set of graphs,
and the command line a results file records."""

from __future__ import annotations

import dataclasses
import shlex
import time
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from graphmem.config.entry import typed
from graphmem.core import Budget
from graphmem.eval.harness import evaluate_policy
from graphmem.eval.metrics import in_overall
from graphmem.eval.stats import paired_comparison, per_question
from graphmem.policies import make_policy
from graphmem.policies.gnn import load_reader
from rl.gnn.split import split_examples
from rl.gnn.train import GNNTrainConfig, save_checkpoint, train_reader


def frozen_reader(gs, cfg: DictConfig, budget: Budget, out_dir: Path, checkpoint: str | None = None):
    """The reader of ``checkpoint`` when given, else one trained (``reader`` settings) on the split's training
    graphs of ``gs`` (best validation epoch) and saved to ``<out_dir>/reader.pt``; ``(reader, info)``."""
    if checkpoint:
        return load_reader(checkpoint, "writer.reader_checkpoint")[0], {"checkpoint": str(checkpoint)}
    tcfg = typed(cfg.reader, GNNTrainConfig)
    _, ex = split_examples(gs, cfg.split, budget)
    t0 = time.perf_counter()
    reader, history = train_reader(ex["train"], tcfg, budget, val=ex["val"] or None)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = save_checkpoint(reader, out_dir / "reader.pt", tcfg)
    return reader, {"checkpoint": str(path), "seconds": round(time.perf_counter() - t0, 1), "history": history}


def reader_recall(reader, gs, graphs, names, budget: Budget) -> dict[str, float | None]:
    """Evidence recall per test question (``in_overall`` categories; those without gold evidence in their graph,
    where recall is undefined, left out) of the frozen reader over ``graphs``."""
    keep = set(names)
    questions = [q for q in gs.questions if q.graph in keep and in_overall(q.category)]
    arm = dataclasses.replace(gs, graphs={**gs.graphs, **graphs})
    rows = evaluate_policy(make_policy("gnn", reader=reader), arm, budget, questions=questions, progress=False).rows
    return {q: v for q, v in per_question(rows, "evidence_recall").items() if v is not None}


def paired_json(a: str, values: dict, b: str, reference: dict, metric: str) -> dict | None:
    """:func:`graphmem.eval.stats.paired_comparison` of two per-question dicts as JSON; None when none is shared."""
    c = paired_comparison(a, values, b, reference, metric)
    return None if c is None else c.to_json()


def command_line(script: str) -> str:
    """This run's command: ``python scripts/studies/writer_heldout/<script>`` and its Hydra overrides."""
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    return shlex.join(["python", f"scripts/studies/writer_heldout/{script}", *overrides])
