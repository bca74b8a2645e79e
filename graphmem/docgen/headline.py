"""The README's headline table: the learned walk against the other policies on LoCoMo, over 5 folds.

Rendered from ``docs/results/learned_vs_hybrid_locomo.json``, a copy of the ``results.json`` that
``scripts/train.py`` writes: ``summary`` (policy -> metric -> mean, std with ddof = 1, folds),
``records`` (one per fold and policy: its ``test`` metrics; a trained variant's record also holds
its ``trainer`` config), ``questions`` (test questions per policy over all folds) and ``paired``
(per-question comparisons, :class:`graphmem.eval.stats.PairedComparison`). A stored mean or std
that the row's per-fold values do not give (a hand edit) is refused, naming the file and field
(:func:`graphmem.docgen.sources.check_spread`). The module has no
``render``: it is not a page of its own; ``scripts/make_docs.py`` puts its table in README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphmem.docgen.sources import check_spread, field, load_results, p_value
from graphmem.eval.report import markdown_grid

RESULTS = "learned_vs_hybrid_locomo.json"
METRIC = "evidence_recall"
DATASETS = {"locomo": "LoCoMo", "hotpotqa": "HotpotQA", "musique": "MuSiQue"}
COMMAND = """\
for k in 0 1 2 3 4; do
  python scripts/train_gnn.py graphset=outputs/graphs/locomo split.fold=$k \\
    checkpoint=outputs/gnn/fold$k.pt out_dir=outputs/gnn/fold$k
done
python scripts/train.py graphset=outputs/graphs/locomo cv.folds=null \\
    '+fold_baselines.gnn.checkpoint="outputs/gnn/fold{fold}.pt"'"""
"""The command whose ``results.json`` the headline reads (when the file carries no ``command`` of its own)."""


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
    path = Path(results_dir) / RESULTS
    payload = load_results(results_dir, RESULTS)
    if payload is None:
        return "\n".join(
            [
                f"No headline results yet: `docs/results/{RESULTS}` is the `results.json` of this run (copied",
                "with a `command` key), then `python scripts/make_docs.py` writes the table here:",
                "",
                "```bash",
                COMMAND,
                "```",
            ]
        )
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
    return "\n".join(
        [
            f"{DATASETS.get(dataset, dataset)}, {len(folds)} fold(s) by conversation, budget {budget}: evidence "
            f"recall on each fold's test graphs{' (categories 1–4)' if dataset == 'locomo' else ''}, mean ± std over "
            "folds (ddof = 1).",
            "",
            table,
            "",
            f"Paired per question over all folds' test questions ({n_boot} bootstrap resamples; p of the paired "
            "t-test):",
            "",
            diffs,
            "",
            f"Generated from `docs/results/{RESULTS}` (`python scripts/make_docs.py`); the run:",
            "",
            "```bash",
            str(payload.get("command", COMMAND)),
            "```",
        ]
    )
