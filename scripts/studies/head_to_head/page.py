"""``docs/head_to_head.md``: Beta evidence learning against the learned walk on LoCoMo, from
``docs/results/head_to_head.json`` (and, when present, the earlier hop-level router's
``head_to_head_hop_level.json`` for comparison of means)."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, read_json

PAGE = "head_to_head"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""

METRICS = ("evidence_recall", "all_evidence_hit", "precision", "loaded_tokens")


def _table(payload: dict) -> list[str]:
    lines = [
        "| protocol | policy | train examples | " + " | ".join(METRICS) + " |",
        "|---|---|---:|" + "---:|" * len(METRICS),
    ]
    for r in payload["results"]:
        for policy, row in r["table"].items():
            n = 0 if policy == "beta_bfs_uniform" else row["examples"]
            cells = [f"{row[m]:.0f}" if m == "loaded_tokens" else f"{row[m]:.4f}" for m in METRICS]
            lines.append(f"| {r['protocol']} | {policy} | {n} | " + " | ".join(cells) + " |")
    return lines


def _paired(payload: dict) -> list[str]:
    lines = [
        "| protocol | router vs | router | reference | difference | 95% CI | p | n |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in payload["results"]:
        for c in r.get("paired", []):
            lines.append(
                f"| {r['protocol']} | {c['reference']} | {c['mean']:.4f} | {c['reference_mean']:.4f} | "
                f"{c['mean_diff']:+.4f} | [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] | {c['p_value']:.2g} | {c['n']} |"
            )
    return lines


def render(results_dir: Path) -> str:
    walk = read_json(results_dir / "head_to_head.json")
    sizes = ", ".join(
        f"{r['protocol']}: {r['sizes']['train']} train / {r['sizes']['val']} val / {r['sizes']['test']} test"
        for r in walk["results"]
    )
    intro = fill(
        TEMPLATE,
        "intro",
        command=walk["command"],
        sizes=sizes,
        budget=walk["budget"],
        wall_seconds=walk["wall_seconds"],
    )
    out = [intro, "", *_table(walk), "", fill(TEMPLATE, "paired"), "", *_paired(walk)]
    earlier = results_dir / "head_to_head_hop_level.json"
    if earlier.is_file():
        hop = read_json(earlier)
        out += ["", fill(TEMPLATE, "earlier", router=hop["router"]), "", *_table(hop)]
    return "\n".join(out) + "\n"
