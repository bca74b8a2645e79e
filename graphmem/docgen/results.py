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
mean next to its folds refuse one the folds do not give (:func:`graphmem.docgen.sources.check_spread`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from graphmem.docgen.sources import p_value, read_json
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

INTRO = """# The learned walk with lexical features against BM25 + dense fusion

The strongest simple baseline a practitioner would reach for is `hybrid`: reciprocal-rank fusion
of the dense (MiniLM cosine) and BM25 rankings (k = 60), loaded under the shared budget
(`graphmem/policies/hybrid.py`). The learned walk (`router`) starts from the hybrid selector's
entries and scores each candidate node with, besides its cosine features, five lexical features of
the query and node text (`graphmem/lexical_features.py`): the node's BM25 score over the local
bound `max_score(q) = Σ_t idf(t)(k1 + 1)`, and the share of the query's rare tokens (document
frequency at most max(1, 0.02 N)), capitalised names, numbers and dates the node holds. They are
computed for the candidates only, from a per-graph token table, never from gold. `router_nolex`
is the same walk with `model.lexical=false`.

The hybrid policy and selector fuse each ranking's top `budget.max_nodes` nodes (their default
`candidates: null`, chosen on the HotpotQA training sample: `docs/lexical.md`). The GNN reader
starts from dense entries and was trained for 8 epochs per fold.

Budget: 6 entries, top-2 neighbours, 2 hops, 12 nodes, 2,500 tokens unless a table says otherwise.
Per fold: the test part's mean; mean ± std over folds (ddof = 1). Paired: per-question differences
over all folds' test questions (LoCoMo's adversarial category left out), 95% percentile-bootstrap CI
(10,000 resamples), p from the paired t-test, n questions.
"""


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
        parts += ["Paired per-question differences:", "", paired_table(paired, metrics), ""]
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
    parts = [
        "## Evidence recall against the node budget (LoCoMo)",
        "",
        f"Each fold's test questions at {', '.join(map(str, levels))} loaded nodes (dialogue turns, the unit of "
        f"LoCoMo's retrieval table), tokens unbounded ({b['max_tokens']:,}), entries capped by the node count, "
        f"top-{b['top_k_neighbors']} neighbours, {b['max_hops']} hops; the walk was trained at 12 nodes. "
        "Mean evidence recall over all folds' test questions, 95% bootstrap interval.",
        "",
        markdown_grid(["policy", *(f"{n} nodes" for n in levels)], rows),
        "",
        f"![evidence recall against the node budget]({image})",
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
            "Paired at each level:",
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
    parts = [INTRO]
    locomo = _load(results_dir / "learned_vs_hybrid_locomo.json")
    if locomo is not None:
        parts.append(
            train_section(
                locomo, "LoCoMo: 5 folds by conversation", ("evidence_recall", "all_evidence_hit"), ("router", "gnn")
            )
        )
    gnn = _load(results_dir / "learned_vs_hybrid_locomo_gnn.json")
    if locomo is not None:
        parts.append(sweep_section(locomo, "recall_at_nodes_locomo.png", gnn))
    if gnn is not None:
        parts.append(
            train_section(
                gnn,
                "LoCoMo: the GNN reader with lexical features, same folds",
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
        parts.append(ablation_section(paired, run, f"Ablation: the walk without lexical features ({name})"))
    hotpot = _load(results_dir / "learned_vs_hybrid_hotpotqa.json")
    if hotpot is not None:
        parts.append(
            train_section(
                hotpot,
                "HotpotQA: 5 folds, the train file added to every fold's training part",
                ("evidence_recall", "support_paragraph_recall"),
                ("router",),
            )
        )
        parts.append(
            "(On HotpotQA the evidence is the supporting sentences: evidence recall is supporting-sentence recall.)\n"
        )
    transfer = sorted(results_dir.glob("learned_vs_hybrid_transfer_*.json"))
    if transfer:
        parts.append(
            "## Transfer: walks trained on LoCoMo (fold 0) or on HotpotQA (fold 0, `_hotpotqa_walk`), on sets they "
            "never saw\n\nThe pooled HotpotQA set holds the HotpotQA walk's training questions, so that walk is "
            "not evaluated there.\n"
        )
        for path in transfer:
            name = path.stem.removeprefix("learned_vs_hybrid_transfer_")
            parts.append(
                eval_section(_load(path), name, ("support_paragraph_recall", "passage_recall_2", "passage_recall_5"))
            )
    return "\n".join(p for p in parts if p).rstrip() + "\n"
