"""The recall–tokens trade-off of a token cost with the learned stop, from ``scripts/train.py`` runs of disjoint folds.

Each folder holds a finished run with a node sweep (``results.json``, ``questions_<policy>.jsonl``,
``node_sweep_<policy>.jsonl``). Over all folds' test questions (the ``overall`` group, recall defined):

* every heuristic policy's and the fixed-budget walk's (``--fixed``) node-sweep curve: per ``max_nodes``
  level, mean loaded tokens and mean evidence recall, each with its 95 % bootstrap interval;
* every cost variant's (trained variants matching ``--cost``; λ = its ``trainer.objective.token_cost``)
  point at the run's budget, and its paired comparison with the fixed-budget walk at that budget on the
  same questions: Δ recall (CI, paired t-test p), the relative token saving ``1 − Σt^λ / Σt^fixed`` (paired
  bootstrap CI) and n;
* the mean tokens the fixed-budget walk needs on its node-sweep curve to reach each cost variant's
  recall, by linear interpolation between sweep levels (the sweep's budget is the node sweep's, not
  the run's: see ``sweep_budget`` in the output).

Formulas: ``tradeoff.py`` beside this script. Writes the results JSON (atomic) and a PNG of recall against
mean loaded tokens.

    .venv/bin/python scripts/studies/cost_curve/run.py /work/runs/locomo_fold{0,1,2,3,4} \\
        --out docs/results/cost_aware_locomo.json --plot docs/cost_aware_locomo.png
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
from pathlib import Path
from typing import Any

from tradeoff import curve, paired_token_ratio, point, question_values, tokens_to_reach

from graphmem.config.cli import set_threads
from graphmem.config.entry import command
from graphmem.config.schemas import CONFIG_DIR, compose
from graphmem.core.errors import InputError
from graphmem.eval.plots import plot_recall_tokens
from graphmem.eval.runs import fold_rows, read_fold_runs, run_overrides, shell_word
from graphmem.eval.stats import paired_comparison
from graphmem.store.io import write_json


def variant_settings(records: list[dict], name: str) -> dict[str, Any]:
    """λ (``token_cost``), ``node_cost`` and the learned stop of a trained variant, the same in every fold."""
    seen = {}
    for r in records:
        try:
            o, m = r["trainer"]["objective"], r["trainer"]["model"]
            seen[r["fold"]] = {
                "token_cost": o["token_cost"],
                "node_cost": o["node_cost"],
                "stop": m.get("stop"),
                "reward": o["reward"],
                "estimator": o["estimator"],
            }
        except KeyError as err:
            raise InputError(f"fold {r['fold']} variant {name!r}: its record's trainer config lacks {err}") from None
    if len({json.dumps(v, sort_keys=True) for v in seen.values()}) > 1:
        raise InputError(f"variant {name!r}: its trainer settings differ between folds: {seen}")
    return next(iter(seen.values()))


def sweep_levels(rows: list[dict]) -> dict[int, list[dict]]:
    """Node-sweep rows by their ``max_nodes``."""
    out: dict[int, list[dict]] = {}
    for r in rows:
        out.setdefault(int(r["max_nodes"]), []).append(r)
    return out


def training_commands(folders: list[Path], runs: list[dict]) -> list[dict]:
    """Each fold run's ``scripts/train.py`` command: the overrides that turn the repository's default train
    config (with the run's ``data``) into the config its ``run.json`` recorded; ``None`` without a run.json."""
    from omegaconf import OmegaConf

    out = []
    for f, run in zip(folders, runs):
        path, command = Path(f) / "run.json", None
        if path.is_file():
            config = json.loads(path.read_text(encoding="utf-8")).get("config") or {}
            data = (config.get("data") or {}).get("name")
            chosen = [f"data={data}"] if data and (CONFIG_DIR / "data" / f"{data}.yaml").is_file() else []
            default = OmegaConf.to_container(compose("train", chosen), resolve=True)
            words = chosen + run_overrides(config, default)
            command = " ".join([".venv/bin/python scripts/train.py", *map(shell_word, words)])
        out.append({"folder": str(f), "run_id": run.get("run_id"), "command": command})
    return out


def tradeoff(folders: list[Path], fixed: str, pattern: str, n_boot: int) -> dict[str, Any]:
    runs = read_fold_runs(folders)
    trained: dict[str, list[dict]] = {}
    heuristics: list[str] = []
    for f, run in zip(folders, runs):
        for r in run["records"]:
            if "trainer" in r:
                trained.setdefault(r["policy"], []).append(r)
            elif r["policy"] not in heuristics:
                heuristics.append(r["policy"])
    costs = sorted((v for v in trained if fnmatch.fnmatchcase(v, pattern) and v != fixed), key=str)
    if fixed not in trained:
        raise InputError(
            f"{folders[0]}: no trained variant {fixed!r} (the fixed-budget walk); trained: {sorted(trained)}"
        )
    if not costs:
        raise InputError(f"no trained variant matches {pattern!r}; trained: {sorted(trained)}")
    folds = sorted(k for run in runs for k in run["folds"])
    for name in [fixed, *costs]:
        have = sorted(r["fold"] for r in trained[name])
        if have != folds:
            raise InputError(f"variant {name!r} was trained on folds {have}, the runs hold folds {folds}")
    budgets = [run.get("node_sweep") and run["node_sweep"].get("budgets") for run in runs]
    for f, b in zip(folders, budgets):
        if not b:
            raise InputError(f"{f}/results.json: no node sweep (the run had node_sweep.levels=[])")
        if b != budgets[0]:
            raise InputError(f"{f}: node-sweep budgets differ from {folders[0]}'s")
    curves = {p: curve(sweep_levels(fold_rows(folders, "node_sweep", p)), p, n_boot) for p in [*heuristics, fixed]}
    values = {p: question_values(fold_rows(folders, "questions", p), p) for p in [*heuristics, fixed, *costs]}
    variants = []
    for name in sorted(costs, key=lambda v: (variant_settings(trained[v], v)["token_cost"], v)):
        got, ref = values[name], values[fixed]
        recall = paired_comparison(
            name,
            {q: r for q, (_, r) in got.items()},
            fixed,
            {q: r for q, (_, r) in ref.items()},
            "evidence_recall",
            n_boot=n_boot,
        )
        if recall is None:
            raise InputError(f"{name!r} and {fixed!r} share fewer than two test questions")
        at = point(got, n_boot)
        variants.append(
            {
                "variant": name,
                **variant_settings(trained[name], name),
                "point": at,
                "vs_fixed": {
                    "recall": recall.to_json(),
                    "tokens": paired_token_ratio(
                        {q: t for q, (t, _) in got.items()}, {q: t for q, (t, _) in ref.items()}, n_boot
                    ),
                    "fixed_tokens_to_reach": tokens_to_reach(curves[fixed], at["recall"]["mean"]),
                },
            }
        )
    sweep_budget = {k: v for k, v in budgets[0][0].items() if k not in ("max_nodes", "max_entries")}
    return {
        "dataset": runs[0]["dataset"],
        "folds": folds,
        "runs": [run.get("run_id") for run in runs],
        "budget": runs[0]["budget"],
        "sweep_budget": sweep_budget,
        "fixed": {"variant": fixed, **variant_settings(trained[fixed], fixed)},
        "heuristics": heuristics,
        "curves": curves,
        "points": {p: point(v, n_boot) for p, v in values.items()},
        "cost_variants": variants,
        "training": training_commands(folders, runs),
        "n_boot": n_boot,
    }


def arguments() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", type=Path, nargs="+")
    p.add_argument("--fixed", default="router", help="the fixed-budget walk (a trained variant without token cost)")
    p.add_argument("--cost", default="cost_*", help="pattern (fnmatch) of the cost variants' names")
    p.add_argument("--n-boot", type=int, default=10_000)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--plot", type=Path, default=None, help="PNG of recall against mean loaded tokens")
    return p


def work(args: argparse.Namespace, argv: list[str]) -> int:
    set_threads(None)  # $OMP_NUM_THREADS, else one thread (graphmem.config.cli.set_threads)
    try:
        payload = tradeoff(args.folders, args.fixed, args.cost, args.n_boot)
    except (InputError, KeyError) as err:
        message = f"a record or row lacks the field {err}" if isinstance(err, KeyError) else str(err)
        print(f"error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    shown = " ".join([".venv/bin/python scripts/studies/cost_curve/run.py", *argv])
    payload = {"command": shown, **payload, "plot": None if args.plot is None else str(args.plot)}
    if args.plot is not None:  # the picture first: the results file is written last, when all went well
        title = f"{payload['dataset']}: recall against loaded tokens, folds {payload['folds']} (test questions)"
        plot_recall_tokens(payload, args.plot, title=title)
    write_json(args.out, payload)
    print(f"{args.out}: {len(payload['cost_variants'])} cost variant(s) against {args.fixed!r}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return command(arguments(), lambda args: work(args, argv), argv)


if __name__ == "__main__":
    sys.exit(main())
