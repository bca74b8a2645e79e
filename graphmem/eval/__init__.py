"""Retrieval evaluation: metrics (the only place gold meets policy output), the batched harness, reports."""

from graphmem.eval.harness import (
    EvalResult,
    budget_sweep,
    evaluate_policy,
    run_retrievals,
    scaled_budgets,
    sweep_curve,
    write_jsonl,
)
from graphmem.eval.metrics import QuestionMetrics, aggregate, percentile, question_metrics, summarize

__all__ = [
    "EvalResult",
    "QuestionMetrics",
    "aggregate",
    "budget_sweep",
    "evaluate_policy",
    "percentile",
    "question_metrics",
    "run_retrievals",
    "scaled_budgets",
    "summarize",
    "sweep_curve",
    "write_jsonl",
]
