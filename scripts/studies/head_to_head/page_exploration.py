"""``docs/exploration.md``: posterior-mean, UCB and Thompson-sampling Beta BFS learning from one
feedback stream, from ``docs/results/exploration.json`` (written by ``scripts/studies/head_to_head/run.py``
with ``exploration.rankings``); shows ``docs/exploration_rounds.png`` when it is there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphmem.docgen.sources import field, p_value, read_json
from graphmem.eval.report import markdown_grid

PAGE = "exploration"
"""the page this module renders: ``docs/exploration.md``"""

RESULTS = "exploration.json"
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


def _reading(payload: dict[str, Any]) -> list[str]:
    """Sentences drawn from the figures (which comparisons exclude zero), never written by hand."""
    paired = payload["paired"]
    overall = [c for c in paired["served"] if c["round"] == "all"]
    final = [c for c in paired["heldout"] if c["round"] == payload["rounds"]]

    def verdict(cs: list[dict[str, Any]]) -> str:
        sig = [c for c in cs if c["ci_low"] > 0 or c["ci_high"] < 0]
        if not sig:
            return "no 95% CI excludes zero"
        return "; ".join(f"{c['policy']} {c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}]" for c in sig)

    mean = payload["learners"]["mean"]["evidence"]["labels"]
    labelled = sum(mean.values())
    differ = [
        f"{name} {lr['served_differ_from_mean']} of {payload['stream_questions']}"
        for name, lr in payload["learners"].items()
        if name != "mean" and lr.get("served_differ_from_mean") is not None
    ]
    return [
        f"- Served recall over all rounds against the posterior mean: {verdict(overall)}.",
        f"- Held-out recall after the last round (posterior mean on each learner's counters): {verdict(final)}.",
        f"- The oracle labelled {labelled} transitions for the mean learner: {mean['helpful']} helpful, "
        f"{mean['harmful']} harmful, {mean['neutral']} neutral "
        f"({mean['harmful'] / max(labelled, 1):.1%} harmful). A harmful label moves an edge below the "
        "untried edges (w = 1/2), so the posterior mean already turns away from what failed; what UCB "
        "adds is a preference among edges of similar mean for the less observed one, and such "
        "choices are rare here.",
        f"- Stream questions whose served nodes differ from the mean learner's: {', '.join(differ)}. "
        "Thompson draws break the ties among untried edges at random, the mean by target id.",
    ]


def render(results_dir: Path) -> str:
    path = Path(results_dir) / RESULTS
    payload = read_json(path)
    for key in ("command", "learners", "paired", "rounds", "round_sizes", "stream_questions", "budget"):
        field(payload, path, key)
    field(payload, path, "learners", "mean", "evidence", "labels")
    learners = payload["learners"]
    rounds = list(range(1, payload["rounds"] + 1))
    budget = payload["budget"]
    out = [
        "# Exploration in the Beta walk",
        "",
        "GraphMemory's Beta BFS ranks each node's neighbours by the posterior mean of the edge's",
        "Beta(α, β) counters (α = S + 1, β = F + 1). The mean does not reward uncertainty, and the",
        "evidence depends on the policy: only traversed edges are ever labelled. `beta_bfs` takes",
        "`policy.ranking`:",
        "",
        "| ranking | score of an edge |",
        "|---|---|",
        "| `mean` (default, GraphMemory eq. 19) | α / (α + β) |",
        "| `ucb` | α / (α + β) + c · sqrt(α β / ((α + β)² (α + β + 1))), `policy.ucb_c` = c |",
        "| `thompson` | θ ~ Beta(α, β), one draw per edge and query from a generator seeded by `policy.seed` |",
        "",
        "Exploration is for collecting feedback; every evaluation ranks by the mean. Here each learner",
        "starts from zero counters on its own copy of the LoCoMo graphs and learns from the **same**",
        "stream: the `within` split's training questions in one shuffled order, cut into",
        f"{payload['rounds']} rounds of {', '.join(str(n) for n in payload['round_sizes'])} questions, labelled by the",
        "oracle Reflector (the study's `feedback.py`) on the transitions the learner itself traversed. Per",
        "round: the evidence recall of the retrievals it **served** while learning (the online view),",
        "and, after the round, the recall on the held-out questions of Beta BFS with the posterior",
        "mean on its counters. Several Thompson seeds are also averaged per question (`thompson`).",
        "",
        "```bash",
        payload["command"],
        "```",
        "",
        f"{payload['dataset']}, budget {budget['max_entries']} entries, top-{budget['top_k_neighbors']} neighbours, "
        f"{budget['max_hops']} hops, {budget['max_nodes']} nodes, {budget['max_tokens']:,} tokens; "
        f"{payload['stream_questions']} stream and {payload['heldout_questions']} held-out questions "
        f"(recall over categories 1–4); {payload.get('wall_seconds', '?')} s on one CPU thread.",
        "",
    ]
    if (Path(results_dir).parent / PLOT).is_file():
        out += [f"![recall per feedback round with 95% bands]({PLOT})", ""]
    out += [
        "## Reading",
        "",
        *_reading(payload),
        "",
        "## Served while learning",
        "",
        "Mean evidence recall of the served retrievals per round [95% bootstrap CI]:",
        "",
        _recall_table(learners, "served", rounds, True),
        "",
        "Paired per question against the mean learner (10,000 bootstrap resamples; p of the paired t-test;",
        "single Thompson seeds over all rounds only):",
        "",
        _paired_table(payload["paired"]["served"], "all"),
        "",
        "## Held out, posterior mean",
        "",
        "Mean evidence recall on the held-out questions before any feedback (round 0) and after each round:",
        "",
        _recall_table(learners, "heldout", [0, *rounds], False),
        "",
        "Paired per question against the mean learner after each round (single Thompson seeds after the last):",
        "",
        _paired_table(payload["paired"]["heldout"], payload["rounds"]),
    ]
    return "\n".join(out) + "\n"
