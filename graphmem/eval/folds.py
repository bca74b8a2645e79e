"""Testing on folds: every policy evaluated once on each fold's held-out graphs under one budget (and at each budget
of a node sweep), its per-question rows tagged with the fold, the per-fold metrics summarised over the folds
(mean ± std, ddof = 1) and the rows of all folds paired per question against a reference.

:func:`rl.walk.folds.cross_validate` fills a :class:`FoldTests` fold by fold (the trained variants, then the
baselines); ``scripts/train.py`` and the studies read their tables from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from graphmem.core import Budget
from graphmem.eval.harness import EvalResult, GraphSetLike, evaluate_policy
from graphmem.eval.report import fold_markdown
from graphmem.eval.runs import paired_groups
from graphmem.eval.stats import PairedComparison, comparisons_markdown, fold_summary
from graphmem.policies.base import TraversalPolicy


@dataclass
class FoldTests:
    """The test results of every fold so far.

    Args:
        metrics: the summary metrics kept per fold and policy (``overall`` group).
        sweep_budgets: budgets each policy is also tested at, its rows kept by ``max_nodes`` (default: none).
        tag: the key that names the fold in every row (default: ``"fold"``).
    """

    metrics: Sequence[str]
    sweep_budgets: list[Budget] = field(default_factory=list)
    tag: str = "fold"
    per_fold: list[dict[str, dict[str, float]]] = field(default_factory=list)
    """each closed fold's metrics: policy -> metric -> value"""
    test_rows: dict[str, list[dict]] = field(default_factory=dict)
    """policy -> the test rows of every fold, each with its fold under ``tag``"""
    sweep_rows: dict[str, dict[int, list[dict]]] = field(default_factory=dict)
    """policy -> max_nodes -> the sweep's test rows of every fold"""

    def test(
        self, name: str, policy: TraversalPolicy, test_set: GraphSetLike, budget: Budget, fold: int, into: dict
    ) -> EvalResult:
        """Evaluate ``policy`` on ``test_set`` under ``budget`` and at each sweep budget; its metrics go to
        ``into[name]`` (the fold's table), its rows to :attr:`test_rows`; returns the evaluation."""
        res = evaluate_policy(policy, test_set, budget, progress=False)
        for b in self.sweep_budgets:
            level = self.sweep_rows.setdefault(name, {}).setdefault(b.max_nodes, [])
            level.extend({self.tag: fold, **row} for row in evaluate_policy(policy, test_set, b, progress=False).rows)
        into[name] = {m: res.overall.get(m) for m in self.metrics}
        self.test_rows.setdefault(name, []).extend({self.tag: fold, **row} for row in res.rows)
        return res

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """policy -> metric -> {mean, std (ddof = 1; None for one fold), folds} over the closed folds."""
        return fold_summary(self.per_fold, self.metrics)

    def questions(self) -> dict[str, int]:
        """The test questions each policy was scored on, over all folds."""
        return {policy: len(rows) for policy, rows in self.test_rows.items()}

    def paired(
        self, reference: str | None, variants: list[str], also: Sequence[str], n_boot: int, seed: int
    ) -> list[list[PairedComparison]]:
        """Every policy against ``reference``, then the trained ``variants`` against each policy of ``also``, per
        question over all folds (:func:`graphmem.eval.runs.paired_groups`)."""
        return paired_groups(self.test_rows, reference, variants, list(also), n_boot, seed)

    def markdown(self, groups: Sequence[Sequence[PairedComparison]] = ()) -> str:
        """The fold table (:func:`graphmem.eval.report.fold_markdown`) and each group of paired comparisons."""
        table = fold_markdown(self.summary(), self.questions())
        for comparisons in groups:
            table += "\n\n" + comparisons_markdown(comparisons) if comparisons else ""
        return table
