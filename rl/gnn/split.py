"""The GNN reader's graph-level split of a graph set (fold ``split.fold`` of
:func:`rl.common.splits.conversation_folds`), its training examples per part, and the split file
written beside a checkpoint; shared by ``scripts/train_gnn.py``, ``scripts/train_writer.py`` and
``scripts/studies/self_evolve/run.py``."""

from __future__ import annotations

from pathlib import Path

from graphmem.core import Budget
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from rl.common.splits import subsample
from rl.gnn.train import examples_from_graphset, graph_split


def split_parts(gs: GraphSet, split_cfg) -> dict[str, list[str]]:
    """``train`` / ``val`` / ``test`` graph names of the split ``split_cfg`` (k, fold, seed, val_fraction)."""
    return graph_split(
        list(gs.graphs), k=split_cfg.k, fold=split_cfg.fold, seed=split_cfg.seed, val_fraction=split_cfg.val_fraction
    )


def split_examples(
    gs: GraphSet, split_cfg, budget: Budget, extra: GraphSet | None = None, fraction: float = 1.0, seed: int = 0
) -> tuple[dict, dict]:
    """The split's parts and each part's training examples (:func:`examples_from_graphset`); the training-only
    set ``extra`` (``train_sets``), when given, adds its examples to ``train`` and its graph names as part
    ``train_only`` (never validated or tested on). ``fraction < 1`` trains on that share of the training
    questions, the training-only ones included, drawn by ``seed`` (:func:`rl.common.splits.subsample`)."""
    parts = split_parts(gs, split_cfg)
    part_of = {g: name for name, graphs in parts.items() for g in graphs}
    at = {name: [i for i, q in enumerate(gs.questions) if part_of.get(q.graph) == name] for name in parts}
    extra_at = list(range(len(extra.questions))) if extra is not None else []
    if fraction < 1:
        every = [("main", i, gs.questions[i].qid) for i in at["train"]]
        every += [("extra", i, extra.questions[i].qid) for i in extra_at]
        kept = [every[j] for j in subsample([qid for *_, qid in every], fraction, seed)]
        at["train"] = [i for where, i, _ in kept if where == "main"]
        extra_at = [i for where, i, _ in kept if where == "extra"]
    examples = {name: examples_from_graphset(gs, rows, budget) for name, rows in at.items()}
    if extra is not None:
        parts["train_only"] = sorted(extra.graphs)
        examples["train"] += examples_from_graphset(extra, extra_at, budget)
    return parts, examples


def write_split(parts: dict[str, list[str]], checkpoint: str | Path, run_id: str | None = None) -> Path:
    """``<checkpoint>.split.json``: the parts (and the run's id), written atomically."""
    path = Path(str(checkpoint) + ".split.json")
    return write_json(path, {**parts, **({"run_id": run_id} if run_id else {})})
