"""docs/multihop.md: the trained walk (ranked and in load order), its ablations, the GNN reader and the simple
baselines on the pooled multi-hop sets, rendered from ``docs/results/multihop.json``
(``scripts/studies/multihop/run.py``); whatever policies and sets the file holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docgen.sources import field, fill, p_value, results_at

from graphmem.eval.report import markdown_grid

RESULTS = "multihop.json"
PAGE = "multihop"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""
SHOWN = {
    "passage_recall_2": "R@2",
    "passage_recall_5": "R@5",
    "support_paragraph_recall": "support recall",
    "chain_following": "chain following",
}
"""the metrics of the page's tables and their column names (the file also holds evidence recall)"""
TARGETS = (
    ("hotpotqa-pooled", "multihop", "multihop_before", "passage_recall_2", 0.03),
    ("hotpotqa-pooled", "multihop", "multihop_before", "passage_recall_5", 0.03),
    ("musique-pooled", "multihop", "multihop_before", "passage_recall_5", 0.0),
    ("hotpotqa", "multihop_questions", "hybrid", "passage_recall_5", 0.0),
    ("hotpotqa", "multihop_questions", "hybrid", "support_paragraph_recall", 0.0),
    ("2wiki", "multihop_questions", "hybrid", "passage_recall_5", 0.0),
    ("2wiki", "multihop_questions", "hybrid", "support_paragraph_recall", 0.0),
)
"""the targets of the page (``page.md``, block ``targets``): set, policy, reference, metric and the least paired
difference that meets it; the first three judge the pooled walk with the added data against the same recipe on the
data before, the rest the per-question walk against hybrid on per-question graphs"""


def _value(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _set_table(entry: dict, path: Path) -> str:
    """One row per policy: the means of :data:`SHOWN` and the number of questions."""
    rows = []
    for policy, p in field(entry, path, "policies").items():
        means = field(p, path, "means")
        rows.append([policy, *(_value(means.get(m)) for m in SHOWN), f"{field(p, path, 'questions'):,}"])
    return markdown_grid(["policy", *SHOWN.values(), "questions"], rows)


def _paired_rows(res: dict, path: Path, keep) -> list[list[str]]:
    """The paired comparisons of every set that ``keep(comparison)`` selects, on the metrics of :data:`SHOWN`."""
    rows = []
    for name, entry in field(res, path, "sets").items():
        for c in field(entry, path, "paired"):
            if c["metric"] in SHOWN and keep(c):
                shown = [f"{c[k]:.3f}" for k in ("mean", "reference_mean")] + [f"{c['mean_diff']:+.3f}"]
                ci = f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
                rows.append([name, f"{c['policy']} − {c['reference']}", SHOWN[c["metric"]], *shown, ci])
                rows[-1] += [p_value(c["p_value"]), f"{c['n']:,}"]
    return rows


def _paired_table(rows: list[list[str]]) -> str:
    header = ["set", "paired difference", "metric", "first", "second", "Δ", "95% CI", "p", "n"]
    return markdown_grid(header, rows)


def _comparison(res: dict, path: Path, name: str, a: str, b: str, metric: str) -> dict | None:
    """The paired comparison ``a - b`` on ``metric`` of set ``name``, read as it is or from ``b - a`` negated."""
    entry = field(res, path, "sets").get(name)
    for c in [] if entry is None else field(entry, path, "paired"):
        if c["metric"] != metric:
            continue
        if (c["policy"], c["reference"]) == (a, b):
            return c
        if (c["policy"], c["reference"]) == (b, a):
            return {**c, "mean_diff": -c["mean_diff"], "ci_low": -c["ci_high"], "ci_high": -c["ci_low"]}
    return None


def _target_table(res: dict, path: Path) -> str:
    """One row per target of :data:`TARGETS`: the paired difference, its CI, n and whether it meets the target."""
    rows = []
    for name, a, b, metric, least in TARGETS:
        c = _comparison(res, path, name, a, b, metric)
        row = [name, f"{a} − {b}", SHOWN[metric], f"≥ {least:+.2f}"]
        if c is None:
            rows.append([*row, "not measured", "—", "—", "—"])
            continue
        met = "met" if c["mean_diff"] >= least - 1e-12 else f"missed by {least - c['mean_diff']:.3f}"
        ci = f"{c['mean_diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]"
        rows.append([*row, ci, p_value(c["p_value"]), f"{c['n']:,}", met])
    return markdown_grid(["set", "paired difference", "metric", "target", "Δ [95% CI]", "p", "n", ""], rows)


def _set_name(record: dict[str, Any]) -> str:
    """A set as its training run recorded it: name, file, pooling, questions where counted."""
    pooled = " pooled" + (f" in pools of {record['pool_size']}" if record.get("pool_size") else "")
    counts = f", {record['questions']:,} questions" if record.get("questions") is not None else ""
    limit = f", first {record['limit']} records" if record.get("limit") else ""
    return f"{record.get('name')} (`{record.get('file')}`{pooled if record.get('pooled') else ''}{limit}{counts})"


def _trained_on(name: str, ckpt: dict) -> str:
    """The line saying which sets checkpoint ``name`` was trained on, from its training run's record."""
    training = ckpt.get("training")
    if training is None:
        return (
            f"`{name}` was trained on sets this study cannot name: no results.json or run.json lies in the "
            "checkpoint's folder or the two above it."
        )
    folds = training.get("folds") or []
    held = f", test fold{'s' if len(folds) > 1 else ''} {', '.join(map(str, folds))} held out" if folds else ""
    extra = [_set_name(s) for s in training.get("train_sets") or []]
    also = f" and the training-only sets {'; '.join(extra)}" if extra else " and no training-only set"
    where = f"`{training['folder']}/{training['file']}`"
    if training.get("same_run") is False:
        where += f" (of run {training.get('run_id')}, not the checkpoint's {ckpt.get('run_id')}: another run's record)"
    graphs = f"{ckpt.get('train_graphs', 0):,} training and {ckpt.get('val_graphs', 0):,} validation graphs"
    return (
        f"`{name}` was trained on {_set_name(training.get('data') or {})}{held}{also}, as recorded in {where} "
        f"(its checkpoint lists {graphs})."
    )


def _checkpoint_lines(res: dict, path: Path) -> list[str]:
    out = []
    for name, c in field(res, path, "checkpoints").items():
        head = "" if c.get("rank_head") is None else ("; ranking head" if c["rank_head"] else "; no ranking head")
        out.append(f"- `{name}` ({c['role']}): `{c['path']}` (SHA-256 `{c['sha256'][:12]}`{head})")
    return out


def render(results_dir: Path) -> str:
    path, res = results_at(results_dir, RESULTS)
    if res is None:
        return "\n".join([fill(TEMPLATE, "intro", walk="multihop"), "", fill(TEMPLATE, "missing")]) + "\n"
    walk, reference = field(res, path, "walk"), field(res, path, "reference")
    checkpoints = field(res, path, "checkpoints")
    out = [fill(TEMPLATE, "intro", walk=walk), "", "## The run", "", "```bash", field(res, path, "command"), "```"]
    out += ["", *_checkpoint_lines(res, path), "", _trained_on(walk, field(checkpoints, path, walk)), ""]
    out += [f"{field(res, path, 'n_boot'):,} bootstrap resamples per CI; {field(res, path, 'wall_s'):.0f} s.", ""]
    out += ["## Targets", "", fill(TEMPLATE, "targets"), "", _target_table(res, path), ""]
    for name, entry in field(res, path, "sets").items():
        questions = {p["questions"] for p in field(entry, path, "policies").values()}
        n = f"{max(questions):,} questions" if len(questions) == 1 else "questions per row"
        dataset = entry.get("dataset")
        kind = "" if dataset == name else f"{dataset or 'dataset not recorded'}, "
        out += [f"## {name} ({kind}{n})", "", _set_table(entry, path)]
        out += ["", "Evaluated with:", "", "```bash", *field(entry, path, "evaluate").values(), "```", ""]
    out += [f"## Paired differences against `{reference}`", ""]
    out += ["Per question, each policy minus the reference on the same questions:", ""]
    out += [_paired_table(_paired_rows(res, path, lambda c: c["reference"] == reference)), ""]
    own = _paired_rows(res, path, lambda c: c["reference"] != reference)
    if own:
        out += ["## The walk's own comparisons", ""]
        out += [
            f"`{walk} − {walk}_load_order`: what the ranking head adds to the same list; `{walk} − gnn`: the walk "
            f"against the GNN reader; an ablation minus `{walk}`: what the ablation changes.",
            "",
            _paired_table(own),
            "",
        ]
    return "\n".join(out).rstrip() + "\n"
