"""Learning curves: the learned walk and the GNN reader trained on a share of their training questions.

    python scripts/studies/learning_curve/run.py                                # every curve, 4 shares x 3 seeds
    python scripts/studies/learning_curve/run.py 'curves=[walk_conversations]' 'seeds=[0]'

For each curve of ``curves`` (``curve_defs``: a script under ``scripts/``, its overrides and its checkpoint's kind),
each share ``f`` of ``fractions`` and each seed ``s`` of ``seeds`` (or of the curve's own ``seeds``), one training run
``scripts/<script> <overrides> train_fraction=f train_seed=s <model seed>=s out_dir=<out_dir>/<curve>/f<f>_s<s>``
(:func:`rl.common.splits.subsample`: for one seed a smaller share's questions are among a larger one's;
validation and test questions are never cut); a run whose folder holds its ``results.json`` is read again when
``reuse``. Its checkpoint (selected on its validation graphs by the training script) is then evaluated here
(:func:`graphmem.eval.harness.evaluate_policy`, under ``budget``) on the parts ``parts`` of its own split
(``val``: the graphs that selected it; ``test``: held out) and on each saved set of ``sets`` (the dev pools)
whole: per question, each metric of ``metrics``.

Per curve, target (a part or a set) and metric: the mean over questions of each run; per share, the mean and
the std (ddof = 1) over seeds and the mean number of training questions; the least-squares slope of the
seed-averaged means against ``log2`` of the training questions (the gain per doubling) with a 95% interval
from resampling the questions (``n_boot``); and the last doubling, all against half, paired per question on the
seed-averaged values (:func:`graphmem.eval.stats.paired_comparison`: mean, bootstrap CI, p, n), which says
whether the curve still rises at the end (its CI above 0), is flat (its CI holds 0) or falls. Writes
``results`` (one JSON, atomically, with the command) and ``plot``; ``page.py`` renders ``docs/learning_curve.md``.
"""

from __future__ import annotations

import logging
import math
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import hydra
import numpy as np
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import policy_config, restrict_graphs, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.errors import InputError
from graphmem.eval.harness import evaluate_policy
from graphmem.eval.metrics import in_overall
from graphmem.eval.runs import results_file
from graphmem.eval.stats import paired_comparison
from graphmem.policies import make_policy
from graphmem.store.graphset import GraphSet, union
from graphmem.store.io import write_json

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[3]
KINDS = {"walk": ("trainer.run.seed", "fold0/router/best.pt"), "gnn": ("train.seed", "gnn.pt")}
"""checkpoint kind -> the override that seeds its model, and its checkpoint's path in the run folder"""
Runner = Callable[[list[str]], None]


def run_subprocess(cmd: list[str]) -> None:
    """Run ``cmd`` from the repository root; a failed run stops the study naming the command."""
    done = subprocess.run(cmd, cwd=ROOT)
    if done.returncode != 0:
        raise InputError(f"{shlex.join(cmd)} exited with status {done.returncode}")


def train_command(spec: dict, fraction: float, seed: int, folder: Path, extra: list[str]) -> list[str]:
    """The training command of one point of a curve (module docstring)."""
    seed_key, checkpoint = KINDS[spec["kind"]]
    args = [*spec.get("overrides", []), f"train_fraction={fraction}", f"train_seed={seed}", f"{seed_key}={seed}"]
    args += [f"out_dir={folder}", "logger=none", "progress=false", *extra]
    args += [f"checkpoint={folder / checkpoint}"] if spec["kind"] == "gnn" else []
    return [sys.executable, str(ROOT / "scripts" / spec["script"]), *args]


def run_sets(results: dict) -> GraphSet:
    """The graphs a training run split (its main set and its ``cv_sets``), loaded from the folders it recorded."""
    prov = results.get("graphset") or {}
    if not prov.get("path"):
        raise InputError("a training run's results.json records no graph set folder (graphset.path)")
    gs = GraphSet.load(prov["path"])
    for record in prov.get("cv_sets") or []:
        gs = union(gs, GraphSet.load(record["folder"]))
    return gs


def run_split(results: dict, kind: str) -> dict[str, list[str]]:
    """The run's graph names per part (``train`` / ``val`` / ``test``)."""
    return results["split"] if kind == "gnn" else results["splits"][0]


def trained_questions(results: dict, kind: str) -> int:
    """The number of questions the run trained on."""
    if kind == "gnn":
        return int(results["train_questions"])
    fold = results["folds"][0]
    return int(next(r["train_questions"] for r in results["records"] if (r["fold"], r["policy"]) == (fold, "router")))


def measure(policy, gs: GraphSet, budget: Budget, metrics: list[str]) -> dict[str, dict[str, float]]:
    """Metric -> question id -> value of ``policy`` on ``gs`` (``overall`` questions where the metric is defined)."""
    rows = [r for r in evaluate_policy(policy, gs, budget, progress=False).rows if in_overall(r["category"])]
    return {m: {r["qid"]: r["metrics"][m] for r in rows if r["metrics"].get(m) is not None} for m in metrics}


def train_point(spec: dict, fraction: float, seed: int, folder: Path, cfg: DictConfig, runner: Runner) -> dict:
    """Train one point (or read it again), then measure its checkpoint on its parts and the dev sets."""
    if not (cfg.reuse and (folder / "results.json").is_file()):
        runner(train_command(spec, fraction, seed, folder, list(cfg.extra)))
    results = results_file(folder, spec["script"])
    kind = spec["kind"]
    policy = make_policy(
        {**policy_config("gnn" if kind == "gnn" else "router"), "checkpoint": str(folder / KINDS[kind][1])}
    )
    budget = typed(cfg.budget, Budget)
    targets = {}
    if spec.get("parts"):
        gs, split = run_sets(results), run_split(results, kind)
        for part in spec["parts"]:
            targets[part] = measure(policy, restrict_graphs(gs, split[part]), budget, list(spec["metrics"]))
    for name in spec.get("sets") or []:
        path = Path(hydra.utils.to_absolute_path(cfg.graphs)) / name
        targets[name] = measure(policy, GraphSet.load(path), budget, list(spec["metrics"]))
    return {
        "fraction": fraction,
        "seed": seed,
        "folder": str(folder),
        "train_questions": trained_questions(results, kind),
        "train_wall_s": results.get("wall_s"),
        "values": targets,
    }


def slope_per_doubling(n: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``y`` against ``log2(n)``."""
    x = np.log2(n)
    return float(np.polyfit(x, y, 1)[0]) if len(set(x.tolist())) > 1 else math.nan


def analyse(points: list[dict], fractions: list[float], target: str, metric: str, n_boot: int) -> dict[str, Any]:
    """One curve's statistics for one target and metric (module docstring)."""
    per = {f: [p for p in points if p["fraction"] == f] for f in fractions}
    qids = sorted(set.intersection(*(set(p["values"][target][metric]) for p in points)))
    # questions x shares: each question's value averaged over the seeds of a share
    grid = np.array([[np.mean([p["values"][target][metric][q] for p in per[f]]) for f in fractions] for q in qids])
    runs = {f: [float(np.mean(list(p["values"][target][metric].values()))) for p in per[f]] for f in fractions}
    n = np.array([np.mean([p["train_questions"] for p in per[f]]) for f in fractions])
    slope = slope_per_doubling(n, grid.mean(axis=0))
    rng = np.random.default_rng(0)
    boot = [slope_per_doubling(n, grid[rng.integers(0, len(qids), len(qids))].mean(axis=0)) for _ in range(n_boot)]
    last = (
        paired_comparison("all", dict(zip(qids, grid[:, -1])), "half", dict(zip(qids, grid[:, -2])), metric, n_boot)
        if len(fractions) > 1
        else None
    )
    verdict = None if last is None else "rising" if last.ci_low > 0 else "falling" if last.ci_high < 0 else "flat"
    return {
        "shares": [
            {
                "fraction": f,
                "train_questions": float(n[i]),
                "mean": float(np.mean(runs[f])),
                "std": float(np.std(runs[f], ddof=1)) if len(runs[f]) > 1 else None,
                "runs": runs[f],
            }
            for i, f in enumerate(fractions)
        ],
        "questions": len(qids),
        "slope_per_doubling": slope,
        "slope_ci95": [float(np.nanpercentile(boot, 2.5)), float(np.nanpercentile(boot, 97.5))],
        "last_doubling": None if last is None else last.to_json(),
        "at_the_end": verdict,
    }


def plot(curves: dict[str, dict], path: Path) -> Path:
    """One panel per curve: each target's metric against the training questions (log2 axis), ± std over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.2 * len(curves), 4), squeeze=False)
    for ax, (name, curve) in zip(axes[0], curves.items()):
        for key, stats in curve["stats"].items():
            xs = [s["train_questions"] for s in stats["shares"]]
            ys = [s["mean"] for s in stats["shares"]]
            err = [s["std"] or 0.0 for s in stats["shares"]]
            ax.errorbar(
                xs, ys, yerr=err, marker="o", capsize=3, label=f"{key} ({stats['slope_per_doubling']:+.3f}/doubling)"
            )
        ax.set_xscale("log", base=2)
        ax.set(title=name, xlabel="training questions", ylabel="mean over questions")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run(cfg: DictConfig, runner: Runner = run_subprocess) -> dict:
    """Every curve's points and statistics; writes ``results`` and ``plot`` (module docstring)."""
    set_threads(cfg)
    started, out = time.perf_counter(), Path(hydra.utils.to_absolute_path(cfg.out_dir))
    fractions, seeds = [float(f) for f in cfg.fractions], [int(s) for s in cfg.seeds]
    check(cfg, fractions, seeds)
    curves = {}
    for name in cfg.curves:
        spec = OmegaConf.to_container(cfg.curve_defs[name], resolve=True)
        own = [int(s) for s in spec.get("seeds") or seeds]
        points = [train_point(spec, f, s, out / name / f"f{f:g}_s{s}", cfg, runner) for f in fractions for s in own]
        stats = {
            f"{target} {metric}": analyse(points, fractions, target, metric, int(cfg.n_boot))
            for target in points[0]["values"]
            for metric in spec["metrics"]
        }
        curves[name] = {"definition": spec, "seeds": own, "stats": stats, "points": points}
        log.info("%s: %s", name, {k: (v["slope_per_doubling"], v["at_the_end"]) for k, v in stats.items()})
    payload = {
        "command": command_line(),
        "fractions": fractions,
        "seeds": seeds,
        "budget": plain(cfg.budget),
        "n_boot": int(cfg.n_boot),
        "curves": curves,
        "not_run": [name for name in cfg.curve_defs if name not in cfg.curves],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    payload["plot"] = str(plot(curves, Path(hydra.utils.to_absolute_path(cfg.plot))))
    write_json(Path(hydra.utils.to_absolute_path(cfg.results)), payload, indent=1)
    return payload


def check(cfg: DictConfig, fractions: list[float], seeds: list[int]) -> None:
    """The shares, seeds and curves checked before any training (one line naming the key)."""
    if not fractions or any(not 0 < f <= 1 for f in fractions) or fractions != sorted(set(fractions)):
        raise InputError(f"fractions must be increasing shares in (0, 1], got {fractions}")
    if not seeds or len(set(seeds)) != len(seeds):
        raise InputError(f"seeds must be distinct integers, got {seeds}")
    for name in cfg.curves:
        if name not in cfg.curve_defs:
            raise InputError(f"curves: {name!r} is not one of curve_defs {sorted(cfg.curve_defs)}")
        spec = cfg.curve_defs[name]
        own = list(spec.get("seeds") or [])
        if len(set(own)) != len(own):
            raise InputError(f"curve_defs.{name}.seeds must be distinct integers, got {own}")
        if spec.get("kind") not in KINDS or not spec.get("metrics") or not (spec.get("parts") or spec.get("sets")):
            raise InputError(f"curve_defs.{name}: needs kind ({sorted(KINDS)}), metrics and parts or sets")


def command_line() -> str:
    """How this study was run, from the repository root."""
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    return shlex.join(["python", "scripts/studies/learning_curve/run.py", *overrides])


if __name__ == "__main__":
    main("learning_curve", run, errors=(InputError,))
