"""docs/policy_gradients.md: rewards without evidence labels, the policy-gradient estimators and the token cost.

Renders ``docs/results/policy_gradients_locomo.json`` (``scripts/results.py merge`` over the fold runs of
``scripts/train.py``) and ``docs/results/cost_aware_locomo.json`` (``scripts/studies/cost_curve/run.py`` over
the same runs), and nothing else; a file not present is named on the page in place of its sections. The page's
prose is ``templates/policy_gradients.md``.
"""

from __future__ import annotations

from pathlib import Path

from docgen.sources import ResultsFileError, field, fill, load_results, p_value
from graphmem.eval.report import markdown_grid
from graphmem.eval.variants import GROUPS, trained_variants

MERGED = "policy_gradients_locomo.json"
COST = "cost_aware_locomo.json"
METRIC = "evidence_recall"
CURVES_COMMAND = (
    f".venv/bin/python scripts/results.py curves docs/results/{MERGED} --out-dir docs --prefix policy_gradients_"
)

PAGE = "policy_gradients"


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(lo: float, hi: float, digits: int = 3, sign: str = "+") -> str:
    return f"[{lo:{sign}.{digits}f}, {hi:{sign}.{digits}f}]"


def verdict(lo: float, hi: float, above: str, below: str) -> str:
    """What a 95% interval of a difference carries: ``above`` / ``below`` when it excludes 0, else no difference."""
    if lo > 0 or hi < 0:
        return fill(PAGE, "verdict_excludes", what=above if lo > 0 else below)
    return fill(PAGE, "verdict_includes")


def paired(payload: dict, policy: str, reference: str, metric: str = METRIC) -> dict | None:
    return next(
        (
            c
            for c in payload.get("paired", [])
            if c["policy"] == policy and c["reference"] == reference and c["metric"] == metric
        ),
        None,
    )


def _diff_cells(c: dict | None) -> list[str]:
    if c is None:
        return ["–", "–", "–", "–"]
    return [f"{c['mean_diff']:+.3f}", _ci(c["ci_low"], c["ci_high"]), p_value(c["p_value"]), str(c["n"])]


def _spread(summary: dict, policy: str, metric: str, digits: int = 3) -> str:
    s = summary.get(policy, {}).get(metric)
    if not s or s.get("mean") is None:
        return "–"
    std = "–" if s.get("std") is None else f"{s['std']:.{digits}f}"
    return f"{s['mean']:.{digits}f} ± {std} ({s['folds']})"


def _budget(b: dict) -> str:
    return f"{b['max_entries']} entries, {b['max_nodes']} nodes, {b['max_tokens']} tokens, {b['max_hops']} hops"


def _missing(name: str, script: str) -> list[str]:
    return [fill(PAGE, "missing", name=name, script=script)]


# ---------------------------------------------------------------------------- (a) rewards without labels
def labels_section(payload: dict, variants: dict[str, dict]) -> list[str]:
    out = [fill(PAGE, "labels"), ""]
    names = [v for v, info in variants.items() if info["reward"] != "evidence"]
    if not names:
        return out + [fill(PAGE, "labels_none")]
    out += [fill(PAGE, "labels_lead"), ""]
    rows, lines = [], []
    for v in names:
        info = variants[v]
        for ref in ("dense_topk", "hybrid"):
            c = paired(payload, v, ref)
            rows.append(
                [f"`{v}`", info["reward"], info["estimator"], info["phases"], ref]
                + ([_f(c["mean"]), _f(c["reference_mean"])] if c else ["–", "–"])
                + _diff_cells(c)
            )
            if c is None:
                lines.append(fill(PAGE, "labels_unpaired", variant=v, reference=ref))
            else:
                what = verdict(c["ci_low"], c["ci_high"], "higher recall", "lower recall")
                diff = f"{c['mean_diff']:+.3f}"
                lines.append(fill(PAGE, "labels_paired", variant=v, reference=ref, diff=diff, n=c["n"], what=what))
    header = ["variant", "reward", "estimator", "phases", "vs", "recall", "reference", "Δ", "95% CI", "p", "n"]
    return out + [markdown_grid(header, rows), "", *lines]


# ---------------------------------------------------------------------------- (b) estimators
def estimators_section(payload: dict, variants: dict[str, dict]) -> list[str]:
    out = [fill(PAGE, "estimators"), ""]
    summary = payload["summary"]
    evidence = {v: i for v, i in variants.items() if i["reward"] == "evidence" and not i["token_cost"] > 0}
    sl = [v for v, i in evidence.items() if i["phases"] == "SL"]
    sl_ref = next((v for v in sl if any(c["reference"] == v for c in payload.get("paired", []))), None)
    reference = f" `{sl_ref}`:" if sl_ref else " (none in this file: merge with `--also <SL variant>`):"
    out += [fill(PAGE, "estimators_lead", reference=reference), ""]
    order = {"SL": 0, "SL+RL": 1, "RL": 2}
    rows = []
    for v, i in sorted(evidence.items(), key=lambda kv: (order[kv[1]["phases"]], kv[0])):
        c = paired(payload, v, sl_ref) if sl_ref and v != sl_ref else None
        rows.append(
            [f"`{v}`", i["phases"], "–" if i["phases"] == "SL" else i["estimator"], str(i["group_size"])]
            + [_spread(summary, v, m) for m in ("evidence_recall", "all_evidence_hit")]
            + [_spread(summary, v, "loaded_tokens", 0)]
            + _diff_cells(c)
        )
    header = ["variant", "phases", "estimator", "walks/question", "recall", "all-hit", "tokens"]
    out += [markdown_grid(header + ["Δ vs SL", "95% CI", "p", "n"], rows), ""]
    for v, i in evidence.items():
        c = paired(payload, v, sl_ref) if sl_ref and v != sl_ref else None
        if c is not None:
            what = verdict(c["ci_low"], c["ci_high"], "higher recall", "lower recall")
            row = {"phases": i["phases"], "estimator": i["estimator"]}
            out.append(fill(PAGE, "estimator_paired", variant=v, reference=sl_ref, what=what, **row))
    baselines = [p for p in summary if p not in variants]
    out += [
        "",
        fill(PAGE, "baselines_lead"),
        "",
        markdown_grid(
            ["policy", "recall", "all-hit", "tokens"],
            [
                [f"`{p}`", _spread(summary, p, "evidence_recall"), _spread(summary, p, "all_evidence_hit")]
                + [_spread(summary, p, "loaded_tokens", 0)]
                for p in baselines
            ],
        ),
    ]
    return out


# ---------------------------------------------------------------------------- (c) cost-aware
def _reach(r: dict) -> str:
    if r["status"] == "interpolated":
        return f"{r['tokens']:.0f} (between {r['between'][0]} and {r['between'][1]} nodes)"
    if r["status"] == "below_sweep":
        return "below its smallest sweep level's recall"
    return "not reached on its sweep (above its largest level's recall)"


def cost_section(cost: dict | None) -> list[str]:
    out = [fill(PAGE, "cost"), ""]
    if cost is None:
        return out + _missing(COST, "scripts/studies/cost_curve/run.py")
    fixed, path = cost["fixed"]["variant"], Path(COST)
    folds, budget, sweep = field(cost, path, "folds"), field(cost, path, "budget"), field(cost, path, "sweep_budget")
    fp = cost["points"][fixed]
    lead = fill(
        PAGE,
        "cost_lead",
        fixed=fixed,
        fixed_cost=f"{cost['fixed']['token_cost']:g}",
        folds=folds,
        budget=_budget(budget),
        tokens=f"{fp['tokens']['mean']:.0f}",
        tokens_ci=_ci(*fp["tokens"]["ci95"], 0, ""),
        recall=f"{fp['recall']['mean']:.3f}",
        recall_ci=_ci(*fp["recall"]["ci95"], 3, ""),
        n=fp["n"],
        sweep_tokens=sweep.get("max_tokens"),
        sweep_hops=sweep.get("max_hops"),
    )
    out += [lead, ""]
    rows, lines = [], []
    for v in cost["cost_variants"]:
        pt, vs = v["point"], v["vs_fixed"]
        r, t = vs["recall"], vs["tokens"]
        rows.append(
            [f"{v['token_cost']:g}", f"`{v['variant']}`", "yes" if v.get("stop") else "no", str(pt["n"])]
            + [f"{pt['tokens']['mean']:.0f} {_ci(*pt['tokens']['ci95'], 0, '')}"]
            + [f"{pt['recall']['mean']:.3f} {_ci(*pt['recall']['ci95'], 3, '')}"]
            + [f"{r['mean_diff']:+.3f} {_ci(r['ci_low'], r['ci_high'])}", p_value(r["p_value"])]
            + [f"{t['saving']:+.1%} [{t['saving_ci95'][0]:+.1%}, {t['saving_ci95'][1]:+.1%}]", str(t["n"])]
            + [_reach(vs["fixed_tokens_to_reach"])]
        )
        saves = verdict(*t["saving_ci95"], "fewer", "more")
        loses = verdict(r["ci_low"], r["ci_high"], "higher", "lower")
        cost_of = f"{v['token_cost']:g}"
        lines.append(fill(PAGE, "cost_paired", cost=cost_of, fixed=fixed, saves=saves, loses=loses))
    header = ["λ", "variant", "learned stop", "n", "tokens [95% CI]", "recall [95% CI]", "Δ recall vs fixed [CI]", "p"]
    out += [markdown_grid(header + ["token saving [CI]", "n pairs", f"`{fixed}` tokens to reach"], rows), ""]
    out += lines
    if cost.get("plot"):
        out += ["", f"![recall against loaded tokens]({Path(cost['plot']).name})"]
    out += ["", fill(PAGE, "sweep_lead"), ""]
    levels = sorted({p["max_nodes"] for pts in cost["curves"].values() for p in pts})
    grid = []
    for policy, pts in cost["curves"].items():
        at = {p["max_nodes"]: p for p in pts}
        grid.append(
            [f"`{policy}`"]
            + [
                f"{at[n]['tokens']['mean']:.0f} / {at[n]['recall']['mean']:.3f} {_ci(*at[n]['recall']['ci95'], 3, '')}"
                if n in at
                else "–"
                for n in levels
            ]
        )
    return out + [markdown_grid(["policy", *(f"{n} nodes" for n in levels)], grid)]


# ---------------------------------------------------------------------------- (d) learning curves
def curves_section(variants: dict[str, dict]) -> list[str]:
    out = [fill(PAGE, "curves"), ""]
    if not variants or not all(rows for i in variants.values() for rows in i["history"].values()):
        return out + [fill(PAGE, "curves_none"), ""]
    out += [fill(PAGE, "curves_lead", command=CURVES_COMMAND), ""]
    for group, title in GROUPS.items():
        names = [v for v, i in variants.items() if i["group"] == group]
        if names:
            out += [f"**{title}** ({', '.join(f'`{v}`' for v in names)}):", ""]
            out += [f"![{group}](policy_gradients_{group}.png)", ""]
    return out


def selected_epochs(payload: dict) -> list[str]:
    records = sorted((r for r in payload["records"] if "trainer" in r), key=lambda r: (r["policy"], r["fold"]))
    rows = [
        [f"`{r['policy']}`", str(r["fold"]), f"{r.get('best_phase')}: {r.get('best_epoch')}", _f(r.get("val_return"))]
        for r in records
    ]
    if not rows:
        return []
    header = ["variant", "fold", "selected epoch (phase: epoch)", "validation return (of its own reward)"]
    return [fill(PAGE, "epochs_lead"), "", markdown_grid(header, rows)]


# ---------------------------------------------------------------------------- (e) commands
def commands_section(merged: dict | None, cost: dict | None) -> list[str]:
    out = [fill(PAGE, "reproduce"), ""]
    trainings = [t for t in (cost or {}).get("training", []) if t.get("command")]
    if trainings:
        out += [fill(PAGE, "trainings"), "", "```bash", *(t["command"] for t in trainings), "```", ""]
    else:
        out += [fill(PAGE, "training_example"), ""]
    merge = (merged or {}).get("command") or fill(PAGE, "merge_command", name=MERGED)
    curve = (cost or {}).get("command") or fill(PAGE, "cost_command", name=COST)
    out += [
        fill(PAGE, "then"),
        "",
        "```bash",
        merge,
        curve,
        CURVES_COMMAND,
        ".venv/bin/python scripts/make_docs.py",
        "```",
    ]
    return out


def further_runs(results_dir: Path) -> list[str]:
    """The estimators table of every further merged run ``policy_gradients_locomo_<name>.json`` (other
    variants trained on the same folds beside an imitation-only one), each with its merge command."""
    out = []
    for path in sorted(results_dir.glob(MERGED.replace(".json", "_*.json"))):
        extra = load_results(results_dir, path.name)
        variants = trained_variants(field(extra, path, "records"), str(path))
        table = estimators_section(extra, variants)[2:]
        out += [fill(PAGE, "also_run", name=path.name, folds=extra["folds"]), "", *table, ""]
        out += [fill(PAGE, "also_merged", name=path.name), ""]
    return out


def render(results_dir: Path) -> str:
    merged, cost = load_results(results_dir, MERGED), load_results(results_dir, COST)
    try:
        return page(results_dir, merged, cost)
    except (KeyError, TypeError, IndexError) as err:
        names = [n for n, payload in ((MERGED, merged), (COST, cost)) if payload is not None]
        raise ResultsFileError(
            f"{Path(results_dir)}/{' or '.join(names)}: a field is missing or malformed ({err!r})"
        ) from None


def page(results_dir: Path, merged: dict | None, cost: dict | None) -> str:
    out = [fill(PAGE, "intro"), ""]
    absent = _missing(MERGED, "scripts/results.py merge")
    if merged is None:
        out += [fill(PAGE, "labels"), "", *absent, "", fill(PAGE, "estimators"), "", *absent, ""]
    else:
        path = Path(results_dir) / MERGED
        variants = trained_variants(field(merged, path, "records"), str(path))
        for key in ("summary", "dataset", "folds", "budget"):
            field(merged, path, key)
        q = merged.get("questions", {})
        questions = ", ".join(f"{p} {n}" for p, n in q.items())
        budget = _budget(merged["budget"])
        out += [fill(PAGE, "run", dataset=merged["dataset"], folds=merged["folds"], budget=budget, questions=questions)]
        out += [""]
        out += labels_section(merged, variants) + [""] + estimators_section(merged, variants) + [""]
        out += further_runs(Path(results_dir))
    out += cost_section(cost) + [""]
    if merged is None:
        out += [fill(PAGE, "curves"), "", *absent, ""]
    else:
        out += curves_section(variants) + selected_epochs(merged) + [""]
    out += commands_section(merged, cost)
    return "\n".join(out) + "\n"
