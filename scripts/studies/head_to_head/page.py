"""``docs/head_to_head.md``: Beta evidence learning against the learned walk on LoCoMo, from
``docs/results/head_to_head.json`` (and, when present, the earlier hop-level router's
``head_to_head_hop_level.json`` for comparison of means)."""

from __future__ import annotations

from pathlib import Path

from graphmem.docgen.sources import read_json

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
    out = [
        "# Beta evidence learning against the learned walk",
        "",
        "`scripts/studies/head_to_head/run.py` evaluates three policies on the same held-out LoCoMo questions under",
        "one budget: Beta BFS with every counter at zero, Beta BFS after oracle evidence learning on the",
        "training questions, and the router (the learned walk, trained by `rl.walk.trainer.WalkTrainer`",
        "with `configs/trainer/default.yaml` on the same training questions and selected on the",
        "validation questions). Protocol `conversation` holds out whole conversations (Beta's counters",
        "cannot reach them); `within` splits the questions inside each conversation.",
        "",
        "```bash",
        walk["command"],
        "```",
        "",
        f"Questions ({sizes}); budget {walk['budget']}; {walk['wall_seconds']} s on one CPU thread.",
        "",
        *_table(walk),
        "",
        "Paired difference in evidence recall on the test questions (router minus reference; 95%",
        "percentile bootstrap CI, paired t-test p; LoCoMo's adversarial category left out as in the",
        "overall tables):",
        "",
        *_paired(walk),
    ]
    earlier = results_dir / "head_to_head_hop_level.json"
    if earlier.is_file():
        hop = read_json(earlier)
        out += [
            "",
            f"The same command before the router became the walk ({hop['router']}) gave, on the same",
            "splits (means only; the per-question rows of that run were not kept):",
            "",
            *_table(hop),
        ]
    return "\n".join(out) + "\n"
