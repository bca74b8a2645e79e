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
KIND_LABELS = {
    "oracle": "oracle (gold evidence)",
    "judge_mock": "judge_mock (constant reward 1.0, no judge)",
    "answer_end": "answer_end (answer, asked at the end)",
}
TARGET = 0.02
"""the issue's target: online − frozen ≥ +0.02 on the second half of each stream, 95% CI above 0"""
NEWEST, EARLIER = "newest_evidence_hit", "earlier_evidence_recall"
"""run.py's split of recall by the evidence's arrival"""
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
        "for k in 0 1 2 3 4; do python scripts/train_gnn.py data=realtalk graphset=outputs/graphs/realtalk-inc "
        "split.fold=$k checkpoint=outputs/gnn/stream_realtalk/fold$k.pt; done",
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
            lines.append(f"- {online} − {run['pairs'][online]}, second half: {_ci(c)}: target {_verdict(c)}.")
    return lines


def _ci(c: dict | None) -> str:
    """``+0.0388 [+0.0204, +0.0579], n = 609`` (a paired record in one phrase)."""
    if not c:
        return "–"
    return f"{c['mean_diff']:+.4f} [{c['ci_low']:+.4f}, {c['ci_high']:+.4f}], n = {c['n']}"


def _verdict(c: dict | None) -> str:
    """The issue's target on a second-half pair: online − frozen ≥ +0.02 with the 95% CI above 0."""
    if not c:
        return "not measured"
    if c["mean_diff"] >= TARGET and c["ci_low"] > 0:
        return "met"
    return f"missed by {max(TARGET - c['mean_diff'], 0):.4f}" + ("" if c["ci_low"] > 0 else ", CI not above 0")


def _first_fifth(run: dict, online: str, frozen: str) -> tuple[float, int] | None:
    """Online − frozen mean recall over the first fifth of each stream (the position curve's first bin) and its
    number of questions."""
    a, b = (run["position"].get(p, [None])[0] for p in (online, frozen))
    if not a or not b or a["recall"] is None or b["recall"] is None:
        return None
    return a["recall"] - b["recall"], a["n"]


def _findings(payload: dict, name: str) -> list[str]:
    """The section's figures in a few lines: the walk against hybrid, the targets, each online part, HAGE's
    ablation, the end of the stream and the feedback controls (each a paired difference, 95% CI, n)."""
    runs, ref = payload["runs"], payload["reference"]
    run = runs[name]
    second = lambda r, o: _find(r, o, r["pairs"].get(o, ""), SECOND_HALF)  # noqa: E731
    overall = lambda r, o: _find(r, o, r["pairs"].get(o, ""))  # noqa: E731
    out = ["## In short", ""]
    walk = "router_frozen" if "router_frozen" in run["summary"] else "router"
    out.append(
        f"- **The walk against {ref}** (frozen, asked when the evidence arrived): {walk} − {ref} "
        f"{_ci(_find(run, walk, ref))}; online: router − {ref} {_ci(_find(run, 'router', ref))}."
    )
    for online in ("router", "beta_bfs"):
        if online in run["pairs"]:
            c = second(run, online)
            out.append(
                f"- **{online} online − {run['pairs'][online]}, answer feedback, second half:** {_ci(c)}: target "
                f"(≥ +{TARGET:.2f}, CI above 0) {_verdict(c)}; all questions {_ci(overall(run, online))}."
            )
    parts = [p for p in PARTS if p in run["pairs"] and p != "router"]
    if parts:
        cells = "; ".join(f"`{p}` {_ci(second(run, p))}" for p in parts)
        out.append(f"- **Each online part alone**, against the frozen walk, second half: {cells}.")
    if "walk_edges" in run["pairs"]:
        out.append(
            f"- **Learned edges evolved online vs static edges** (HAGE's ablation at test time: walk_edges − "
            f"router_frozen): all {_ci(overall(run, 'walk_edges'))}; second half {_ci(second(run, 'walk_edges'))}."
        )
    if "answer_end" in runs:
        end = runs["answer_end"]
        cells = "; ".join(
            f"{o} − {end['pairs'][o]} {_ci(overall(end, o))} (second half {_ci(second(end, o))})"
            for o in ("router", "beta_bfs")
            if o in end["pairs"]
        )
        out.append(f"- **Asked at the end** (`ask_at=end`), answer feedback: {cells}.")
    if "judge_mock" in runs:
        mock = runs["judge_mock"]
        out.append(
            f"- **Constant-reward control** (`judge_mock`: the judge's path with a fixed reply, reward 1.0 for every "
            f"retrieval; no judge is asked): router − router_frozen {_ci(overall(mock, 'router'))}, beta_bfs − "
            f"beta_bfs_frozen {_ci(overall(mock, 'beta_bfs'))}."
        )
    if "oracle" in runs:
        out.append(
            f"- **Oracle evidence feedback** (the upper reference, gold labels): router − router_frozen, second half "
            f"{_ci(second(runs['oracle'], 'router'))}; beta_bfs {_ci(second(runs['oracle'], 'beta_bfs'))}."
        )
    return [*out, *_why(payload, name)]


def _share(moved: dict | None) -> str:
    if not moved or not moved.get("S", 0) + moved.get("F", 0):
        return "–"
    return f"{moved['F'] / (moved['S'] + moved['F']):.0%}"


def _why(payload: dict, name: str) -> list[str]:
    """What the figures say about where the online gain comes from and why asking at the end loses."""
    runs = payload["runs"]
    run = runs[name]
    if "router" not in run["pairs"]:
        return []
    oracle = runs.get("oracle", {}).get("moved", {}).get("router")
    c, first = _find(run, "router", "router_frozen"), _first_fifth(run, "router", "router_frozen")
    if c is None or first is None:
        timing = "The position curve does not say when a gain appears."
    else:
        timing = (
            f"Online − frozen walk over the first fifth of each stream: {first[0]:+.4f} (n = {first[1]}); over all "
            f"questions {_ci(c)}"
        )
        if c["ci_low"] > 0:
            late = first[0] < 0.75 * c["mean_diff"]
            timing += (
                ": the gain builds up along the stream." if late else ": the gain is there from the first questions."
            )
        else:
            timing += ": no gain over all questions."
    end = _find(runs["answer_end"], "router", "router_frozen") if "answer_end" in runs else None
    values = dict(
        timing=timing,
        harmful=_share(run["moved"].get("router")),
        oracle_harmful=_share(oracle),
        end="not run" if end is None else _ci(end),
        arrival=_arrival_phrase(run),
    )
    return ["", fill(TEMPLATE, "why", **values)]


def _arrival_phrase(run: dict) -> str:
    """Online − frozen walk on the question's last-arriving gold record and on its other ones, where recorded, and
    whether the split bears the reading out."""
    a = run.get("arrival", {}).get("router")
    if not a:
        return (
            "This run did not record recall split by the evidence's arrival (`arrival` in the results; runs of "
            "`run.py` record it now), so the reading is not measured directly on it."
        )
    newest, earlier = a.get(NEWEST), a.get(EARLIER)
    text = (
        f"Measured directly (recall split by the evidence's arrival, table below): online − frozen walk on the "
        f"last-arriving gold record {_ci(newest)}, on the question's earlier gold records {_ci(earlier)}"
    )
    if newest and earlier and newest["ci_low"] > 0 and earlier["ci_high"] < 0:
        return text + (
            ": the online walk gains on the newest evidence and loses on the older evidence, as the reading has it. "
            "What it learns from the answer at `ask_at=evidence` is a preference for records not served before, which "
            "the schedule rewards, not a better walk."
        )
    if newest and newest["ci_low"] > 0:
        return text + ": the gain is on the newest evidence."
    return text + ": the split does not bear the reading out."


def _arrival(payload: dict, name: str) -> list[str]:
    """Online − frozen on the last-arriving gold record and on the others, for each online policy of each run."""
    rows = [
        f"| {r} | {online} | {run['pairs'][online]} | {_pair(a.get(NEWEST))} | {_pair(a.get(EARLIER))} |"
        for r, run in payload["runs"].items()
        for online, a in run.get("arrival", {}).items()
    ]
    if not rows:
        return []
    head = (
        "| run | online | frozen | Δ last-arriving gold hit | 95% CI | p | n | Δ earlier gold recall | 95% CI | p | n |"
    )
    return ["", fill(TEMPLATE, "arrival"), "", head, "|---|---|---|---:|---|---:|---:|---:|---|---:|---:|", *rows]


def _parts(payload: dict, name: str) -> list[str]:
    run = payload["runs"][name]
    parts = [p for p in PARTS if p in run["pairs"]]
    if not parts:
        return []
    lines = ["", fill(TEMPLATE, "parts"), "", *_online_table(run, parts), "", fill(TEMPLATE, "hage"), ""]
    lines += [
        "| edges | policy | recall | second half | Δ vs static, all | Δ vs static, second half |",
        "|---|---|---:|---:|---|---|",
    ]
    for label, policy in HAGE:
        if policy in run["summary"]:
            s = run["summary"][policy]
            pair = [_find(run, policy, "router_frozen", g) for g in ("overall", SECOND_HALF)]
            cells = " | ".join("–" if policy == "router_frozen" else _ci(c) for c in pair)
            lines.append(f"| {label} | {policy} | {_num(s['recall'])} | {_num(s[SECOND_HALF])} | {cells} |")
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
            label = KIND_LABELS.get(name, name)
            out += [f"| {label} | {row[2:]}" for row in _online_table(runs[name], ["router", "beta_bfs"])[2:]]
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
    missing = sorted({"gnn", "router"} - {p for f in folds for p in f["policies"]})
    left_out = f" Left out (no trained checkpoint): {', '.join(missing)}." if missing else ""
    setup = (
        f"{dataset}: {len(folds)} folds, {sum(len(f['test']) for f in folds)} test conversations, {questions} scored "
        f"questions (with resolvable evidence, LoCoMo's adversarial category 5 apart); budget {payload['budget']}; "
        f"encoder {payload['encoder']}; {payload['wall_s'] / 60:.0f} min on one CPU thread of a shared machine. Made "
        f"by `{payload['command']}`.{left_out}"
    )
    commands = "\n".join([*TRAIN.get(dataset, []), payload["command"]])
    plot = f"![recall by place in the stream](streaming_position_{dataset}.png)"
    return [
        fill(TEMPLATE, "intro", commands=commands, setup=setup),
        "",
        plot,
        "",
        *_findings(payload, name),
        "",
        *_policies(payload, name),
        "",
        *_targets(payload, name),
        *_parts(payload, name),
        *_kinds(payload),
        *_arrival(payload, name),
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
