"""docs/results.md: the learned policies with lexical features against the strongest simple baseline.

Rendered from the files of ``docs/results/``:

* ``learned_vs_hybrid_<dataset>.json``: a ``scripts/train.py`` run (5 folds by conversation or
  question graph), its ``results.json`` plus the ``command`` that made it (``_locomo_gnn``: the GNN
  reader of each fold, from ``scripts/train_gnn.py``, tested beside hybrid on the same folds);
* ``lexical_ablation_<name>.json``: paired comparisons of the walk with and without lexical features, and
  the run they come from (its ``run`` key names that results file; default ``lexical_ablation_<name>_run.json``);
* ``learned_vs_hybrid_transfer_<set>.json``: a ``scripts/evaluate.py`` run of a walk trained on
  LoCoMo on another set, its ``results.json`` plus the ``command``.

The per-fold tables take each fold's value from the run's ``records`` and compute the mean and the
std (ddof = 1) from those folds (no stored mean is shown beside them); pages that show a stored
mean next to its folds refuse one the folds do not give (:func:`docgen.sources.check_spread`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from docgen.sources import fill, p_value, read_json
from graphmem.eval.report import markdown_grid
from graphmem.eval.stats import fold_std

LABELS = {
    "evidence_recall": "evidence recall",
    "all_evidence_hit": "all-evidence hit",
    "support_paragraph_recall": "supporting-paragraph recall",
    "support_paragraph_hit": "supporting-paragraph all-hit",
    "passage_recall_2": "R@2",
    "passage_recall_5": "R@5",
    "chain_following": "chain following",
}
ORDER = ("router", "router_nolex", "gnn", "hybrid", "bm25", "dense_topk", "ppr", "beta_bfs")

PAGE = "results"


def _f(x: Any, fmt: str = ".3f") -> str:
    return "–" if x is None else format(float(x), fmt)


def _load(path: Path) -> dict[str, Any] | None:
    return read_json(path) if path.is_file() else None


def _policies(names: Iterable[str]) -> list[str]:
    names = list(dict.fromkeys(names))
    return [p for p in ORDER if p in names] + [p for p in names if p not in ORDER]


def per_fold(run: Mapping[str, Any], metric: str) -> dict[str, dict[int, float]]:
    """policy -> fold -> test value of ``metric`` (from the run's records)."""
    out: dict[str, dict[int, float]] = {}
    for r in run.get("records", []):
        value = (r.get("test") or {}).get(metric)
        if value is not None:
            out.setdefault(r["policy"], {})[int(r["fold"])] = float(value)
    return out


def fold_table(run: Mapping[str, Any], metric: str) -> str:
    values = per_fold(run, metric)
    folds = sorted({k for v in values.values() for k in v})
    rows = []
    for p in _policies(values):
        xs = [values[p].get(k) for k in folds]
        real = [x for x in xs if x is not None]
        std = fold_std(real)
        mean = sum(real) / len(real) if real else None
        rows.append([f"`{p}`", *(_f(x) for x in xs), f"{_f(mean)} ± {_f(std)}"])
    return markdown_grid(["policy", *(f"fold {k}" for k in folds), "mean ± std"], rows)


def wins(run: Mapping[str, Any], metric: str, policy: str, reference: str) -> str:
    values = per_fold(run, metric)
    if policy not in values or reference not in values:
        return ""
    folds = sorted(set(values[policy]) & set(values[reference]))
    up = [k for k in folds if values[policy][k] >= values[reference][k]]
    below = ", ".join(f"fold {k} {values[policy][k] - values[reference][k]:+.3f}" for k in folds if k not in up)
    return f"`{policy}` ≥ `{reference}` on {len(up)}/{len(folds)} folds" + (f" (below: {below})" if below else "")


def paired_table(paired: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> str:
    rows = [
        [
            f"`{c['policy']}` − `{c['reference']}`",
            LABELS.get(c["metric"], c["metric"]),
            str(c["n"]),
            _f(c["mean"]),
            _f(c["reference_mean"]),
            f"**{c['mean_diff']:+.3f}**",
            f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]",
            p_value(c["p_value"]),
        ]
        for c in paired
        if c["metric"] in metrics
    ]
    return markdown_grid(["comparison", "metric", "n", "policy", "reference", "Δ", "95% CI", "p"], rows)


def train_section(run: Mapping[str, Any], title: str, metrics: Sequence[str], focus: Sequence[str]) -> str:
    commands = [c for c in (run.get("runs_command"), run.get("command", "(command not recorded)")) if c]
    parts = [f"## {title}", "", "```bash", *commands, "```", ""]
    for m in metrics:
        if not per_fold(run, m):
            continue
        parts += [f"**{LABELS.get(m, m)}** per fold", "", fold_table(run, m), ""]
        ref = run.get("reference")
        line = "; ".join(w for w in (wins(run, m, p, ref) for p in focus) if w)
        parts += [line + ".", ""] if line else []
    paired = [c for c in run.get("paired", []) if c["policy"] in focus or c["reference"] in focus]
    if paired:
        parts += [fill(PAGE, "paired_lead"), "", paired_table(paired, metrics), ""]
    return "\n".join(parts)


def sweep_section(run: Mapping[str, Any], image: str, extra: Mapping[str, Any] | None = None) -> str:
    """The node-budget table of ``run``, with the policies of ``extra`` (a run of the same folds) it lacks."""
    sweep = run.get("node_sweep")
    if not sweep:
        return ""
    curves = dict(sweep["curves"])
    more = (extra or {}).get("node_sweep") or {}
    curves.update({p: c for p, c in (more.get("curves") or {}).items() if p not in curves})
    paired_by_level = {n: list(cs) for n, cs in sweep["paired"].items()}
    for n, cs in (more.get("paired") or {}).items():
        paired_by_level.setdefault(n, []).extend(c for c in cs if c["policy"] not in sweep["curves"])
    levels = sorted({int(n) for c in curves.values() for n in c})
    rows = []
    for p in _policies(curves):
        cells = []
        for n in levels:
            c = curves[p].get(str(n)) or curves[p].get(n)
            cells.append("–" if c is None else f"{_f(c['mean'])} [{_f(c['ci95'][0])}, {_f(c['ci95'][1])}]")
        rows.append([f"`{p}`", *cells])
    b = sweep["budgets"][0]
    budget = {"max_tokens": f"{b['max_tokens']:,}", "top_k": b["top_k_neighbors"], "hops": b["max_hops"]}
    parts = [
        fill(PAGE, "sweep", levels=", ".join(map(str, levels)), **budget),
        "",
        markdown_grid(["policy", *(f"{n} nodes" for n in levels)], rows),
        "",
        f"![budget sweep: evidence recall at n nodes]({image})",
        "",
    ]
    paired = [c for n in levels for c in (paired_by_level.get(str(n)) or []) if c["policy"] in ("router", "gnn")]
    if paired:
        rows = [
            [
                str(n),
                f"`{c['policy']}` − `{c['reference']}`",
                str(c["n"]),
                f"**{c['mean_diff']:+.3f}**",
                f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}]",
                p_value(c["p_value"]),
            ]
            for n in levels
            for c in (paired_by_level.get(str(n)) or [])
            if c["policy"] in ("router", "gnn")
        ]
        parts += [
            fill(PAGE, "sweep_paired_lead"),
            "",
            markdown_grid(["nodes", "comparison", "n", "Δ", "95% CI", "p"], rows),
            "",
        ]
    return "\n".join(parts)


def ablation_section(paired: Mapping[str, Any], run: Mapping[str, Any] | None, title: str) -> str:
    parts = [f"## {title}", ""]
    if run is not None:
        parts += ["```bash", run.get("command", ""), paired["command"], "```", ""]
        if run.get("note"):
            parts += [f"({run['note']}.)", ""]
        parts += ["**evidence recall** per fold", "", fold_table(run, "evidence_recall"), ""]
        line = wins(run, "evidence_recall", paired["policy"], paired["reference"])
        parts += [line + ".", ""] if line else []
    parts += [paired_table(paired["paired"], ("evidence_recall", "all_evidence_hit")), ""]
    return "\n".join(parts)


def eval_section(run: Mapping[str, Any], title: str, metrics: Sequence[str]) -> str:
    pol = run.get("policies", {})
    rows = []
    for p in _policies(pol):
        overall = (pol[p].get("summary") or {}).get("overall") or {}
        rows.append([f"`{p}`", str(overall.get("n", "–")), *(_f(overall.get(m)) for m in metrics)])
    parts = [f"### {title}", "", "```bash", run.get("command", ""), "```", ""]
    parts += [markdown_grid(["policy", "n", *(LABELS.get(m, m) for m in metrics)], rows), ""]
    paired = [c for c in run.get("paired", []) if c["policy"] == "router"]
    if paired:
        parts += [paired_table(paired, metrics), ""]
    return "\n".join(parts)


def render(results_dir: Path) -> str:
    results_dir = Path(results_dir)
    parts = [fill(PAGE, "intro") + "\n"]
    locomo = _load(results_dir / "learned_vs_hybrid_locomo.json")
    if locomo is not None:
        parts.append(
            train_section(
                locomo, fill(PAGE, "locomo_title"), ("evidence_recall", "all_evidence_hit"), ("router", "gnn")
            )
        )
    gnn = _load(results_dir / "learned_vs_hybrid_locomo_gnn.json")
    if locomo is not None:
        parts.append(sweep_section(locomo, "recall_at_nodes_locomo.png", gnn))
    if gnn is not None:
        parts.append(
            train_section(
                gnn,
                fill(PAGE, "gnn_title"),
                ("evidence_recall", "all_evidence_hit"),
                ("gnn",),
            )
        )
        if gnn.get("note"):
            parts.append(f"({gnn['note']}.)\n")
    for path in sorted(results_dir.glob("lexical_ablation_*.json")):
        if path.stem.endswith("_run"):
            continue
        paired = _load(path)
        run = _load(path.with_name(paired.get("run") or path.stem + "_run.json"))
        name = path.stem.removeprefix("lexical_ablation_").replace("_", " ")
        parts.append(ablation_section(paired, run, fill(PAGE, "ablation_title", name=name)))
    hotpot = _load(results_dir / "learned_vs_hybrid_hotpotqa.json")
    if hotpot is not None:
        parts.append(
            train_section(
                hotpot,
                fill(PAGE, "hotpot_title"),
                ("evidence_recall", "support_paragraph_recall"),
                ("router",),
            )
        )
        parts.append(fill(PAGE, "hotpot_note") + "\n")
    transfer = sorted(results_dir.glob("learned_vs_hybrid_transfer_*.json"))
    if transfer:
        parts.append(fill(PAGE, "transfer") + "\n")
        for path in transfer:
            name = path.stem.removeprefix("learned_vs_hybrid_transfer_")
            parts.append(
                eval_section(_load(path), name, ("support_paragraph_recall", "passage_recall_2", "passage_recall_5"))
            )
    return "\n".join(p for p in parts if p).rstrip() + "\n"
