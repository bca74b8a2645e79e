"""``docs/streaming.md``: the streaming protocol on held-out conversations and test-time learning, from
``docs/results/streaming_<dataset>.json`` (``run.py``), one section per dataset whose file exists."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import fill, load_results, p_value

PAGE = "streaming"
TEMPLATE = str(Path(__file__).with_name("page"))
"""the page's prose: ``page.md`` beside this file (:func:`~docgen.sources.fill` takes its path)"""
DATASETS = ("locomo", "realtalk")
SECOND_HALF = "second_half"
PARTS = ("walk_counters", "walk_edges", "walk_router", "walk_edges_router", "router")
HAGE = (("static", "router_frozen"), ("evolved online", "walk_edges"), ("+ routing", "walk_edges_router"))
TRAIN = {
    "locomo": [
        "python scripts/build_graph.py graph.incremental=true graphset=outputs/graphs/locomo-inc",
        'for k in 0 1 2 3 4; do python scripts/train.py graphset=outputs/graphs/locomo-inc "cv.folds=[$k]" '
        "'baselines=[]' out_dir=outputs/train/stream/fold$k; done",
        "for k in 0 1 2 3 4; do python scripts/train_gnn.py graphset=outputs/graphs/locomo-inc split.fold=$k "
        "checkpoint=outputs/gnn/stream/fold$k.pt; done",
    ],
    "realtalk": [
        "python scripts/build_graph.py data=realtalk graph.incremental=true graphset=outputs/graphs/realtalk-inc",
        "for k in 0 1 2 3 4; do python scripts/train.py data=realtalk graphset=outputs/graphs/realtalk-inc "
        "\"cv.folds=[$k]\" 'baselines=[]' out_dir=outputs/train/stream_realtalk/fold$k; done",
    ],
}


def _num(x: float | None, fmt: str = "{:.4f}") -> str:
    return "–" if x is None else fmt.format(x)


def _pair(c: dict | None) -> str:
    if not c:
        return "– | – | – | –"
    return f"{c['mean_diff']:+.4f} | [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}] | {p_value(c['p_value'])} | {c['n']}"


def _find(run: dict, policy: str, reference: str, group: str = "overall") -> dict | None:
    return next(
        (
            c
            for c in run["paired"]
            if c["policy"] == policy and c["reference"] == reference and c.get("group", "overall") == group
        ),
        None,
    )


def _policies(payload: dict, name: str) -> list[str]:
    run, ref = payload["runs"][name], payload["reference"]
    lines = [
        fill(TEMPLATE, "policies", reference=ref, run=name),
        "",
        f"| policy | n | recall | second half | Δ vs {ref} | 95% CI | p | n |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for policy, s in run["summary"].items():
        pair = _pair(_find(run, policy, ref)) if policy != ref else "– | – | – | –"
        lines.append(f"| {policy} | {s['n']} | {_num(s['recall'])} | {_num(s[SECOND_HALF])} | {pair} |")
    return lines


def _online_table(run: dict, names: list[str] | None = None) -> list[str]:
    lines = [
        "| online | frozen | group | Δ recall | 95% CI | p | n |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for online, frozen in run["pairs"].items():
        if names is not None and online not in names:
            continue
        for group in ("overall", SECOND_HALF):
            label = "all questions" if group == "overall" else "second half"
            lines.append(f"| {online} | {frozen} | {label} | {_pair(_find(run, online, frozen, group))} |")
    return lines


def _targets(payload: dict, name: str) -> list[str]:
    run = payload["runs"][name]
    lines = [fill(TEMPLATE, "targets", run=name), "", *_online_table(run, ["router", "beta_bfs"]), ""]
    for online in ("router", "beta_bfs"):
        c = _find(run, online, run["pairs"].get(online, ""), SECOND_HALF)
        if c is not None:
            met = c["mean_diff"] >= 0.02 and c["ci_low"] > 0
            verdict = "met" if met else f"missed by {max(0.02 - c['mean_diff'], 0):.4f} (CI low {c['ci_low']:+.4f})"
            lines.append(f"- {online} − {run['pairs'][online]}, second half: {c['mean_diff']:+.4f}: target {verdict}.")
    return lines


def _parts(payload: dict, name: str) -> list[str]:
    run = payload["runs"][name]
    parts = [
        p for p in ("walk_counters", "walk_edges", "walk_router", "walk_edges_router", "router") if p in run["pairs"]
    ]
    if not parts:
        return []
    lines = ["", fill(TEMPLATE, "parts"), "", *_online_table(run, parts), "", fill(TEMPLATE, "hage"), ""]
    lines += ["| edges | policy | recall | second half |", "|---|---|---:|---:|"]
    for label, policy in (
        ("static", "router_frozen"),
        ("evolved online", "walk_edges"),
        ("+ routing", "walk_edges_router"),
    ):
        if policy in run["summary"]:
            s = run["summary"][policy]
            lines.append(f"| {label} | {policy} | {_num(s['recall'])} | {_num(s[SECOND_HALF])} |")
    lines += ["", fill(TEMPLATE, "moved"), ""]
    lines += [
        "| learner | served differently | router drift | residual rows moved | mean ‖δ‖ | edges with evidence "
        "| S | F |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for online, m in run["moved"].items():
        lines.append(
            f"| {online} | {m['served_differently']:.1%} | {_num(m.get('router_drift'))} | "
            f"{_num(m.get('edges_moved'), '{:.0f}')} | {_num(m.get('edge_norm_mean'))} | "
            f"{_num(m.get('edges_with_evidence'), '{:.0f}')} | {_num(m.get('S'), '{:.0f}')} | "
            f"{_num(m.get('F'), '{:.0f}')} |"
        )
    return lines


def _kinds(payload: dict) -> list[str]:
    runs = payload["runs"]
    out = []
    kinds = [n for n in ("oracle", "judge_mock", "answer_end") if n in runs]
    if kinds:
        out += ["", fill(TEMPLATE, "kinds"), "", "| run | " + _online_table({"pairs": {}, "paired": []})[0][2:]]
        out.append("|---|" + _online_table({"pairs": {}, "paired": []})[1][1:])
        for name in kinds:
            out += [f"| {name} | {row[2:]}" for row in _online_table(runs[name], ["router", "beta_bfs"])[2:]]
    if "frozen" in runs and "frozen_end" in runs:
        out += ["", fill(TEMPLATE, "ask_at"), "", "| policy | asked at evidence | asked at the end | n |"]
        out.append("|---|---:|---:|---:|")
        for policy, s in runs["frozen"]["summary"].items():
            end = runs["frozen_end"]["summary"].get(policy, {})
            out.append(f"| {policy} | {_num(s['recall'])} | {_num(end.get('recall'))} | {s['n']} |")
    return out


def _cost(payload: dict, name: str) -> list[str]:
    run = payload["runs"][name]
    lines = ["", fill(TEMPLATE, "cost"), ""]
    lines += ["| learner | feedback steps | seconds | steps/s | policy-gradient steps |", "|---|---:|---:|---:|---:|"]
    for learner, c in run["learning"].items():
        lines.append(
            f"| {learner} | {c['steps']:.0f} | {c['seconds']:.1f} | {_num(c.get('steps_per_s'), '{:.1f}')} | "
            f"{c.get('pg_steps', 0):.0f} |"
        )
    lines += ["", "| memory of | streams | records | edges | feedback | MB | ms per record added |"]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for policy, m in run["memory"].items():
        lines.append(
            f"| {policy} | {m['streams']} | {m['records']:.0f} | {m['edges']:.0f} | {m['feedback']:.0f} | "
            f"{m['megabytes']:.1f} | {m['add_ms_per_record']:.2f} |"
        )
    return lines


def _tuning(payload: dict) -> list[str]:
    lines = ["", fill(TEMPLATE, "tuning"), "", "| fold | validation | setting | Δ all (n) | Δ second half (n) | kept |"]
    lines.append("|---:|---|---|---:|---:|---|")
    for f in payload["folds"]:
        for t in f["tuning"]:
            a, b = t.get("all"), t.get(SECOND_HALF)
            cell = lambda c: "–" if not c else f"{c['mean_diff']:+.4f} ({c['n']})"  # noqa: E731
            setting = ", ".join(f"{k}={v}" for k, v in t["setting"].items()) or "defaults"
            kept = "yes" if t.get("kept") else ""
            lines.append(f"| {f['fold']} | {', '.join(f['val'])} | {setting} | {cell(a)} | {cell(b)} | {kept} |")
    return lines


def _section(payload: dict, dataset: str) -> list[str]:
    name = next(iter(payload["runs"]))
    folds = payload["folds"]
    questions = sum(s["n"] for s in [payload["runs"][name]["summary"].get(payload["reference"], {"n": 0})])
    setup = (
        f"{dataset}: {len(folds)} folds, {sum(len(f['test']) for f in folds)} test conversations, {questions} scored "
        f"questions (categories 1–4 with resolvable evidence); budget {payload['budget']}; encoder "
        f"{payload['encoder']}; {payload['wall_s'] / 60:.0f} min on one CPU thread of a shared machine. Made by "
        f"`{payload['command']}`."
    )
    commands = "\n".join([*TRAIN.get(dataset, []), payload["command"]])
    plot = f"![recall by place in the stream](streaming_position_{dataset}.png)"
    return [
        fill(TEMPLATE, "intro", commands=commands, setup=setup),
        "",
        plot,
        "",
        *_policies(payload, name),
        "",
        *_targets(payload, name),
        *_parts(payload, name),
        *_kinds(payload),
        *_cost(payload, name),
        *_tuning(payload),
    ]


def render(results_dir: Path) -> str:
    out: list[str] = []
    for dataset in DATASETS:
        payload = load_results(results_dir, f"streaming_{dataset}.json")
        if payload is not None:
            out += [*(["", "---", ""] if out else []), *_section(payload, dataset)]
    if not out:
        out = ["# Memories that evolve while they are used", "", "No results yet (`scripts/studies/streaming/run.py`)."]
    return "\n".join(out) + "\n"
