"""The walk router's ablations on memory where the relation of an edge, not cosine, decides the evidence.

    python scripts/studies/relation_family/run.py                               # 3 families, 4 variants, 6 heuristics
    python scripts/studies/relation_family/run.py 'seeds=[0]' family.num_graphs=10 trainer.objective.rl_epochs=0

For each seed a family of conversations is generated (:func:`synthetic_relations.make_relation_family`:
event chains with temporal, causal, entity and semantic edges whose neighbours all have one cosine
distribution, questions asking for one relation out of an anchor, the intent in the query's
embedding and wording). Its graphs are split by conversation (:func:`rl.common.splits.conversation_folds`,
one fold); in the fold loop (:func:`rl.walk.folds.cross_validate`) each router variant (``variants``: trainer
overrides) is trained by :class:`rl.walk.trainer.WalkTrainer` on the training graphs, selected on the validation
graphs and tested once on the test graphs next to the heuristics, under one budget. Reported: evidence recall
per policy on each seed's test graphs, mean ± std over seeds (ddof = 1), recall per question kind,
and the paired per-question difference of the first variant (the reference) minus every other
policy over all seeds' test questions (95% bootstrap CI, paired t-test). Writes ``out`` (one JSON
file, atomically) with the command that produced it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shlex
import time
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from synthetic_relations import KINDS, make_relation_family

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import check_int, policy_config, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.datasets.types import LoadReport
from graphmem.eval.folds import FoldTests
from graphmem.eval.stats import PairedComparison, fold_summary, paired_comparison, per_question
from graphmem.policies import POLICIES, make_policy
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from models.walk_scorer import ScorerConfig, WalkScorer
from rl.common.splits import check_fraction, conversation_folds
from rl.walk.folds import Fold, FoldHooks, Trained, Variant, cross_validate, open_fold
from rl.walk.trainer import TrainConfig

log = logging.getLogger(__name__)
METRIC = "evidence_recall"
COSINE_WALK = "cosine_walk"


def check(cfg: DictConfig) -> tuple[Path, Budget, dict, dict[str, dict], list[str]]:
    """Every setting checked before any work: output file, budget, family, split, variants, heuristics."""
    out = Path(hydra.utils.to_absolute_path(cfg.out))
    if out.is_dir():
        raise ValueError(f"out={cfg.out} is a folder; it names the results JSON file")
    budget = typed(cfg.budget, Budget)
    family = plain(cfg.family)
    seeds = list(cfg.seeds or [])
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of non-negative integers, got {seeds}")
    check_int(cfg, "split.k", 3), check_int(cfg, "split.fold", 0), check_int(cfg, "n_boot", 1)
    if cfg.split.fold >= cfg.split.k:
        raise ValueError(f"split.fold must lie in [0, {cfg.split.k}), got {cfg.split.fold}")
    check_fraction("split.val_fraction", cfg.split.val_fraction)
    base = plain(cfg.trainer)
    variants = plain(cfg.variants) or {}
    if not variants:
        raise ValueError("variants must name at least one router variant (name -> trainer overrides)")
    names = set(variants) | set(cfg.heuristics) | ({COSINE_WALK} if cfg.cosine_walk else set())
    if len(names) != len(variants) + len(cfg.heuristics) + int(bool(cfg.cosine_walk)):
        raise ValueError("variants, heuristics and cosine_walk must have distinct names")
    for name, overrides in variants.items():
        if not isinstance(overrides, dict):
            raise ValueError(f"variants.{name} must be a mapping of trainer overrides ({{}} for none), got {overrides}")
        TrainConfig.merged(base, overrides)
    heuristics = list(cfg.heuristics)
    for name in heuristics:
        try:
            POLICIES.resolve(name)
        except ValueError:
            raise ValueError(f"unknown heuristic policy {name!r}; registered: {sorted(POLICIES)}") from None
    make_relation_family(**{**family, "num_graphs": 1})  # the family's settings fail here, before any work
    return out, budget, base, variants, heuristics


def command_line() -> str:
    """The command that reproduces this run (the script and its overrides)."""
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    return " ".join(["python scripts/studies/relation_family/run.py", *(shlex.quote(o) for o in overrides)])


def family_set(cfg: DictConfig, seed: int) -> tuple[GraphSet, torch.Tensor]:
    """The family of ``seed`` as a :class:`GraphSet` (what the harness and :func:`restrict_graphs` take) and its
    ``[kinds, D]`` intent directions."""
    fam = make_relation_family(**plain(cfg.family), seed=seed)
    report = LoadReport(
        source=f"make_relation_family(seed={seed})", records=len(fam.graphs), questions=len(fam.questions)
    )
    return GraphSet("relation_family", fam.graphs, fam.questions, fam.query_embeddings, report), fam.intents


def intent_readout(gs: GraphSet, intents: torch.Tensor) -> dict[str, float]:
    """How legible the intent is in the query embeddings of ``gs``: the share of questions whose nearest intent
    direction ``argmax_k q · u_k`` (the generator's own directions, which no policy sees) is their kind, and is
    their kind's relation (next / previous, effect / cause merged)."""
    kinds = list(KINDS)
    relations = sorted({r for r, _, _ in KINDS.values()})
    relation = torch.tensor([relations.index(KINDS[k][0]) for k in kinds])
    own = torch.tensor([kinds.index(q.category) for q in gs.questions])
    nearest = (gs.query_embeddings @ intents.T).argmax(1)
    return {
        "kind_accuracy": float((nearest == own).float().mean()),
        "relation_accuracy": float((relation[nearest] == relation[own]).float().mean()),
        "n": len(gs.questions),
    }


def neighbour_cosines(gs: GraphSet) -> dict[str, float]:
    """Mean and std of ``cos(q, x_v)`` for the gold neighbour and for the anchor's other neighbours
    (the anchor: the node of highest cosine), over the questions of ``gs``: the family's check that
    cosine does not tell them apart."""
    gold, other = [], []
    for q, query in zip(gs.questions, gs.queries()):
        g = gs.graphs[q.graph]
        cos = g.embeddings @ query.embedding
        anchor, target = int(cos.argmax()), g.index_of(q.evidence[0])
        for v in g.edge_index[1][g.edge_index[0] == anchor].tolist():
            (gold if v == target else other).append(float(cos[v]))
    return {
        "gold_mean": float(np.mean(gold)),
        "gold_std": float(np.std(gold, ddof=1)),
        "other_mean": float(np.mean(other)),
        "other_std": float(np.std(other, ddof=1)),
        "gold_n": len(gold),
        "other_n": len(other),
    }


def run(cfg: DictConfig) -> dict[str, Any]:
    set_threads(cfg)
    out, budget, base, variants, heuristics = check(cfg)
    started = time.perf_counter()
    tests = FoldTests((METRIC,), tag="seed")  # per seed: its test rows, tagged with the seed, and its metrics
    hooks = FamilyHooks(cfg)
    chosen = [Variant(name, overrides) for name, overrides in variants.items()]
    baselines = functools.partial(heuristic_policies, cfg, heuristics)
    folds = (family_fold(cfg, seed, hooks) for seed in cfg.seeds)
    cross_validate(folds, chosen, base, baselines, tests, budget, cfg.entry_selector, hooks)
    payload, paired = assemble(cfg, tests.test_rows, tests.per_fold, budget, variants)
    payload |= {"records": hooks.records, "splits": hooks.splits, "neighbour_cosine": hooks.cosines}
    payload |= {"intent_readout": hooks.readout, "wall_s": round(time.perf_counter() - started, 2)}
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, payload)
    for c in paired:
        log.info("%s - %s: %+.3f [%+.3f, %+.3f] n=%d", c.policy, c.reference, c.mean_diff, c.ci_low, c.ci_high, c.n)
    log.info("results written to %s", out)
    return payload


def family_fold(cfg: DictConfig, seed: int, hooks: FamilyHooks) -> Fold:
    """The one fold of ``seed``'s family (``split.fold`` of its conversations, split by ``seed``); its split sizes,
    neighbour cosines and intent readout go to ``hooks``."""
    gs, intents = family_set(cfg, seed)
    split = conversation_folds(list(gs.graphs), k=cfg.split.k, seed=seed, val_fraction=cfg.split.val_fraction)
    fold = open_fold(gs, seed, split[cfg.split.fold])
    sizes = {"train": len(fold.train_q), "val": len(fold.val_q), "test": len(fold.test_set.questions)}
    hooks.splits.append({"seed": seed, **{p: len(getattr(fold.split, p)) for p in ("train", "val", "test")}})
    hooks.splits[-1] |= {f"{p}_questions": n for p, n in sizes.items()}
    hooks.cosines.append({"seed": seed, **neighbour_cosines(fold.test_set)})
    hooks.readout.append({"seed": seed, **intent_readout(fold.test_set, intents)})
    return fold


def heuristic_policies(cfg: DictConfig, heuristics: list[str], fold: Fold) -> dict[str, Any]:
    """The fold's baselines: the untrained scorer (the walk by cosine alone) with ``cosine_walk``, the heuristics."""
    policies: dict[str, Any] = {}
    if cfg.cosine_walk:
        scorer = WalkScorer(ScorerConfig(dim=fold.gs.graphs[fold.split.test[0]].dim))
        policies[COSINE_WALK] = make_policy("router", scorer=scorer, device="cpu", entry_selector=cfg.entry_selector)
    for name in heuristics:
        policies[name] = make_policy(policy_config(name))
    return policies


@dataclasses.dataclass
class FamilyHooks(FoldHooks):
    """The study's part of the fold loop: each variant trained with the seed of its family, its record, and what each
    seed's fold reports besides the test rows (split sizes, neighbour cosines, intent readout)."""

    cfg: DictConfig
    records: list[dict] = dataclasses.field(default_factory=list)
    splits: list[dict] = dataclasses.field(default_factory=list)
    cosines: list[dict] = dataclasses.field(default_factory=list)
    readout: list[dict] = dataclasses.field(default_factory=list)

    def run_fields(self, fold: Fold, variant: Variant) -> dict[str, Any]:
        return {"seed": fold.k}  # a fold is a seed's family

    def trained(self, fold: Fold, trained: Trained) -> None:
        result, name = trained.result, trained.variant.name
        self.records.append(
            {
                "seed": fold.k,
                "variant": name,
                "best_phase": result.best_phase,
                "best_epoch": result.best_epoch,
                "val_recall": result.best_score,
                "train_wall_s": round(trained.seconds, 2),
                "model": dataclasses.asdict(trained.config.model),
            }
        )
        log.info(
            "seed %d %s: best %s epoch %d, val recall %.3f",
            *(fold.k, name, result.best_phase, result.best_epoch, result.best_score),
        )

    def closed(self, fold: Fold) -> None:
        log.info("seed %d test recall: %s", fold.k, {p: round(m[METRIC], 3) for p, m in fold.metrics.items()})


def assemble(
    cfg: DictConfig, rows: dict[str, list[dict]], per_seed: list, budget: Budget, variants: dict
) -> tuple[dict, list[PairedComparison]]:
    """The results (recall per seed and over seeds, per question kind, the reference's paired differences)
    and those differences."""
    reference = next(iter(variants))
    ref_values = per_question(rows[reference], METRIC)
    paired = [
        paired_comparison(reference, ref_values, name, per_question(r, METRIC), METRIC, int(cfg.n_boot), seed=0)
        for name, r in rows.items()
        if name != reference
    ]
    paired = [c for c in paired if c is not None]
    by_kind = {
        name: {
            kind: float(np.mean([x["metrics"][METRIC] for x in r if x["category"] == kind]))
            for kind in KINDS
            if any(x["category"] == kind for x in r)
        }
        for name, r in rows.items()
    }
    summary = fold_summary(per_seed, (METRIC,))
    payload = {
        "command": command_line(),
        "family": plain(cfg.family),
        "seeds": list(cfg.seeds),
        "split": plain(cfg.split),
        "budget": dataclasses.asdict(budget),
        "entry_selector": cfg.entry_selector,
        "variants": variants,
        "trainer": plain(cfg.trainer),
        "reference": reference,
        "per_seed": {name: [fold[name][METRIC] for fold in per_seed] for name in rows},
        "summary": {name: summary[name][METRIC] for name in rows},
        "by_kind": by_kind,
        "kind_questions": {kind: sum(x["category"] == kind for x in rows[reference]) for kind in KINDS},
        "questions": {name: len(r) for name, r in rows.items()},
        "paired": [c.to_json() for c in paired],
    }
    return payload, paired


if __name__ == "__main__":
    main("relation_family", run, lambda cfg: check(cfg)[0])
