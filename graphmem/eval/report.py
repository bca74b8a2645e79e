"""Reports of evaluation results: markdown tables, a results JSON and recall-vs-budget plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from graphmem.eval.harness import EvalResult, sweep_curve
from graphmem.eval.stats import PairedComparison, comparisons_markdown

# (header, summary key, format); latencies are milliseconds.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("recall", "evidence_recall", "{:.3f}"),
    ("all-hit", "all_evidence_hit", "{:.3f}"),
    ("precision", "precision", "{:.3f}"),
    ("first-gold rank", "first_gold_rank", "{:.2f}"),
    ("tokens", "loaded_tokens", "{:.0f}"),
    ("hops", "hops", "{:.2f}"),
    ("p50 ms", "latency_ms_p50", "{:.2f}"),
    ("p95 ms", "latency_ms_p95", "{:.2f}"),
)
HOTPOT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("sp-sent recall", "support_sentence_recall", "{:.3f}"),
    ("sp-para recall", "support_paragraph_recall", "{:.3f}"),
    ("sp-para all-hit", "support_paragraph_hit", "{:.3f}"),
    ("passage R@2", "passage_recall_2", "{:.3f}"),
    ("passage R@5", "passage_recall_5", "{:.3f}"),
    ("chain", "chain_following", "{:.3f}"),
)


def _fmt(value: Any, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _columns(summaries: Sequence[Mapping[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    """The base columns, plus each passage-level column some summary defines."""
    extra = tuple(c for c in HOTPOT_COLUMNS if any(s.get(c[1]) is not None for s in summaries))
    return COLUMNS + extra


def _count(s: Mapping[str, Any]) -> str:
    return f"{s['n']}" + (f" ({s['n_no_gold']} no gold)" if s["n_no_gold"] else "")


def markdown_grid(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A GitHub table: the first column left-aligned, the others right-aligned."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def table_data(result: EvalResult) -> tuple[list[str], list[list[Any]]]:
    """Columns and raw rows (one per group) of :func:`markdown_table`, for tracking backends."""
    cols = _columns(list(result.summary.values()))
    header = ["policy", "group", "n", "n_no_gold"] + [key for _, key, _ in cols]
    rows = [
        [result.policy, group, s["n"], s["n_no_gold"]] + [s[key] for _, key, _ in cols]
        for group, s in result.summary.items()
    ]
    return header, rows


def markdown_table(result: EvalResult) -> str:
    """One row per group (overall, then each category; LoCoMo adversarial apart) for one policy."""
    cols = _columns(list(result.summary.values()))
    header = ["group", "n"] + [h for h, _, _ in cols]
    rows = [[group, _count(s)] + [_fmt(s[key], fmt) for _, key, fmt in cols] for group, s in result.summary.items()]
    b = result.budget
    title = (
        f"**{result.policy}** on {result.dataset} — budget: {b.max_entries} entries, top-{b.top_k_neighbors} "
        f"neighbours, {b.max_hops} hops, {b.max_nodes} nodes, {b.max_tokens} tokens"
    )
    return title + "\n\n" + markdown_grid(header, rows) + "\n\n" + _latency_note([result])


def _latency_note(results: Sequence[EvalResult]) -> str:
    """What the p50/p95 columns measure (per-query serving latency or a batch share) and what batched q/s is."""
    kinds = sorted({r.info.get("latency", "batch share") for r in results})
    what = {
        "served alone": "p50/p95 ms: latency of each question served alone (retrieve_batch(graph, [q]))",
        "batch share": "p50/p95 ms: each question's share of the batched call (throughput, not latency)",
    }
    return "; ".join(what.get(k, k) for k in kinds) + "; batched q/s: throughput of the batched evaluation."


def comparison_table(results: Sequence[EvalResult], group: str = "overall") -> str:
    """One row per policy for one group (default: overall, i.e. LoCoMo categories 1-4), with each
    policy's batched throughput (questions/s) beside the latency columns."""
    present = [r for r in results if group in r.summary]
    cols = _columns([r.summary[group] for r in present])
    header = ["policy", "n"] + [h for h, _, _ in cols] + ["batched q/s"]
    rows = [
        [r.policy, _count(r.summary[group])]
        + [_fmt(r.summary[group][key], fmt) for _, key, fmt in cols]
        + [_fmt(r.info.get("batched_questions_per_s"), "{:.0f}")]
        for r in present
    ]
    return f"{group}:\n\n" + markdown_grid(header, rows) + "\n\n" + _latency_note(present)


def category_recall_table(results: Sequence[EvalResult]) -> str:
    """Evidence recall of each policy (rows) in each group (columns)."""
    groups: list[str] = []
    for r in results:
        groups += [g for g in r.summary if g not in groups]
    rows = [
        [r.policy] + [_fmt(r.summary[g]["evidence_recall"], "{:.3f}") if g in r.summary else "–" for g in groups]
        for r in results
    ]
    return "evidence recall by group:\n\n" + markdown_grid(["policy"] + groups, rows)


def full_report(results: Sequence[EvalResult], paired: Sequence[PairedComparison] = ()) -> str:
    """The markdown printed by ``scripts/evaluate.py``: comparison tables, the paired statistics
    against the reference policy, then one table per policy."""
    parts = [comparison_table(results)]
    if paired:
        parts.append(comparisons_markdown(paired))
    parts.append(category_recall_table(results))
    if any("adversarial" in r.summary for r in results):
        parts.append(comparison_table(results, "adversarial"))
    parts += [markdown_table(r) for r in results]
    return "\n\n".join(parts) + "\n"


def results_payload(
    results: Sequence[EvalResult],
    sweeps: Mapping[str, Sequence[EvalResult]] | None = None,
    meta: Mapping[str, Any] | None = None,
    paired: Sequence[PairedComparison] = (),
) -> dict[str, Any]:
    """The content of ``results.json``: run metadata, each policy's summary, its sweep curve, and
    the paired comparisons with the reference policy."""
    return {
        "meta": dict(meta or {}),
        "policies": {r.policy: r.to_json() for r in results},
        "budget_sweep": {name: sweep_curve(points) for name, points in (sweeps or {}).items()},
        "paired": [c.to_json() for c in paired],
    }


PAIRED_COLUMNS = [
    "policy",
    "reference",
    "metric",
    "n",
    "mean",
    "reference_mean",
    "mean_diff",
    "ci_low",
    "ci_high",
    "p_value",
]


def fold_markdown(summary: Mapping[str, Mapping[str, Mapping[str, Any]]], questions: Mapping[str, int]) -> str:
    """``mean ± std`` over folds (ddof = 1; the mean alone for one fold) per policy and metric, and
    the number of test questions each policy was scored on."""
    metrics = list(next(iter(summary.values()))) if summary else []
    lines = ["| policy | n | " + " | ".join(metrics) + " |", "|---|---:|" + "---:|" * len(metrics)]
    for policy, ms in summary.items():
        cells = []
        for m in metrics:
            mean, std = ms[m]["mean"], ms[m]["std"]
            fmt = "{:.0f}" if m == "loaded_tokens" else "{:.3f}"
            cells.append(_fmt(mean, fmt) + ("" if std is None or m == "loaded_tokens" else f" ± {std:.3f}"))
        lines.append(f"| {policy} | {questions.get(policy, 0)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(paired: Sequence[PairedComparison]) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of the paired comparisons, for tracking backends (a W&B table)."""
    return PAIRED_COLUMNS, [[getattr(c, k) for k in PAIRED_COLUMNS] for c in paired]


def plot_budget_curves(
    sweeps: Mapping[str, Sequence[EvalResult]], path: str | Path, group: str = "overall", title: str | None = None
) -> Path:
    """PNG of evidence recall (left) and all-evidence hit (right) against the token budget, one line per policy.

    For HotpotQA the supporting-paragraph recall is drawn dashed on the left panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_h) = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    for name, points in sweeps.items():
        curve = sweep_curve(points, group)
        xs = [p["max_tokens"] for p in curve]
        (line,) = ax_r.plot(xs, [_nan(p["evidence_recall"]) for p in curve], marker="o", label=name)
        if any(p["support_paragraph_recall"] is not None for p in curve):
            ax_r.plot(
                xs,
                [_nan(p["support_paragraph_recall"]) for p in curve],
                marker="s",
                linestyle="--",
                color=line.get_color(),
                label=f"{name} (paragraph)",
            )
        ax_h.plot(xs, [_nan(p["all_evidence_hit"]) for p in curve], marker="o", label=name, color=line.get_color())
    for ax, ylabel in ((ax_r, "evidence recall"), (ax_h, "all-evidence hit")):
        ax.set_xlabel("token budget (max_tokens; max_nodes scaled)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    ax_r.legend(fontsize=8)
    fig.suptitle(title or f"recall vs token budget ({group})")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)
