"""docs/conversations.md: the conversation walk trained on LoCoMo and REALTALK together, and on each alone.

Rendered from ``docs/results/conversations.json``: ``scripts/results.py merge`` of ``scripts/train.py
+experiment=conversations`` run(s) over every fold, with the walks trained on one source each as variants
(``sources``). Per source: each policy's means over that source's test questions, and the paired per-question
comparisons of the run on them (every policy against the reference, the trained walks against each other); then
the targets and transfer read off those comparisons.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from docgen.results import LABELS, paired_table
from docgen.sources import field, fill, results_at
from graphmem.eval.report import markdown_grid

PAGE = "conversations"
RESULTS = "conversations.json"
SHOWN = ("evidence_recall", "all_evidence_hit", "passage_recall_2", "passage_recall_5")
TARGETS = {"realtalk": {"evidence_recall": 0.08, "passage_recall_5": 0.05}}
"""the gains over the reference the conversation walk is asked for, per source and metric"""
WALK = "router"


def _means_table(part: Mapping[str, Any]) -> str:
    rows = []
    for policy, means in part["means"].items():
        cells = ["–" if means.get(m) is None else f"{means[m]:.3f}" for m in (*SHOWN, "loaded_tokens")]
        rows.append([f"`{policy}`", f"{part['questions'][policy]:,}", *cells])
    return markdown_grid(["policy", "questions", *(LABELS[m] for m in SHOWN), "loaded tokens"], rows)


def _find(part: Mapping[str, Any], policy: str, reference: str, metric: str) -> dict | None:
    return next(
        (c for c in part["paired"] if (c["policy"], c["reference"], c["metric"]) == (policy, reference, metric)),
        None,
    )


def _diff(c: Mapping[str, Any] | None) -> str:
    if c is None:
        return "not measured"
    return f"{c['mean_diff']:+.3f} [{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] (n = {c['n']:,})"


def _targets(by_source: Mapping[str, Any], reference: str) -> list[str]:
    out = []
    for source, goals in TARGETS.items():
        part = by_source.get(source)
        for metric, goal in goals.items():
            c = None if part is None else _find(part, WALK, reference, metric)
            if c is None:
                out.append(f"- {source}, {LABELS[metric]}: `{WALK}` − `{reference}` not measured (target +{goal:.2f}).")
                continue
            verdict = "met" if c["mean_diff"] >= goal else f"missed by {goal - c['mean_diff']:.3f}"
            out.append(
                f"- {source}, {LABELS[metric]}: `{WALK}` − `{reference}` {_diff(c)}; target +{goal:.2f}: {verdict}."
            )
    return out


def _transfer(by_source: Mapping[str, Any], reference: str) -> list[str]:
    """Each single-source walk on the other source against the reference, and the walk trained on both against
    each single-source walk on that walk's own source."""
    out = []
    for source, part in by_source.items():
        alone = f"{source}_only"
        others = [p for p in part["questions"] if p.endswith("_only") and p != alone]
        for other in others:
            c = _find(part, other, reference, "evidence_recall")
            out.append(f"- `{other}` on {source} (trained on the other source only) − `{reference}`: {_diff(c)}.")
        if alone in part["questions"]:
            for metric in ("evidence_recall", "passage_recall_5"):
                c = _find(part, WALK, alone, metric)
                out.append(f"- `{WALK}` (both sources) − `{alone}` on {source}, {LABELS[metric]}: {_diff(c)}.")
    return out


def render(results_dir: Path) -> str:
    path, res = results_at(results_dir, RESULTS)
    if res is None:
        return fill(PAGE, "intro") + "\n\n" + fill(PAGE, "missing") + "\n"
    reference = field(res, path, "reference")
    by_source = field(res, path, "by_source")
    folds = field(res, path, "folds")
    out = [fill(PAGE, "intro"), "", "## The run", "", fill(PAGE, "run", merge=field(res, path, "command")), ""]
    sets = ", ".join(f"{s['name']} (`{s['file']}`, {s['graphs']} conversations)" for s in res.get("cv_sets") or [])
    out += [
        f"Folds {', '.join(map(str, folds))}; main set {res['dataset'].split('+')[0]}; cross-validated with it: "
        f"{sets}.",
        "",
    ]
    out += [
        "## Targets",
        "",
        *_targets(by_source, reference),
        "",
        "## Transfer",
        "",
        *_transfer(by_source, reference),
        "",
    ]
    for source, part in by_source.items():
        out += [f"## {source}: every fold's test conversations", "", _means_table(part), ""]
        out += [fill(PAGE, "paired_lead"), "", paired_table(part["paired"], SHOWN), ""]
    return "\n".join(out).rstrip() + "\n"
