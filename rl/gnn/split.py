"""The GNN reader's graph-level split of a graph set (fold ``split.fold`` of
:func:`rl.common.splits.conversation_folds`), its training examples per part, and the split file
written beside a checkpoint; shared by ``scripts/train_gnn.py``, ``scripts/train_writer.py`` and
``scripts/studies/self_evolve/run.py``."""

from __future__ import annotations

from pathlib import Path

from graphmem.core import Budget
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from rl.gnn.train import examples_from_graphset, graph_split


def split_parts(gs: GraphSet, split_cfg) -> dict[str, list[str]]:
    """``train`` / ``val`` / ``test`` graph names of the split ``split_cfg`` (k, fold, seed, val_fraction)."""
    return graph_split(
        list(gs.graphs), k=split_cfg.k, fold=split_cfg.fold, seed=split_cfg.seed, val_fraction=split_cfg.val_fraction
    )


def split_examples(gs: GraphSet, split_cfg, budget: Budget, extra: GraphSet | None = None) -> tuple[dict, dict]:
    """The split's parts and each part's training examples (:func:`examples_from_graphset`); the training-only
    set ``extra`` (``train_sets``), when given, adds its examples to ``train`` and its graph names as part
    ``train_only`` (never validated or tested on)."""
    parts = split_parts(gs, split_cfg)
    examples = {}
    for name, graphs in parts.items():
        keep = set(graphs)
        examples[name] = examples_from_graphset(gs, [i for i, q in enumerate(gs.questions) if q.graph in keep], budget)
    if extra is not None:
        parts["train_only"] = sorted(extra.graphs)
        examples["train"] += examples_from_graphset(extra, range(len(extra.questions)), budget)
    return parts, examples


def write_split(parts: dict[str, list[str]], checkpoint: str | Path, run_id: str | None = None) -> Path:
    """``<checkpoint>.split.json``: the parts (and the run's id), written atomically."""
    path = Path(str(checkpoint) + ".split.json")
    return write_json(path, {**parts, **({"run_id": run_id} if run_id else {})})
