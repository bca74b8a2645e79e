"""``docs/exploration.md``: posterior-mean, UCB and Thompson-sampling Beta BFS learning from one
feedback stream, from ``docs/results/exploration.json`` (written by ``scripts/studies/head_to_head/run.py``
with ``exploration.rankings``); shows ``docs/exploration_rounds.png`` when it is there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from docgen.sources import field, fill, p_value, read_json

from graphmem.eval.report import markdown_grid

PAGE = "exploration"
"""the page this module renders: ``docs/exploration.md``"""

RESULTS = "exploration.json"
TEMPLATE = str(Path(__file__).with_name("page_exploration"))
"""the page's prose: ``page_exploration.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""
PLOT = "exploration_rounds.png"


def _recall(p: dict[str, Any]) -> str:
    if p.get("recall") is None:
        return "–"
    return f"{p['recall']:.4f} [{p['ci_low']:.3f}, {p['ci_high']:.3f}]"


def _diff(c: dict[str, Any]) -> list[str]:
    return [f"{c['mean_diff']:+.4f}", f"[{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]", p_value(c["p_value"]), str(c["n"])]


def _recall_table(learners: dict[str, Any], kind: str, rounds: list, total: bool) -> str:
    header = ["learner", *(f"round {r}" for r in rounds)] + (["all rounds"] if total else [])
    rows = []
    for name, lr in learners.items():
        cells = [_recall(p) for p in lr[kind]]
        rows.append([name, *cells] + ([_recall(lr["served_all"])] if total else []))
    return markdown_grid(header, rows)


def _paired_table(paired: list[dict[str, Any]], last: int | str) -> str:
    """Every round of the learners, single Thompson seeds at round ``last`` only (their average has every round)."""
    averaged = any(c["policy"] == "thompson" for c in paired)
    keep = [c for c in paired if not (averaged and c["policy"].startswith("thompson_s")) or c["round"] == last]
    rows = [[f"{c['policy']} − mean", str(c["round"]), *_diff(c)] for c in keep]
    return markdown_grid(["paired difference", "round", "Δ recall", "95% CI", "p", "n"], rows)


def _verdict(cs: list[dict[str, Any]]) -> str:
    sig = [c for c in cs if c["ci_low"] > 0 or c["ci_high"] < 0]
    if not sig:
        return "no 95% CI excludes zero"
    return "; ".join(f"{c['policy']} {c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]" for c in sig)


def _reading(payload: dict[str, Any]) -> str:
    """Sentences drawn from the figures (which comparisons exclude zero), never written by hand."""
    paired = payload["paired"]
    mean = payload["learners"]["mean"]["evidence"]["labels"]
    labelled = sum(mean.values())
    differ = [
        f"{name} {lr['served_differ_from_mean']} of {payload['stream_questions']}"
        for name, lr in payload["learners"].items()
        if name != "mean" and lr.get("served_differ_from_mean") is not None
    ]
    return fill(
        TEMPLATE,
        "reading",
        overall=_verdict([c for c in paired["served"] if c["round"] == "all"]),
        final=_verdict([c for c in paired["heldout"] if c["round"] == payload["rounds"]]),
        labelled=labelled,
        helpful=mean["helpful"],
        harmful=mean["harmful"],
        neutral=mean["neutral"],
        share=f"{mean['harmful'] / max(labelled, 1):.1%}",
        differ=", ".join(differ),
    )


def _intro(payload: dict[str, Any]) -> str:
    budget = payload["budget"]
    return fill(
        TEMPLATE,
        "intro",
        rounds=payload["rounds"],
        round_sizes=", ".join(str(n) for n in payload["round_sizes"]),
        command=payload["command"],
        dataset=payload["dataset"],
        max_entries=budget["max_entries"],
        top_k=budget["top_k_neighbors"],
        max_hops=budget["max_hops"],
        max_nodes=budget["max_nodes"],
        max_tokens=f"{budget['max_tokens']:,}",
        stream=payload["stream_questions"],
        heldout=payload["heldout_questions"],
        wall_seconds=payload.get("wall_seconds", "?"),
    )


def render(results_dir: Path) -> str:
    path = Path(results_dir) / RESULTS
    payload = read_json(path)
    for key in ("command", "learners", "paired", "rounds", "round_sizes", "stream_questions", "budget"):
        field(payload, path, key)
    field(payload, path, "learners", "mean", "evidence", "labels")
    learners = payload["learners"]
    rounds = list(range(1, payload["rounds"] + 1))
    out = [_intro(payload), ""]
    if (Path(results_dir).parent / PLOT).is_file():
        out += [f"![recall per feedback round with 95% bands]({PLOT})", ""]
    out += [_reading(payload), "", fill(TEMPLATE, "served"), "", _recall_table(learners, "served", rounds, True), ""]
    out += [fill(TEMPLATE, "served_paired"), "", _paired_table(payload["paired"]["served"], "all"), ""]
    out += [fill(TEMPLATE, "heldout"), "", _recall_table(learners, "heldout", [0, *rounds], False), ""]
    out += [fill(TEMPLATE, "heldout_paired"), "", _paired_table(payload["paired"]["heldout"], payload["rounds"])]
    return "\n".join(out) + "\n"
