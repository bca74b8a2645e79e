"""docs/policy_gradients.md: rewards without evidence labels, the policy-gradient estimators and the token cost.

Renders ``docs/results/policy_gradients_locomo.json`` (``scripts/results.py merge`` over the fold runs of
``scripts/train.py``) and ``docs/results/cost_aware_locomo.json`` (``scripts/cost_curve.py`` over the same
runs), and nothing else; a file not present is named on the page in place of its sections.
"""

from __future__ import annotations

from pathlib import Path

from graphmem.docgen.sources import ResultsFileError, field, load_results, p_value
from graphmem.eval.report import markdown_grid
from graphmem.eval.variants import GROUPS, trained_variants

MERGED = "policy_gradients_locomo.json"
COST = "cost_aware_locomo.json"
METRIC = "evidence_recall"
CURVES_COMMAND = (
    f".venv/bin/python scripts/results.py curves docs/results/{MERGED} --out-dir docs --prefix policy_gradients_"
)

INTRO = """# Policy gradients for the walk: rewards without labels, estimators, a token cost

The walk router (`rl/walk/trainer.py`) is trained by imitation of oracle walks (SL), by policy
gradients on the walk episode (RL), or SL then RL. The options compared here
(`trainer.objective`, [training](training.md)):

* `reward`: `evidence` (each loaded gold node gives `1/|G|`: the return is the evidence recall),
  `answer` (the share of the gold answer's tokens found in the loaded text: no evidence label is read)
  or `judge` (an LLM's verdict on the loaded records);
* `estimator`: `moving_average` (REINFORCE with a per-step moving-average baseline), `leave_one_out`
  (REINFORCE, the mean return of the question's other `group_size − 1` walks as baseline) or `ppo`
  (PPO-clip, `ppo_epochs` steps on each batch of walks);
* `token_cost` λ: `− λ · tokens(v)` per loaded node, with the learned stop, so the walk can stop before
  the budget is spent.

Every variant is trained per fold on the training conversations, its epoch selected on the validation
conversations (by the objective's own validation return), and tested once on the test conversations next
to the heuristic baselines under the same budget. Paired differences are per test question over all folds
(LoCoMo's adversarial category left out), with 95% percentile bootstrap intervals and paired t-test p;
fold spreads are the sample std (ddof = 1) over the folds.
"""


def _f(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _ci(lo: float, hi: float, digits: int = 3, sign: str = "+") -> str:
    return f"[{lo:{sign}.{digits}f}, {hi:{sign}.{digits}f}]"


def verdict(lo: float, hi: float, above: str, below: str) -> str:
    """What a 95% interval of a difference carries: ``above`` / ``below`` when it excludes 0, else no difference."""
    return (
        f"{above} (the CI excludes 0)"
        if lo > 0
        else f"{below} (the CI excludes 0)"
        if hi < 0
        else ("no difference resolved (the CI includes 0)")
    )


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
    return [f"*Not run yet: `docs/results/{name}` is not present (written by `{script}`, commands below).*"]


# ---------------------------------------------------------------------------- (a) rewards without labels
def labels_section(payload: dict, variants: dict[str, dict]) -> list[str]:
    out = ["## Rewards without evidence labels", ""]
    names = [v for v, info in variants.items() if info["reward"] != "evidence"]
    if not names:
        return out + ["No variant of this run trained from the answer or judge reward."]
    out += [
        "Variants trained from a reward that reads no evidence label (their epoch is selected on the same "
        "reward on the validation conversations, so no evidence label enters their training or selection), "
        "against the embedding baseline (`dense_topk`) and the strongest simple baseline (`hybrid`), on "
        "evidence recall (measured with the labels, on the test questions):",
        "",
    ]
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
                lines.append(f"* `{v}` vs `{ref}`: no paired comparison in the file.")
            else:
                what = verdict(c["ci_low"], c["ci_high"], "higher recall", "lower recall")
                lines.append(f"* `{v}` vs `{ref}` (Δ {c['mean_diff']:+.3f}, n = {c['n']}): {what}.")
    header = ["variant", "reward", "estimator", "phases", "vs", "recall", "reference", "Δ", "95% CI", "p", "n"]
    return out + [markdown_grid(header, rows), "", *lines]


# ---------------------------------------------------------------------------- (b) estimators
def estimators_section(payload: dict, variants: dict[str, dict]) -> list[str]:
    out = ["## Estimators", ""]
    summary = payload["summary"]
    evidence = {v: i for v, i in variants.items() if i["reward"] == "evidence" and not i["token_cost"] > 0}
    sl = [v for v, i in evidence.items() if i["phases"] == "SL"]
    sl_ref = next((v for v in sl if any(c["reference"] == v for c in payload.get("paired", []))), None)
    out += [
        "Evidence reward, no token cost. Fold mean ± std (number of folds) of the test metrics, and the paired "
        "difference in evidence recall against the imitation-only variant"
        + (f" `{sl_ref}`:" if sl_ref else " (none in this file: merge with `--also <SL variant>`):"),
        "",
    ]
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
            out.append(f"* `{v}` ({i['phases']}, {i['estimator']}) against `{sl_ref}`: {what}.")
    baselines = [p for p in summary if p not in variants]
    out += [
        "",
        "The heuristic baselines on the same test questions (fold mean ± std):",
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
    out = ["## A token cost with the learned stop", ""]
    if cost is None:
        return out + _missing(COST, "scripts/cost_curve.py")
    fixed, path = cost["fixed"]["variant"], Path(COST)
    folds, budget, sweep = field(cost, path, "folds"), field(cost, path, "budget"), field(cost, path, "sweep_budget")
    fp = cost["points"][fixed]
    out += [
        f"Each cost variant (λ = `token_cost`) against the fixed-budget walk `{fixed}` (λ = "
        f"{cost['fixed']['token_cost']:g}) on the same test questions of folds {folds}, at the run's budget "
        f"({_budget(budget)}). `{fixed}` "
        f"there: {fp['tokens']['mean']:.0f} tokens {_ci(*fp['tokens']['ci95'], 0, '')}, recall "
        f"{fp['recall']['mean']:.3f} {_ci(*fp['recall']['ci95'], 3, '')}, n = {fp['n']}. The saving is "
        "`1 − Σ tokens(λ) / Σ tokens(fixed)` over the paired questions (paired bootstrap CI). The last column "
        f"is the mean tokens `{fixed}` needs to reach the variant's recall on its node-sweep curve, by linear "
        "interpolation between sweep levels; the sweep runs at another budget "
        f"({sweep.get('max_tokens')} tokens, {sweep.get('max_hops')} hops, nodes varied), so that column "
        "compares across the two budgets.",
        "",
    ]
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
        lines.append(f"* λ = {v['token_cost']:g} against `{fixed}`: tokens: {saves}; recall: {loses}.")
    header = ["λ", "variant", "learned stop", "n", "tokens [95% CI]", "recall [95% CI]", "Δ recall vs fixed [CI]", "p"]
    out += [markdown_grid(header + ["token saving [CI]", "n pairs", f"`{fixed}` tokens to reach"], rows), ""]
    out += lines
    if cost.get("plot"):
        out += ["", f"![recall against loaded tokens]({Path(cost['plot']).name})"]
    out += ["", "The node-sweep curves (mean tokens, mean recall [95% CI]) per `max_nodes`:", ""]
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
    out = ["## Learning curves", ""]
    if not variants or not all(rows for i in variants.values() for rows in i["history"].values()):
        return out + ["The records hold no per-epoch history, so there are no learning curves for this run.", ""]
    out += [
        "Training return and validation return per epoch (a thin line per fold, the mean over folds in bold; "
        f"written by `{CURVES_COMMAND}`).",
        "",
    ]
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
    return ["The epoch each fold selected on its validation conversations:", "", markdown_grid(header, rows)]


# ---------------------------------------------------------------------------- (e) commands
def commands_section(merged: dict | None, cost: dict | None) -> list[str]:
    out = ["## Reproduce", ""]
    trainings = [t for t in (cost or {}).get("training", []) if t.get("command")]
    if trainings:
        out += [
            "Training, one run per fold (each run's `run.json` config written as overrides of the default "
            "`configs/train.yaml`):",
            "",
            "```bash",
            *(t["command"] for t in trainings),
            "```",
            "",
        ]
    else:
        out += [
            "Training, one `scripts/train.py` run per fold `k` with every variant and a node sweep, e.g.:",
            "",
            "```bash",
            ".venv/bin/python scripts/train.py graphset=<locomo set> 'cv.folds=[k]' \\",
            "    'node_sweep.levels=[2,4,8,12,16]' \\",
            "    '+variants.sl={objective: {rl_epochs: 0}}' \\",
            "    '+variants.cost_0p001={objective: {token_cost: 0.001}}' out_dir=<runs>/locomo_fold<k>",
            "```",
            "",
        ]
    merge = (merged or {}).get("command") or (
        f".venv/bin/python scripts/results.py merge <runs>/locomo_fold{{0,1,2,3,4}} --also sl dense_topk "
        f"--out docs/results/{MERGED}"
    )
    curve = (cost or {}).get("command") or (
        f".venv/bin/python scripts/cost_curve.py <runs>/locomo_fold{{0,1,2,3,4}} --out docs/results/{COST} "
        "--plot docs/cost_aware_locomo.png"
    )
    out += ["Then:", "", "```bash", merge, curve, CURVES_COMMAND, ".venv/bin/python scripts/make_docs.py", "```"]
    return out


def further_runs(results_dir: Path) -> list[str]:
    """The estimators table of every further merged run ``policy_gradients_locomo_<name>.json`` (other
    variants trained on the same folds beside an imitation-only one), each with its merge command."""
    out = []
    for path in sorted(results_dir.glob(MERGED.replace(".json", "_*.json"))):
        extra = load_results(results_dir, path.name)
        variants = trained_variants(field(extra, path, "records"), str(path))
        table = estimators_section(extra, variants)[2:]
        out += [f"### Also run: `{path.name}` (folds {extra['folds']})", "", *table, ""]
        out += [
            f"Merged by `scripts/results.py merge <fold runs> --also sl --out docs/results/{path.name}`.",
            "",
        ]
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
    out = [INTRO]
    absent = _missing(MERGED, "scripts/results.py merge")
    if merged is None:
        out += ["## Rewards without evidence labels", "", *absent, "", "## Estimators", "", *absent, ""]
    else:
        path = Path(results_dir) / MERGED
        variants = trained_variants(field(merged, path, "records"), str(path))
        for key in ("summary", "dataset", "folds", "budget"):
            field(merged, path, key)
        q = merged.get("questions", {})
        out += [
            f"Dataset `{merged['dataset']}`, folds {merged['folds']}, budget {_budget(merged['budget'])}; "
            f"test questions per policy (all categories): {', '.join(f'{p} {n}' for p, n in q.items())}.",
            "",
        ]
        out += labels_section(merged, variants) + [""] + estimators_section(merged, variants) + [""]
        out += further_runs(Path(results_dir))
    out += cost_section(cost) + [""]
    if merged is None:
        out += ["## Learning curves", "", *absent, ""]
    else:
        out += curves_section(variants) + selected_epochs(merged) + [""]
    out += commands_section(merged, cost)
    return "\n".join(out) + "\n"
