"""Fabricated ``scripts/train.py`` fold runs (results.json, question and node-sweep rows) with chosen numbers."""

import json
from pathlib import Path

from omegaconf import OmegaConf

import rl.walk  # noqa: F401  (the trainer schema)
from graphmem.eval.provenance import config_sha256
from tests.script_loader import compose

BUDGET = {"max_entries": 6, "top_k_neighbors": 2, "max_hops": 2, "max_nodes": 12, "max_tokens": 2500}
SWEEP_BUDGETS = [{**BUDGET, "max_tokens": 1000000, "max_hops": 3, "max_nodes": n, "max_entries": 2} for n in (2, 4)]


def trainer(token_cost=0.0, reward="evidence", estimator="moving_average", imitation=10, rl=6):
    return {
        "model": {"stop": True},
        "objective": {
            "token_cost": token_cost,
            "node_cost": 0.0,
            "reward": reward,
            "estimator": estimator,
            "imitation_epochs": imitation,
            "rl_epochs": rl,
            "group_size": 1 if estimator == "moving_average" else 4,
        },
    }


def row(qid, fold, tokens, recall, category=1, **extra):
    metrics = {"loaded_tokens": tokens, "evidence_recall": recall, "all_evidence_hit": float(recall == 1.0)}
    return {"fold": fold, "qid": qid, "category": category, "metrics": metrics, **extra}


def write_fold(
    folder: Path,
    fold: int,
    policies: dict,
    sweeps: dict,
    trainers: dict,
    reference="hybrid",
    data_sha256: str = "d" * 64,
    extra_overrides: tuple = (),
) -> Path:
    """One finished run of ``fold``: ``policies`` policy -> [(tokens, recall), ...] per test question; ``sweeps``
    policy -> max_nodes -> [(tokens, recall), ...]; ``trainers`` trained variant -> its trainer config; its
    provenance names ``data_sha256`` and the config's hash (``extra_overrides`` on top of the fold's own)."""
    folder.mkdir(parents=True)
    records, counts = [], {}
    for policy, values in policies.items():
        rows = [row(f"c{fold}_q{i}", fold, t, r) for i, (t, r) in enumerate(values)]
        rows.append(row(f"c{fold}_adv", fold, 999, 0.0, category=5))  # the adversarial category: left out
        rows.append(row(f"c{fold}_nogold", fold, 999, None))  # no gold evidence: left out
        (folder / f"questions_{policy}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        counts[policy] = len(rows)
        mean = sum(r for _, r in values) / len(values)
        test = {"evidence_recall": mean, "loaded_tokens": sum(t for t, _ in values) / len(values)}
        test |= {"all_evidence_hit": mean, "precision": 0.1}
        record = {"fold": fold, "policy": policy, "test": test}
        if policy in trainers:
            history = [
                {"phase": "imitation", "epoch": e, "return": 0.5 + 0.01 * e, "loss": 1.0, "val_return": 0.4 + e / 50}
                for e in range(3)
            ]
            history += [
                {"phase": "reinforce", "epoch": e, "return": 0.6, "loss": -0.1, "val_return": 0.5} for e in range(2)
            ]
            record |= {"best_epoch": 1, "best_phase": "reinforce", "trainer": trainers[policy], "history": history}
        records.append(record)
    for policy, levels in sweeps.items():
        rows = [
            row(f"c{fold}_q{i}", fold, t, r, max_nodes=n)
            for n, values in levels.items()
            for i, (t, r) in enumerate(values)
        ]
        (folder / f"node_sweep_{policy}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    payload = {
        "run_id": f"run{fold}",
        "dataset": "locomo",
        "budget": BUDGET,
        "folds": [fold],
        "reference": reference,
        "records": records,
        "node_sweep": {"budgets": SWEEP_BUDGETS, "curves": {}, "paired": {}},
    }
    overrides = ["graphset=/sets/locomo", f"cv.folds=[{fold}]", "+variants.cost_0p001={objective: {token_cost: 0.001}}"]
    config = OmegaConf.to_container(compose("train", [*overrides, *extra_overrides, f"out_dir={folder}"]), resolve=True)
    (folder / "run.json").write_text(json.dumps({"run_id": f"run{fold}", "config": config}))
    payload["provenance"] = {
        "data_sha256": data_sha256,
        "graphset_hash": "g" * 16,
        "config_sha256": config_sha256(config),
        "question_rows": counts,
        "finished": True,
    }
    (folder / "results.json").write_text(json.dumps(payload))
    return folder


# Two folds of two questions each. router: tokens 100..400, recall .5 .5 1 1 (means 250, .75); the cost
# variant loads half the router's tokens on every question (ratio exactly .5), recall .5 .5 .5 1 (.625).
ROUTER = {0: [(100, 0.5), (200, 0.5)], 1: [(300, 1.0), (400, 1.0)]}
COST = {0: [(50, 0.5), (100, 0.5)], 1: [(150, 0.5), (200, 1.0)]}
DENSE = {0: [(120, 0.25), (120, 0.5)], 1: [(120, 0.5), (120, 0.75)]}
# router's sweep: 2 nodes -> tokens 100, recall .375; 4 nodes -> tokens 300, recall .875.
ROUTER_SWEEP = {0: {2: [(100, 0.25), (100, 0.25)], 4: [(300, 0.75), (300, 1.0)]}}
ROUTER_SWEEP[1] = {2: [(100, 0.5), (100, 0.5)], 4: [(300, 0.75), (300, 1.0)]}
DENSE_SWEEP = {k: {2: [(60, 0.25)] * 2, 4: [(120, 0.5)] * 2} for k in (0, 1)}


def two_folds(root: Path, extra_variants: dict | None = None) -> list[Path]:
    """The two fold runs above under ``root`` (``extra_variants``: trained variant -> (trainer, values per fold))."""
    extra_variants = extra_variants or {}
    folders = []
    for k in (0, 1):
        policies = {"router": ROUTER[k], "cost_0p001": COST[k], "dense_topk": DENSE[k], "hybrid": DENSE[k]}
        trainers = {"router": trainer(), "cost_0p001": trainer(token_cost=0.001)}
        for name, (cfg, values) in extra_variants.items():
            policies[name], trainers[name] = values[k], cfg
        sweeps = {"router": ROUTER_SWEEP[k], "dense_topk": DENSE_SWEEP[k], "hybrid": DENSE_SWEEP[k]}
        folders.append(write_fold(root / f"fold{k}", k, policies, sweeps, trainers))
    return folders
