"""The README's headline table: the learned walk against the other policies on LoCoMo, over 5 folds.

Rendered from ``docs/results/learned_vs_hybrid_locomo.json``, a copy of the ``results.json`` that
``scripts/train.py`` writes: ``summary`` (policy -> metric -> mean, std with ddof = 1, folds),
``records`` (one per fold and policy: its ``test`` metrics; a trained variant's record also holds
its ``trainer`` config), ``questions`` (test questions per policy over all folds) and ``paired``
(per-question comparisons, :class:`graphmem.eval.stats.PairedComparison`). The module has no
``render``: it is not a page of its own; ``scripts/make_docs.py`` puts its table in README.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphmem.docgen.sources import field, load_results, markdown_table, p_value

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
    trained = list(dict.fromkeys(r["policy"] for r in records if "trainer" in r))
    per_fold: dict[tuple[str, int], float | None] = {
        (r["policy"], int(r["fold"])): field(r, path, "test").get(METRIC) for r in records
    }
    others = sorted(
        (p for p in summary if p not in trained), key=lambda p: -(field(summary, path, p, METRIC, "mean") or 0.0)
    )
    rows = []
    for policy in trained + others:
        cells = [per_fold.get((policy, k)) for k in folds]
        name = f"**{policy}** (trained)" if policy in trained else policy
        rows.append(
            [name]
            + ["–" if v is None else f"{v:.3f}" for v in cells]
            + [_mean_std(field(summary, path, policy, METRIC)), f"{payload.get('questions', {}).get(policy, '–'):,}"]
        )
    table = markdown_table(["policy", *(f"fold {k}" for k in folds), "mean ± std", "test questions"], rows)
    paired = [c for c in field(payload, path, "paired") if c.get("metric") == METRIC and c.get("policy") in trained]
    diffs = markdown_table(
        ["paired difference", "Δ recall", "95% CI", "p", "n"],
        [
            [
                f"{c['policy']} − {c['reference']}",
                f"{c['mean_diff']:+.3f}",
                f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]",
                p_value(c["p_value"]),
                f"{c['n']:,}",
            ]
            for c in paired
        ],
    )
    n_boot = f"{paired[0]['n_boot']:,}" if paired and "n_boot" in paired[0] else "–"
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
