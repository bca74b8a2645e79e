"""docs/learning_curve.md: the learned walk and the GNN reader against the number of training questions, rendered
from ``docs/results/learning_curve.json`` (``scripts/studies/learning_curve/run.py``); whatever curves it holds."""

from __future__ import annotations

from pathlib import Path

from docgen.sources import field, p_value, results_at

from graphmem.eval.report import markdown_grid

RESULTS = "learning_curve.json"
PAGE = "learning_curve"
NAMES = {"passage_recall_2": "R@2", "passage_recall_5": "R@5", "evidence_recall": "recall at the budget"}
INTRO = """# Learning curves: how much do more training questions help?

Each curve trains one learned policy on a share of its training questions (1/8, 1/4, 1/2 and all; each
fold's training part and the training-only sets alike, drawn by `train_fraction` and `train_seed`, so that a
smaller share's questions are among a larger one's) with several seeds, selects each run's checkpoint on its
validation graphs as the training script does, and measures it here on those validation graphs and on the dev
pools. Per share: the mean over questions of each run, then the mean ± std over seeds. The slope is the
least-squares gain per doubling of the training questions (fitted to the seed-averaged means against
log2 of the questions; 95% interval from resampling the questions). The last doubling pairs, question by
question, the seed-averaged values of all the questions against half of them: its CI above 0 says the curve
still rises at the end (more data of this kind is worth looking for), a CI holding 0 that it is flat there."""


def _metric(key: str) -> str:
    target, metric = key.rsplit(" ", 1)
    return f"{NAMES.get(metric, metric)} ({'validation' if target == 'val' else target})"


def _share_table(stats: dict[str, dict]) -> str:
    """One row per share: training questions, then each target and metric's mean ± std over seeds."""
    first = next(iter(stats.values()))["shares"]
    rows = []
    for i, share in enumerate(first):
        cells = [f"{share['fraction']:g}", f"{share['train_questions']:,.0f}"]
        for s in stats.values():
            x = s["shares"][i]
            cells.append(f"{x['mean']:.3f}" + ("" if x["std"] is None else f" ± {x['std']:.3f}"))
        rows.append(cells)
    return markdown_grid(["share", "training questions", *(_metric(k) for k in stats)], rows)


def _fit_table(stats: dict[str, dict]) -> str:
    rows = []
    for key, s in stats.items():
        lo, hi = s["slope_ci95"]
        last = s["last_doubling"]
        cells = [_metric(key), f"{s['slope_per_doubling']:+.3f} [{lo:+.3f}, {hi:+.3f}]"]
        if last is None:
            cells += ["—", "—", "—", "—"]
        else:
            ci = f"{last['mean_diff']:+.3f} [{last['ci_low']:+.3f}, {last['ci_high']:+.3f}]"
            cells += [ci, p_value(last["p_value"]), f"{last['n']:,}", s["at_the_end"]]
        rows.append(cells)
    header = ["measure", "slope per doubling [95% CI]", "all − half [95% CI]", "p", "n", "at the end"]
    return markdown_grid(header, rows)


def render(results_dir: Path) -> str:
    path, res = results_at(results_dir, RESULTS)
    if res is None:
        return INTRO + "\n\nNo results yet: run `python scripts/studies/learning_curve/run.py`.\n"
    curves = field(res, path, "curves")
    out = [INTRO, "", "## The run", "", "```bash", field(res, path, "command"), "```", ""]
    trained = [p.get("train_wall_s") for c in curves.values() for p in c["points"]]
    train_min = f"{sum(t for t in trained if t is not None) / 60:.0f} min of training runs"
    seeds = {name: ", ".join(map(str, c.get("seeds", field(res, path, "seeds")))) for name, c in curves.items()}
    out += [
        f"Seeds: {'; '.join(f'`{n}` {s}' for n, s in seeds.items())}. "
        f"{field(res, path, 'n_boot'):,} resamples per CI; {train_min} (each run's own `wall_s`), "
        f"{field(res, path, 'wall_s') / 60:.0f} min for this study's command (runs already in their folders are read "
        "again, not retrained).",
        "",
    ]
    if res.get("not_run"):
        out += [f"Not run: {', '.join(f'`{n}`' for n in res['not_run'])}.", ""]
    out += ["![learning curves](learning_curve.png)", ""]
    verdicts = []
    for name, curve in curves.items():
        spec, stats = field(curve, path, "definition"), field(curve, path, "stats")
        command = f"scripts/{spec['script']} {' '.join(spec.get('overrides', []))}"
        out += [f"## {name}", "", f"`{command}` per point, seeds {seeds[name]}.", ""]
        out += [_share_table(stats), "", _fit_table(stats), ""]
        verdicts += [f"`{name}` {_metric(k)}: {s['at_the_end']}" for k, s in stats.items() if s["at_the_end"]]
    out += ["## At the end of each curve", "", *(f"- {v}" for v in verdicts)]
    return "\n".join(out).rstrip() + "\n"
