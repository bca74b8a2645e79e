"""The README's headline table: the learned walk against the other policies on LoCoMo, over 5 folds.

Rendered from ``docs/results/learned_vs_hybrid_locomo.json``, a copy of the ``results.json`` that
``scripts/train.py`` writes: ``summary`` (policy -> metric -> mean, std with ddof = 1, folds),
``records`` (one per fold and policy: its ``test`` metrics; a trained variant's record also holds
its ``trainer`` config), ``questions`` (test questions per policy over all folds) and ``paired``
(per-question comparisons, :class:`graphmem.eval.stats.PairedComparison`). A stored mean or std
that the row's per-fold values do not give (a hand edit) is refused, naming the file and field
(:func:`docgen.sources.check_spread`). The module has no
``render``: it is not a page of its own; ``scripts/make_docs.py`` puts its table in README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docgen.sources import check_spread, field, fill, p_value, results_at
from graphmem.eval.report import markdown_grid

RESULTS = "learned_vs_hybrid_locomo.json"
METRIC = "evidence_recall"
DATASETS = {"locomo": "LoCoMo", "hotpotqa": "HotpotQA", "musique": "MuSiQue"}
PAGE = "headline"
"""The headline's template, ``templates/headline.md``; its block ``command`` is the command whose ``results.json``
the headline reads (shown when the file carries no ``command`` of its own)."""


def _budget(budget: dict[str, Any]) -> str:
    return (
        f"{budget['max_entries']} entries, top-{budget['top_k_neighbors']} neighbours, {budget['max_hops']} hops, "
        f"{budget['max_nodes']} nodes, {budget['max_tokens']:,} tokens"
    )


def _mean_std(stats: dict[str, Any]) -> str:
    if stats["mean"] is None:
        return "–"
    return f"{stats['mean']:.3f}" + ("" if stats["std"] is None else f" ± {stats['std']:.3f}")


def render_headline(results_dir: Path) -> str:
    """Per-fold and mean ± std evidence recall of every policy, then each trained variant's paired
    difference (Δ, 95% CI, p, n) against every policy it was compared with."""
    path, payload = results_at(results_dir, RESULTS)
    if payload is None:
        return fill(PAGE, "none", name=RESULTS, command=fill(PAGE, "command"))
    summary, records = field(payload, path, "summary"), field(payload, path, "records")
    folds = [int(k) for k in field(payload, path, "folds")]
    rec = [{k: field(payload, path, "records", i, k) for k in ("policy", "fold", "test")} for i in range(len(records))]
    trained = list(dict.fromkeys(r["policy"] for r, raw in zip(rec, records) if "trainer" in raw))
    per_fold = {(r["policy"], int(r["fold"])): r["test"].get(METRIC) for r in rec}
    others = sorted(
        (p for p in summary if p not in trained),
        key=lambda p: -(field(payload, path, "summary", p, METRIC, "mean") or 0.0),
    )
    rows = []
    for policy in trained + others:
        cells = [per_fold.get((policy, k)) for k in folds]
        stats = field(payload, path, "summary", policy, METRIC)
        check_spread(path, f"summary.{policy}.{METRIC}", cells, stats)  # the row's folds and its mean agree
        name = f"**{policy}** (trained)" if policy in trained else policy
        rows.append(
            [name]
            + ["–" if v is None else f"{v:.3f}" for v in cells]
            + [
                _mean_std(stats),
                f"{payload.get('questions', {}).get(policy, '–'):,}",
            ]
        )
    table = markdown_grid(["policy", *(f"fold {k}" for k in folds), "mean ± std", "test questions"], rows)
    comparisons = field(payload, path, "paired")
    paired = [i for i, c in enumerate(comparisons) if c.get("metric") == METRIC and c.get("policy") in trained]
    diff_rows, keys = [], ("policy", "reference", "mean_diff", "ci_low", "ci_high", "p_value", "n")
    for i in paired:
        policy, reference, diff, low, high, p, n = (field(payload, path, "paired", i, k) for k in keys)
        diff_rows.append(
            [f"{policy} − {reference}", f"{diff:+.3f}", f"[{low:+.3f}, {high:+.3f}]", p_value(p), f"{n:,}"]
        )
    diffs = markdown_grid(["paired difference", "Δ recall", "95% CI", "p", "n"], diff_rows)
    n_boot = f"{comparisons[paired[0]]['n_boot']:,}" if paired and "n_boot" in comparisons[paired[0]] else "–"
    budget, dataset = _budget(field(payload, path, "budget")), field(payload, path, "dataset")
    categories = " (categories 1–4)" if dataset == "locomo" else ""
    lead = fill(
        PAGE, "lead", dataset=DATASETS.get(dataset, dataset), folds=len(folds), budget=budget, categories=categories
    )
    command = str(payload["command"]) if "command" in payload else fill(PAGE, "command")
    generated = fill(PAGE, "generated", name=RESULTS, command=command)
    return "\n".join([lead, "", table, "", fill(PAGE, "paired_lead", n_boot=n_boot), "", diffs, "", generated])
