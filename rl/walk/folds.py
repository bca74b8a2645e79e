"""The fold loop: on each fold, every variant of the learned walk is trained on the training graphs, selected on the
validation graphs and tested once on the test graphs, next to the baselines and under the same budget; the test
rows of all folds are then summarised and paired per question (:class:`graphmem.eval.folds.FoldTests`).

``scripts/train.py`` runs it over the folds of a graph set (:func:`rl.common.splits.source_folds`), with its
tracking, checkpoints and records in a :class:`FoldHooks`; ``scripts/studies/relation_family`` over one fold of
each seed's synthetic family; ``scripts/studies/head_to_head`` trains its walks with :func:`train_walk`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from graphmem.config.cli import restrict_graphs
from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph
from graphmem.eval.folds import FoldTests
from graphmem.eval.harness import EvalResult
from graphmem.policies import make_policy
from graphmem.policies.base import TraversalPolicy
from graphmem.store.checkpoint import checkpoint_inputs
from graphmem.store.graphset import GraphSet
from rl.common.logging import Logger
from rl.common.splits import Split, subsample
from rl.walk.trainer import TrainConfig, TrainResult, WalkTrainer


@dataclass
class Fold:
    """One fold: its number and split of ``gs``'s graphs, the graphs a variant may train on (``gs``'s and the
    training-only ones, ``extra_graphs``), the training questions (training-only ones appended) and embeddings, the
    validation questions and embeddings, the test set, each graph's source, and its test metrics (policy -> metric ->
    value)."""

    k: int
    split: Split
    gs: GraphSet
    graphs: Mapping[str, MemoryGraph]
    train_q: list
    train_e: torch.Tensor
    val_q: list
    val_e: torch.Tensor
    test_set: GraphSet
    extra_graphs: tuple[str, ...] = ()
    source_of: Mapping[str, str] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    def learned_parts(self, sources: Sequence[str] | None = None):
        """The training questions and embeddings, validation questions and embeddings, and the training and validation
        graph names a variant learns from: those of ``sources`` (``None``: every source)."""
        graphs = ([*self.split.train, *self.extra_graphs], list(self.split.val))
        parts = (self.train_q, self.train_e, self.val_q, self.val_e)
        if sources is None:
            return parts, graphs
        keep = set(sources)
        mine = [[q.graph for q in qs] for qs in (self.train_q, self.val_q)]
        rows = [[i for i, g in enumerate(gs) if self.source_of[g] in keep] for gs in mine]
        if not rows[0] or not rows[1]:
            raise ValueError(
                f"fold {self.k}: sources {sources} leave no {'training' if not rows[0] else 'validation'} question"
            )
        parts = (
            [self.train_q[i] for i in rows[0]],
            self.train_e[rows[0]],
            [self.val_q[i] for i in rows[1]],
            self.val_e[rows[1]],
        )
        return parts, tuple([g for g in names if self.source_of[g] in keep] for names in graphs)


def open_fold(
    gs: GraphSet,
    k: int,
    split: Split,
    extra: GraphSet | None = None,
    graphs: Mapping[str, MemoryGraph] | None = None,
    source_of: Mapping[str, str] | None = None,
    fraction: float = 1.0,
    seed: int = 0,
) -> Fold:
    """Fold ``k`` of ``gs`` by ``split``: the training questions with ``extra``'s (training-only) ones appended, cut to
    a ``fraction`` of them drawn by ``seed`` (:func:`rl.common.splits.subsample`; validation and test are never
    cut), the validation questions and the test set. ``graphs``: every graph a variant may train on (default:
    ``gs``'s)."""
    train_set, val_set, test_set = (restrict_graphs(gs, part) for part in (split.train, split.val, split.test))
    train_q, train_e = train_set.questions, train_set.query_embeddings
    if extra is not None:
        train_q, train_e = train_q + extra.questions, torch.cat([train_e, extra.query_embeddings])
    if fraction < 1:  # a learning curve's point: a share of the training questions, drawn by seed
        keep = subsample([q.qid for q in train_q], fraction, seed)
        train_q, train_e = [train_q[i] for i in keep], train_e[keep]
    extra_graphs = tuple(extra.graphs) if extra is not None else ()
    return Fold(
        k,
        split,
        gs,
        gs.graphs if graphs is None else graphs,
        train_q,
        train_e,
        val_set.questions,
        val_set.query_embeddings,
        test_set,
        extra_graphs,
        dict(source_of or {}),
    )


@dataclass
class Variant:
    """A trained variant of the walk: its name, its trainer overrides (``part -> key -> value``) and the sources
    (dataset kinds: ``locomo``, ``realtalk``) whose training and validation graphs it learns from (``None``: all)."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    sources: list[str] | None = None

    @classmethod
    def parse(cls, name: str, overrides: Mapping[str, Any]) -> Variant:
        """A variant from its entry of ``variants``: the trainer overrides, with an optional ``sources`` list."""
        rest = dict(overrides)
        sources = rest.pop("sources", None)
        if sources is not None and (
            not isinstance(sources, list) or not sources or not all(isinstance(x, str) for x in sources)
        ):
            raise ValueError(f"variants.*.sources must be a non-empty list of dataset kinds, got {sources!r}")
        return cls(name, rest, sources)


@dataclass
class Trained:
    """A walk trained on a fold: its variant and config, the trainer (its training data), the result (the
    selected scorer, history, best epoch), and the seconds from building the trainer to the end of training."""

    variant: Variant
    config: TrainConfig
    trainer: WalkTrainer
    result: TrainResult
    seconds: float

    def policy(self, entry_selector: Any = "embedding") -> TraversalPolicy:
        """The router that walks with the selected scorer."""
        return make_policy(
            "router", scorer=self.result.scorer, device=self.config.run.device, entry_selector=entry_selector
        )


def train_walk(
    config: TrainConfig,
    graphs: Mapping[str, MemoryGraph],
    parts: tuple,
    budget: Budget,
    entry_selector: Any = "embedding",
    logger: Logger | None = None,
    inputs: Mapping[str, Any] | None = None,
    variant: Variant | None = None,
) -> Trained:
    """Train the walk (:class:`rl.walk.trainer.WalkTrainer`) on ``parts`` (training questions and embeddings,
    validation questions and embeddings) over ``graphs``, selected on validation."""
    t0 = time.perf_counter()
    trainer = WalkTrainer(config, graphs, *parts, budget, logger, entry_selector, inputs)
    result = trainer.learn()
    return Trained(variant or Variant("router"), config, trainer, result, time.perf_counter() - t0)


class FoldHooks:
    """What a caller adds around :func:`cross_validate` (``scripts/train.py``: tracking, checkpoints, records); each
    hook does nothing here."""

    def run_fields(self, fold: Fold, variant: Variant) -> dict[str, Any]:
        """The variant's ``trainer.run`` fields on this fold (a checkpoint folder, a seed, a device)."""
        return {}

    def logger(self, fold: Fold, variant: Variant, config: TrainConfig) -> Logger | None:
        """The logger of the variant's training on this fold (it receives a row per epoch)."""
        return None

    def failed(self, fold: Fold, variant: Variant, err: Exception) -> None:
        """The variant's training raised ``err`` (re-raised after this hook, unless the hook raises)."""

    def trained(self, fold: Fold, trained: Trained) -> None:
        """The variant has trained on the fold (on every rank)."""

    def tested(self, fold: Fold, name: str, result: EvalResult, trained: Trained | None = None) -> None:
        """Policy ``name`` has been tested on the fold's test set (on the testing rank); ``trained``: the trained
        variant it is, ``None`` for a baseline."""

    def closed(self, fold: Fold) -> None:
        """Every policy has been tested on the fold (``fold.metrics`` is its table)."""


Baselines = Mapping[str, TraversalPolicy] | Callable[[Fold], Mapping[str, TraversalPolicy]]


def cross_validate(
    folds: Iterable[Fold],
    variants: Sequence[Variant],
    base: Mapping[str, Any],
    baselines: Baselines,
    tests: FoldTests,
    budget: Budget,
    entry_selector: Any = "embedding",
    hooks: FoldHooks | None = None,
    testing: bool = True,
) -> FoldTests:
    """On every fold (opened one at a time, as ``folds`` yields them), train each variant (``base`` trainer config with
    its overrides and the hooks' run fields) and, when ``testing``, test it, then the baselines (a mapping, or made
    per fold), on the fold's test set; returns ``tests``."""
    hooks = hooks or FoldHooks()
    for fold in folds:
        for variant in variants:
            trained = train_variant(fold, variant, base, budget, entry_selector, hooks)
            if testing:
                policy = trained.policy(entry_selector)
                result = tests.test(variant.name, policy, fold.test_set, budget, fold.k, fold.metrics)
                hooks.tested(fold, variant.name, result, trained)
        if not testing:
            continue
        for name, policy in (baselines(fold) if callable(baselines) else baselines).items():
            hooks.tested(fold, name, tests.test(name, policy, fold.test_set, budget, fold.k, fold.metrics))
        tests.per_fold.append(fold.metrics)
        hooks.closed(fold)
    return tests


def train_variant(
    fold: Fold, variant: Variant, base: Mapping[str, Any], budget: Budget, entry_selector: Any, hooks: FoldHooks
) -> Trained:
    """Train ``variant`` on the fold's training and validation questions of its sources, with its logger and run
    fields from ``hooks`` (:meth:`FoldHooks.failed` sees an error before it is raised, :meth:`FoldHooks.trained` the
    trained walk)."""
    config = TrainConfig.merged(base, variant.overrides, **hooks.run_fields(fold, variant))
    logger = hooks.logger(fold, variant, config)
    try:
        parts, (train_graphs, val_graphs) = fold.learned_parts(variant.sources)
        inputs = checkpoint_inputs(fold.gs, train_graphs, val_graphs)
        trained = train_walk(config, fold.graphs, parts, budget, entry_selector, logger, inputs, variant)
    except Exception as err:
        hooks.failed(fold, variant, err)
        raise
    hooks.trained(fold, trained)
    return trained
