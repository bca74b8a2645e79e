"""Evaluate traversal policies on a graph set: tables, results JSON, per-question JSONL, budget curves.

    python scripts/evaluate.py data=locomo policy=ppr
    python scripts/evaluate.py data=hotpotqa 'policies=[beta_bfs,dense_topk,ppr,uniform_bfs]'
    python scripts/evaluate.py -m policy=beta_bfs,ppr          # one Hydra job per policy

Writes into the run directory (``out_dir``, default Hydra's): ``results.json``, ``results.md``,
``questions_<policy>.jsonl`` and ``budget_sweep.png``; tracks the tables and files through
:mod:`graphmem.tracking` (W&B offline by default). The whole config is checked before any
graph is loaded or built.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from graphmem.eval.harness import EvalResult, budget_sweep, evaluate_policy, scaled_budgets, write_jsonl
from graphmem.eval.report import full_report, plot_budget_curves, results_payload, table_data, write_json
from graphmem.graphset import DataConfig, GraphConfig, GraphSet, open_graphset
from graphmem.policies.base import POLICIES, Budget, TraversalPolicy, make_policy
from graphmem.tracking import make_tracker

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


class ConfigError(ValueError):
    """The run config is invalid; raised before any work is done."""


@dataclass
class Plan:
    """Everything the run needs, validated."""

    data: DataConfig
    graph: GraphConfig
    budget: Budget
    sweep: list[Budget]
    policies: dict[str, TraversalPolicy]
    out_dir: Path


def _register_all_policies() -> None:
    import graphmem.policies

    for mod in pkgutil.iter_modules(graphmem.policies.__path__):
        importlib.import_module(f"graphmem.policies.{mod.name}")


def _policy_config(name: str, selected: DictConfig | None) -> dict[str, Any]:
    """Kwargs of policy ``name``: the selected ``policy`` group when it is that policy, else ``configs/policy/<name>.yaml``."""
    if selected is not None and selected.get("name") == name:
        raw = OmegaConf.to_container(selected, resolve=True)
    elif (CONFIG_DIR / "policy" / f"{name}.yaml").is_file():
        raw = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "policy" / f"{name}.yaml"), resolve=True)
    else:
        raw = {"name": name}
    return {k: v for k, v in raw.items() if k != "name"}


def plan_run(cfg: DictConfig) -> Plan:
    """Check the config and build policies and budgets; raises :class:`ConfigError` with a clear message."""
    try:
        data = DataConfig.from_mapping(OmegaConf.to_container(cfg.data, resolve=True))
        graph = GraphConfig.from_mapping(OmegaConf.to_container(cfg.graph, resolve=True))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid data/graph config: {err}") from None
    try:
        budget = Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
        sweep = scaled_budgets(budget, list(cfg.sweep_tokens or []))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"invalid budget: {err}") from None
    _register_all_policies()
    names = list(cfg.policies) if cfg.get("policies") else [cfg.policy.name]
    unknown = [n for n in names if n not in POLICIES]
    if unknown:
        raise ConfigError(f"unknown policy {unknown[0]!r}; registered policies: {sorted(POLICIES)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"policies listed twice: {names}")
    policies = {}
    for n in names:
        try:
            policies[n] = make_policy(n, **_policy_config(n, cfg.get("policy")))
        except Exception as err:  # noqa: BLE001 - any constructor failure is a config problem here
            raise ConfigError(f"policy {n!r} cannot be constructed from its config: {err}") from None
    out_dir = cfg.get("out_dir")
    if not out_dir:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            raise ConfigError("out_dir is not set and no Hydra run directory exists")
        out_dir = HydraConfig.get().runtime.output_dir
    return Plan(data, graph, budget, sweep, policies, Path(out_dir))


def load_graphs(cfg: DictConfig, plan: Plan) -> GraphSet:
    """A saved set from ``cfg.graphset`` when given, else ``load_or_build`` under ``cfg.graphset_dir``."""
    saved = hydra.utils.to_absolute_path(cfg.graphset) if cfg.get("graphset") else None
    return open_graphset(saved, asdict(plan.data), asdict(plan.graph),
                         hydra.utils.to_absolute_path(cfg.graphset_dir), progress=cfg.progress)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Run the evaluation described by ``cfg`` and return the ``results.json`` payload."""
    plan = plan_run(cfg)
    torch.manual_seed(int(cfg.seed))
    out = plan.out_dir
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    gs = load_graphs(cfg, plan)
    print("\n".join(gs.report.lines()))
    print(f"{len(gs.graphs)} graphs, {len(gs.questions)} questions ({time.perf_counter() - t0:.1f}s to load)")

    results: list[EvalResult] = []
    sweeps: dict[str, list[EvalResult]] = {}
    for name, policy in plan.policies.items():
        main_result = evaluate_policy(policy, gs, plan.budget, progress=cfg.progress)
        results.append(main_result)
        # a sweep level equal to the run's budget reuses its result instead of retrieving again
        sweeps[name] = [main_result if b == plan.budget else budget_sweep(policy, gs, [b], progress=cfg.progress)[0]
                        for b in plan.sweep]
        write_jsonl(results[-1].rows, out / f"questions_{name}.jsonl")

    report = full_report(results)
    print(report)
    (out / "results.md").write_text(report, encoding="utf-8")
    meta = {"dataset": gs.dataset, "graphs": len(gs.graphs), "questions": len(gs.questions),
            "config_hash": gs.config_hash, "data": asdict(plan.data), "graph": asdict(plan.graph),
            "load_report": gs.report.lines(), "seed": int(cfg.seed)}
    payload = results_payload(results, sweeps, meta)
    write_json(payload, out / "results.json")
    if plan.sweep:
        plot_budget_curves(sweeps, out / "budget_sweep.png", title=f"{gs.dataset}: evidence recall vs token budget")
    _track(cfg, plan, results, sweeps, out)
    print(f"results written to {out}")
    return payload


def _track(cfg: DictConfig, plan: Plan, results: list[EvalResult], sweeps: dict[str, list[EvalResult]], out: Path) -> None:
    name = f"evaluate-{plan.data.name}-{'+'.join(plan.policies)}"
    with make_tracker(cfg.logger, run_config=cfg, out_dir=out, name=name) as tracker:
        columns, rows = [], []
        for r in results:
            columns, policy_rows = table_data(r)
            rows += policy_rows
            tracker.log({f"{r.policy}/{group}/{k}": v for group, s in r.summary.items()
                         for k, v in s.items() if isinstance(v, (int, float))})
            tracker.log_table(f"questions/{r.policy}", *_question_table(r))
        tracker.log_table("summary", columns, rows)
        sweep_rows = [[policy, p.budget.max_tokens, p.budget.max_nodes, p.overall["evidence_recall"],
                       p.overall["all_evidence_hit"], p.overall["loaded_tokens"]]
                      for policy, points in sweeps.items() for p in points]
        tracker.log_table("budget_sweep", ["policy", "max_tokens", "max_nodes", "evidence_recall", "all_evidence_hit",
                                           "loaded_tokens"], sweep_rows)
        for path, kind in [(out / "results.json", "results"), (out / "budget_sweep.png", "plot")] + \
                [(out / f"questions_{p}.jsonl", "predictions") for p in plan.policies]:
            if path.exists():
                tracker.log_artifact(path, kind)


def _question_table(result: EvalResult) -> tuple[list[str], list[list[Any]]]:
    keys = ("evidence_recall", "all_evidence_hit", "precision", "first_gold_rank", "loaded_tokens", "hops", "latency_s")
    columns = ["qid", "graph", "category", *keys, "loaded", "gold_evidence"]
    rows = [[r["qid"], r["graph"], r["category_name"], *(r["metrics"][k] for k in keys),
             " ".join(r["loaded"]), " ".join(r["gold_evidence"])] for r in result.rows]
    return columns, rows


@hydra.main(version_base="1.3", config_path="../configs", config_name="evaluate")
def main(cfg: DictConfig) -> None:
    try:
        evaluate(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
