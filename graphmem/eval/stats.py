"""Paired statistics for comparing policies question by question, and the fold spread.

For a metric and two policies A (compared) and R (the reference) scored on the same questions,
``d_i = a_i - r_i`` over the ``n`` questions where both are defined:

* mean difference        ``d̄ = (1/n) Σ d_i``;
* 95 % bootstrap CI      percentile interval of ``d̄`` over ``n_boot`` resamples of the ``n``
  questions with replacement (seeded), i.e. the 2.5th and 97.5th percentiles (linear
  interpolation) of the resampled means;
* paired t-test          ``t = d̄ / (s_d / √n)`` with ``s_d`` the sample std (ddof = 1),
  two-sided ``p = 2·(1 - F_{n-1}(|t|))`` (``scipy.stats.ttest_rel``); ``p = 1`` when every
  ``d_i = 0`` and ``p = 0`` when all ``d_i`` equal one non-zero value;
* fold std               ``sqrt(Σ (x_f - x̄)² / (F - 1))`` over ``F`` folds (ddof = 1; undefined for one fold).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np

from graphmem.eval.metrics import in_overall

# Per-question metrics compared by default (each where the dataset defines it).
STAT_METRICS = (
    "evidence_recall",
    "all_evidence_hit",
    "support_paragraph_recall",
    "support_paragraph_hit",
    "passage_recall_2",
    "passage_recall_5",
    "chain_following",
)


@dataclass(frozen=True)
class PairedComparison:
    """One policy against the reference on one metric (formulas: module docstring)."""

    policy: str
    reference: str
    metric: str
    n: int
    mean: float
    reference_mean: float
    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float
    test: str = "paired t-test"
    ci_level: float = 0.95
    n_boot: int = 10_000
    group: str = "overall"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def fold_std(values: Sequence[float]) -> float | None:
    """Sample standard deviation over folds (ddof = 1); ``None`` for fewer than two folds."""
    xs = [float(v) for v in values if v is not None]
    return float(np.std(xs, ddof=1)) if len(xs) >= 2 else None


def fold_summary(
    per_fold: Sequence[Mapping[str, Mapping[str, float | None]]], metrics: Sequence[str]
) -> dict[str, dict[str, dict[str, float | int | None]]]:
    """policy -> metric -> ``{mean, std, folds}`` over the folds' values (std with ddof = 1,
    ``None`` for one fold; a policy missing from a fold, or a metric undefined there, is left out)."""
    policies = list(dict.fromkeys(p for fold in per_fold for p in fold))
    out: dict[str, dict[str, dict[str, float | int | None]]] = {}
    for policy in policies:
        out[policy] = {}
        for m in metrics:
            vals = [f[policy][m] for f in per_fold if policy in f and f[policy].get(m) is not None]
            out[policy][m] = {"mean": float(np.mean(vals)) if vals else None, "std": fold_std(vals), "folds": len(vals)}
    return out


def bootstrap_ci(
    diffs: Sequence[float], n_boot: int = 10_000, level: float = 0.95, seed: int = 0, chunk: int = 1000
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``diffs`` (module docstring)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        raise ValueError("bootstrap_ci needs at least one paired difference")
    if not 0 < level < 1 or n_boot < 1:
        raise ValueError(f"bootstrap_ci: level must be in (0, 1) and n_boot >= 1, got {level}, {n_boot}")
    rng = np.random.default_rng(seed)
    means = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        rows = min(chunk, n_boot - start)
        means[start : start + rows] = d[rng.integers(0, d.size, size=(rows, d.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_t_pvalue(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided paired t-test p-value of ``a`` against ``b`` (module docstring for the degenerate cases)."""
    from scipy import stats

    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if d.size < 2:
        return float("nan")
    if np.all(d == d[0]):
        return 1.0 if d[0] == 0 else 0.0
    return float(stats.ttest_rel(a, b).pvalue)


def paired_comparison(
    policy: str,
    values: Mapping[str, float | None],
    reference: str,
    reference_values: Mapping[str, float | None],
    metric: str,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedComparison | None:
    """Compare ``values`` (question id -> metric) with ``reference_values`` on the questions where
    both are defined; ``None`` when there are fewer than two such questions."""
    qids = [q for q, v in values.items() if v is not None and reference_values.get(q) is not None]
    if len(qids) < 2:
        return None
    a = np.array([values[q] for q in qids], dtype=np.float64)
    r = np.array([reference_values[q] for q in qids], dtype=np.float64)
    lo, hi = bootstrap_ci(a - r, n_boot, level, seed)
    return PairedComparison(
        policy=policy,
        reference=reference,
        metric=metric,
        n=len(qids),
        mean=float(a.mean()),
        reference_mean=float(r.mean()),
        mean_diff=float((a - r).mean()),
        ci_low=lo,
        ci_high=hi,
        p_value=paired_t_pvalue(a, r),
        ci_level=level,
        n_boot=n_boot,
    )


def per_question(rows: Sequence[Mapping[str, Any]], metric: str) -> dict[str, float | None]:
    """``qid -> row["metrics"][metric]`` of harness rows (:class:`graphmem.eval.harness.EvalResult`)."""
    out: dict[str, float | None] = {}
    for row in rows:
        if row["qid"] in out:
            raise ValueError(f"question {row['qid']!r} appears twice in one policy's rows")
        out[row["qid"]] = row["metrics"].get(metric)
    return out


def compare_policies(
    rows: Mapping[str, Sequence[Mapping[str, Any]]],
    reference: str,
    metrics: Sequence[str] = STAT_METRICS,
    n_boot: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
    group: str = "overall",
) -> list[PairedComparison]:
    """Every policy of ``rows`` (policy -> per-question rows) other than ``reference`` against it,
    on each metric the rows define; in policy order, then metric order. Only the questions of the
    ``overall`` group take part (:func:`graphmem.eval.metrics.in_overall`: LoCoMo's adversarial
    category is reported apart), so ``n`` matches the overall tables; ``group`` names the questions the rows
    hold (``overall``, or a part of them such as the streaming protocol's ``second_half``)."""
    if reference not in rows:
        raise ValueError(f"reference policy {reference!r} was not evaluated (policies: {sorted(rows)})")
    rows = {p: [r for r in rs if in_overall(r.get("category", ""))] for p, rs in rows.items()}
    out = []
    for policy, policy_rows in rows.items():
        if policy == reference:
            continue
        for metric in metrics:
            c = paired_comparison(
                policy,
                per_question(policy_rows, metric),
                reference,
                per_question(rows[reference], metric),
                metric,
                n_boot,
                level,
                seed,
            )
            if c is not None:
                out.append(c if group == "overall" else replace(c, group=group))
    return out


def _fmt_p(p: float) -> str:
    if math.isnan(p):
        return "–"
    return "<1e-4" if p < 1e-4 else f"{p:.4f}"


def comparisons_markdown(comparisons: Sequence[PairedComparison]) -> str:
    """One row per (policy, metric): both means, the difference, its CI and the p-value."""
    if not comparisons:
        return ""
    c0 = comparisons[0]
    lines = [
        f"paired per-question differences vs **{c0.reference}** ({c0.test}; {c0.ci_level:.0%} bootstrap CI, "
        f"{c0.n_boot} resamples):",
        "",
        f"| policy | metric | n | policy | reference | Δ | {c0.ci_level:.0%} CI | p |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in comparisons:
        label = c.policy if c.group == "overall" else f"{c.policy} ({c.group})"
        lines.append(
            f"| {label} | {c.metric} | {c.n} | {c.mean:.3f} | {c.reference_mean:.3f} | {c.mean_diff:+.3f} | "
            f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}] | {_fmt_p(c.p_value)} |"
        )
    return "\n".join(lines)
