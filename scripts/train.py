"""Train the learned router (the budget-aware walk) and compare it with the other policies on held-out conversations.

    python scripts/train.py                                   # one fold, default trainer (minutes on CPU)
    python scripts/train.py cv.folds=null                     # all 5 folds
    python scripts/train.py +experiment=hage_full             # HAGE's setting: per-edge table, HAGE's MDP, 200 epochs
    python scripts/train.py +experiment=ablation              # every ablation variant over 5 folds, one table

For each fold (splits by conversation, :mod:`rl.common.splits`) and each variant (trainer overrides,
``part -> key -> value``), :class:`rl.walk.trainer.WalkTrainer` trains the router on the training
conversations (imitation warm start, then REINFORCE on the walk or on HAGE's MDP), selects it on
the validation conversations, and it is evaluated once on the test conversations, next to the
baselines, under the same budget. ``fold_baselines`` adds policies whose config differs per fold
(``{fold}`` in a value, e.g. the GNN reader that ``scripts/train_gnn.py`` trained on that fold).
Writes ``results.json`` (per fold, mean ± std over folds with ddof = 1, and paired per-question
statistics of every policy against ``stats.reference``, and of the trained variants against each
policy of ``stats.also``, over all folds' test questions),
``results.md``, ``questions_<policy>.jsonl`` (every fold's test rows, with their fold),
``learning_curves.png`` (return and validation recall per epoch, one line per fold and variant) and
checkpoints in ``out_dir`` (in a multirun, in each job's sweep folder instead).
``train_extra=true`` adds the training-only files of the dataset (``data.train_files``), and
``train_sets`` the training-only sets of any kind (``[{name: musique, file: ..., pooled: true}]``), to the
training part of every fold; ``results.json`` records each (``train_sets``: file, SHA-256, counts).

    python scripts/train.py +experiment=multihop out_dir=<dir>    # 2Wiki pools, HotpotQA and MuSiQue pools added
    python scripts/train.py +experiment=conversations out_dir=<dir>   # LoCoMo and REALTALK cross-validated together

``cv_sets`` adds sets cross-validated with the main one (each source split on its own and spread over every fold,
:func:`rl.common.splits.source_folds`; results per source in ``by_source``); a variant's ``sources`` trains and
selects it on those sources' conversations only.

    python scripts/train.py -m hydra/launcher=joblib trainer.run.seed=0,1,2        # a local parallel sweep

Data parallel (:mod:`rl.walk.parallel`): each rank walks its slice of every global batch
(``trainer.optim.batch_size`` questions over all ranks), DDP averages the gradients, rank 0 logs the
W&B run, writes the checkpoints and the results and evaluates; the checkpoint is the one process's
at the same global batch, to float rounding (docs/distributed.md; SLURM: ``hydra/launcher=slurm``).

    torchrun --nproc_per_node=2 scripts/train.py trainer.run.device=cpu              # 2 gloo ranks
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.builders import check_configs
from graphmem.builders.pipeline import TRAIN_SETS_EXAMPLE, open_cv_graphset, open_train_graphset, train_sources
from graphmem.config.bounds import Bound
from graphmem.config.cli import (
    METRICS,
    check_int,
    check_out_dir,
    config_list,
    graphset_location,
    load_graphset,
    name_list,
    policy_config,
    restrict_graphs,
    set_threads,
)
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.device import resolve_device
from graphmem.core.errors import NothingMeasuredError
from graphmem.eval.harness import evaluate_policy, write_jsonl
from graphmem.eval.plots import plot_learning_curves
from graphmem.eval.provenance import run_provenance
from graphmem.eval.report import fold_markdown, paired_table
from graphmem.eval.runs import node_sweep_payload, paired_groups, plot_node_sweep, source_results
from graphmem.eval.stats import comparisons_markdown, fold_summary
from graphmem.policies import POLICIES, make_policy
from graphmem.store.checkpoint import checkpoint_inputs
from graphmem.store.graphset import GraphSet, union
from graphmem.store.io import atomic_write, write_json
from graphmem.store.paths import check_name, run_path
from graphmem.store.run_folder import open_run_folder_on_main
from graphmem.tracking import (
    describe_artifact,
    experiment_group,
    graphset_artifact,
    log_checkpoints,
    log_question_tables,
    make_tracker,
)
from rl.common.distributed import init_from_env, shutdown
from rl.common.logging import MultiLogger, PrintLogger, ProgressLogger, TrackerLogger
from rl.common.splits import check_fraction, check_share, source_folds, subsample
from rl.walk.trainer import TrainConfig, WalkTrainer

ARTIFACTS = (
    "results.json",
    "results.md",
    "questions_*.jsonl",
    "learning_curves.png",
    "fold*/*/last.pt",
    "fold*/*/best.pt",
    "fold*/*/*.pt.artifact.json",
    "tracking",
    "wandb",
)
"""What a run writes in its folder (graphmem.store.run_folder moves an earlier run's aside)."""

log = logging.getLogger(__name__)
FOLD_LIST = Bound(0, each=True, null=True)
"""``cv.folds``: fold numbers (compared with ``cv.k`` below) or null, checked before they are compared."""


def train_set_items(cfg: DictConfig, key: str = "train_sets") -> list:
    """``train_sets`` (the training-only sets of any kind) or ``cv_sets`` (the sets cross-validated with the main
    one), each a mapping of data keys; empty when absent."""
    return config_list(cfg, key, TRAIN_SETS_EXAMPLE.replace("train_sets", key))


def variant_sources(overrides: dict[str, Any]) -> tuple[dict[str, Any], list[str] | None]:
    """A variant's trainer overrides without its ``sources`` key, and that key: the sources (dataset kinds:
    ``locomo``, ``realtalk``) whose training and validation graphs it learns from; ``None`` = all."""
    rest = dict(overrides)
    sources = rest.pop("sources", None)
    if sources is not None and (
        not isinstance(sources, list) or not sources or not all(isinstance(x, str) for x in sources)
    ):
        raise ValueError(f"variants.*.sources must be a non-empty list of dataset kinds, got {sources!r}")
    return rest, sources


def load_train_graphset(cfg: DictConfig, main: GraphSet) -> GraphSet | None:
    """The training-only graphs and questions (``data.train_files`` with ``train_extra``, and ``train_sets``),
    built with the run's graph config, apart from ``main``; ``None`` when the run has none."""
    return open_train_graphset(
        plain(cfg.data),
        plain(cfg.graph),
        hydra.utils.to_absolute_path(cfg.graphset_dir),
        progress=cfg.progress,
        train_sets=train_set_items(cfg),
        train_files=bool(cfg.get("train_extra")),
        main=main,
    )


def summarize(per_fold: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """policy -> metric -> {mean, std (ddof = 1; None for one fold), folds} over the folds."""
    return fold_summary(per_fold, METRICS)


def stats_config(cfg: DictConfig) -> dict[str, Any]:
    """The ``stats`` group (``reference`` policy of the paired comparisons, ``n_boot``); empty when absent."""
    return plain(cfg.stats) if cfg.get("stats") else {}


def fold_baseline_config(cfg: DictConfig) -> dict[str, dict[str, Any]]:
    """``fold_baselines``: policy name -> kwargs whose strings may hold ``{fold}``; empty when absent."""
    given = plain(cfg.fold_baselines) if cfg.get("fold_baselines") else {}
    return {name: dict(kwargs or {}) for name, kwargs in given.items()}


def node_budgets(cfg: DictConfig, budget: Budget) -> list[Budget]:
    """``node_sweep``: the budget at each of ``levels`` loaded nodes (``max_nodes``, entries capped by it),
    with the sweep's ``budget`` overrides (e.g. unbounded tokens, so the unit is the node)."""
    sweep = plain(cfg.node_sweep) if cfg.get("node_sweep") else {}
    over = dict(sweep.get("budget") or {})
    return [
        dataclasses.replace(budget, **{**over, "max_nodes": int(n), "max_entries": min(budget.max_entries, int(n))})
        for n in sweep.get("levels") or []
    ]


def question_counts(rows: dict[str, list[dict]]) -> dict[str, int]:
    """Test questions each policy was scored on, over all folds."""
    return {policy: len(r) for policy, r in rows.items()}


def output_dir(cfg: DictConfig) -> Path:
    """``out_dir``, or this job's own sweep folder in a multirun (so parallel jobs never share files)."""
    hc = HydraConfig.get() if HydraConfig.initialized() else None
    if hc is not None and hc.mode == RunMode.MULTIRUN:
        return Path(hc.runtime.output_dir)
    return Path(hydra.utils.to_absolute_path(cfg.out_dir))


def check(cfg: DictConfig):
    """Every setting checked before any work: the run folder, budget, variants, baselines, folds, data/graph."""
    out = check_out_dir(output_dir(cfg))
    budget = typed(cfg.budget, Budget)
    base = plain(cfg.trainer)
    variants = plain(cfg.variants) or {"router": {}}
    items = [item for key in ("cv_sets", "train_sets") for item in train_set_items(cfg, key)]
    kinds = {cfg.data.name} | {item.get("name") for item in items if isinstance(item, dict)}
    for name, overrides in variants.items():
        check_name("variants", name)
        if not isinstance(overrides, dict):
            raise ValueError(
                f"variants.{name} must be a mapping of trainer overrides ({{}} for none), got {overrides!r}; "
                f"~variants.{name} drops the variant"
            )
        overrides, sources = variant_sources(overrides)
        if sources and set(sources) - kinds:
            raise ValueError(
                f"variants.{name}.sources: {sorted(set(sources) - kinds)} not among this run's sets {sorted(kinds)}"
            )
        TrainConfig.merged(base, overrides)
    stats = stats_config(cfg)
    reference = stats.get("reference")
    baseline_names = name_list(cfg.baselines, "baselines")
    if reference and reference not in baseline_names and reference not in variants:
        baseline_names.append(reference)  # the paired statistics need the reference's test rows
    if cfg.get("train_extra") and not cfg.data.get("train_files"):
        raise ValueError(f"train_extra=true, but data {cfg.data.name!r} lists no train_files")
    baselines = {}
    for name in baseline_names:
        check_name("baselines", name)
        try:
            POLICIES.resolve(name)
        except ValueError:
            raise ValueError(f"unknown baseline policy {name!r}; registered: {sorted(POLICIES)}") from None
        try:
            baselines[name] = make_policy(policy_config(name))
        except (OSError, TypeError, ValueError, KeyError) as err:
            raise ValueError(f"baseline {name!r} cannot be built from its policy config: {err}") from None
    for name in fold_baseline_config(cfg):
        check_name("fold_baselines", name)
        POLICIES.resolve(name)
    check_int(cfg, "cv.k"), check_int(cfg, "cv.seed")
    FOLD_LIST.check(cfg, "cv.folds", plain(cfg.cv).get("folds"))
    if cfg.cv.k < 3 or any(not 0 <= f < cfg.cv.k for f in (cfg.cv.folds or [])):
        raise ValueError(
            f"cv.k must be >= 3 and cv.folds within [0, {cfg.cv.k}), got k={cfg.cv.k}, folds={cfg.cv.folds}"
        )
    check_fraction("cv.val_fraction", cfg.cv.val_fraction)
    check_share("train_fraction", cfg.get("train_fraction", 1.0))
    data = plain(cfg.data)
    check_configs(data, plain(cfg.graph))
    train_sources(data, train_set_items(cfg), bool(cfg.get("train_extra")), train_set_items(cfg, "cv_sets"))
    return out, budget, base, variants, baselines


def run(cfg: DictConfig) -> dict[str, Any] | None:
    set_threads(cfg)  # no threads key: $OMP_NUM_THREADS, else 1 (per rank under torchrun)
    world = init_from_env(str(cfg.trainer.run.device))
    out, budget, base, variants, baselines = check(cfg)
    run_cfg = base.get("run") or {}
    device = world.device(resolve_device(run_cfg.get("device", "auto")))
    config = plain(cfg)
    with open_run_folder_on_main(
        world, out, config, bool(run_cfg.get("resume")), device, artifacts=ARTIFACTS, kind="train"
    ) as folder:
        return train_and_test(cfg, world, out, folder, budget, base, variants, baselines)


@dataclasses.dataclass
class TrainData:
    """The graph set (with the graphs of ``cv_sets``), its training-only graphs (``train_extra``, ``train_sets``;
    None without), the graphs every fold trains on, and each graph's source (its ``info["dataset"]``)."""

    gs: GraphSet
    extra: GraphSet | None
    train_graphs: dict
    source_of: dict[str, str] = dataclasses.field(default_factory=dict)

    def by_source(self) -> dict[str, list[str]]:
        """Source -> the names of its graphs in the cross-validated set."""
        out: dict[str, list[str]] = {}
        for name in self.gs.graphs:
            out.setdefault(self.source_of[name], []).append(name)
        return out


@dataclasses.dataclass
class RunContext:
    """What every fold shares: the config, the ranks, the run folder, the budget, the trainer's base config,
    the data, the tracking settings (logger config, group, the graph set's artifact) and this rank's device."""

    cfg: DictConfig
    world: Any
    out: Path
    folder: Any
    budget: Budget
    base: dict[str, Any]
    data: TrainData
    logger_cfg: Any
    group: str
    graphset_input: Any
    rank_device: torch.device


@dataclasses.dataclass
class Fold:
    """One fold: its number and split, the training questions (training-only ones appended) and embeddings,
    the validation questions and embeddings, the test set, and its test metrics (policy -> metric -> value)."""

    k: int
    split: Any
    train_q: list
    train_e: torch.Tensor
    val_q: list
    val_e: torch.Tensor
    test_set: GraphSet
    metrics: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Collected:
    """What the folds add up to: each fold's metrics, the records, every policy's test rows (with their fold),
    the node sweep's rows (policy -> nodes -> rows), the learning curves (variant -> fold -> history) and
    the best checkpoints (the summary run's inputs)."""

    sweep_budgets: list[Budget]
    per_fold: list[dict[str, dict[str, float]]] = dataclasses.field(default_factory=list)
    records: list[dict] = dataclasses.field(default_factory=list)
    test_rows: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    sweep_rows: dict[str, dict[int, list[dict]]] = dataclasses.field(default_factory=dict)
    curves: dict[str, dict[int, Any]] = dataclasses.field(default_factory=dict)
    models: list = dataclasses.field(default_factory=list)

    def test(self, name: str, policy, fold: Fold, budget: Budget):
        """Evaluate ``policy`` on the fold's test set under ``budget`` and at each sweep budget; keep its
        metrics in ``fold.metrics`` and its rows; return the evaluation."""
        res = evaluate_policy(policy, fold.test_set, budget, progress=False)
        for b in self.sweep_budgets:
            level = self.sweep_rows.setdefault(name, {}).setdefault(b.max_nodes, [])
            level.extend(
                {"fold": fold.k, **row} for row in evaluate_policy(policy, fold.test_set, b, progress=False).rows
            )
        fold.metrics[name] = {m: res.overall.get(m) for m in METRICS}
        self.test_rows.setdefault(name, []).extend({"fold": fold.k, **row} for row in res.rows)
        return res


def train_and_test(cfg, world, out: Path, folder, budget: Budget, base, variants, baselines) -> dict[str, Any] | None:
    """Train every variant of every fold and test it next to the baselines; rank 0 returns the results."""
    data = load_data(cfg, world, folder)
    splits = source_folds(data.by_source(), k=cfg.cv.k, seed=cfg.cv.seed, val_fraction=cfg.cv.val_fraction)
    folds = list(cfg.cv.folds) if cfg.cv.folds is not None else list(range(cfg.cv.k))
    collected = Collected(node_budgets(cfg, budget))
    started = time.perf_counter()
    ctx = run_context(cfg, world, out, folder, budget, base, data)
    for k in folds:
        run_fold(ctx, open_fold(ctx, k, splits[k]), variants, baselines, collected)
    if not world.is_main:
        return None
    payload, table, paired = assemble(ctx, collected, splits, folds, variants, started)
    write_outputs(ctx, collected, payload, table, folds)
    log_summary(ctx, collected, payload["summary"], paired)
    log.info("results written to %s", out)
    return payload


def load_data(cfg: DictConfig, world, folder) -> TrainData:
    """The graph set (rank 0 loads, or builds and caches, it first) and the training-only graphs."""
    if not world.is_main:
        world.barrier()
    gs = load_graphset(cfg)
    if cfg.get("cv_sets"):
        data, graph = (OmegaConf.to_container(cfg[k], resolve=True) for k in ("data", "graph"))
        root = hydra.utils.to_absolute_path(cfg.graphset_dir)
        gs = open_cv_graphset(data, graph, gs, train_set_items(cfg, "cv_sets"), root, progress=cfg.progress)
    extra = load_train_graphset(cfg, gs)
    if world.is_main:
        world.barrier()
        log.info("%s", "\n".join(gs.report.lines()))
        folder.check_graphset(gs.config_hash)
        for rec in extra.provenance["train_sets"] if extra is not None else []:
            log.info(
                "training-only %s: %d graphs, %d questions (%s)",
                rec["key"],
                rec["graphs"],
                rec["questions"],
                rec["file"],
            )
    train_graphs = gs.graphs if extra is None else union(gs, extra).graphs  # refuses shared graph names
    source_of = {name: str(g.info.get("dataset", gs.dataset)) for name, g in train_graphs.items()}
    return TrainData(gs, extra, train_graphs, source_of)


def run_context(cfg: DictConfig, world, out: Path, folder, budget: Budget, base, data: TrainData) -> RunContext:
    """This rank's device and the tracking settings (rank 0 logs; the graph set's artifact where it has a manifest)."""
    rank_device = world.device(resolve_device((base.get("run") or {}).get("device", "auto")))
    logger_cfg = cfg.logger if world.is_main else {"backend": "none"}
    group = experiment_group("train", data.gs.dataset)
    location = graphset_location(cfg)
    graphset_input = graphset_artifact(location) if world.is_main and (location / "manifest.json").is_file() else None
    return RunContext(cfg, world, out, folder, budget, base, data, logger_cfg, group, graphset_input, rank_device)


def open_fold(ctx: RunContext, k: int, split) -> Fold:
    """Fold ``k``'s parts: the training questions with the training-only ones, validation, test set."""
    if ctx.world.is_main:
        log.info(
            "fold %d: train %d / val %d / test %d conversations",
            k,
            len(split.train),
            len(split.val),
            len(split.test),
        )
    gs, extra = ctx.data.gs, ctx.data.extra
    train_set, val_set, test_set = (restrict_graphs(gs, part) for part in (split.train, split.val, split.test))
    train_q, train_e = train_set.questions, train_set.query_embeddings
    if extra is not None:
        train_q, train_e = train_q + extra.questions, torch.cat([train_e, extra.query_embeddings])
    fraction = float(ctx.cfg.get("train_fraction", 1.0))
    if fraction < 1:  # a learning curve's point: a share of the training questions, drawn by train_seed
        keep = subsample([q.qid for q in train_q], fraction, int(ctx.cfg.get("train_seed", 0)))
        train_q, train_e = [train_q[i] for i in keep], train_e[keep]
    return Fold(k, split, train_q, train_e, val_set.questions, val_set.query_embeddings, test_set)


def run_fold(ctx: RunContext, fold: Fold, variants, baselines, collected: Collected) -> None:
    """Train and (rank 0) test every variant on the fold, then test the baselines and the fold's own ones."""
    for name, overrides in variants.items():
        train_variant(ctx, fold, name, overrides, collected)
    if not ctx.world.is_main:
        return
    for name, kwargs in fold_baseline_config(ctx.cfg).items():
        given = {key: v.format(fold=fold.k) if isinstance(v, str) else v for key, v in kwargs.items()}
        baselines[name] = make_policy({**policy_config(name), **given})
    for name, policy in baselines.items():
        res = collected.test(name, policy, fold, ctx.budget)
        collected.records.append({"fold": fold.k, "policy": name, "test": res.overall})
    collected.per_fold.append(fold.metrics)
    counts = {p: len(fold.test_set.questions) for p in fold.metrics}
    log.info("fold %d test:\n%s", fold.k, fold_markdown(summarize([fold.metrics]), counts))


def learned_parts(ctx: RunContext, fold: Fold, sources: list[str] | None):
    """The fold's training questions and embeddings, validation questions and embeddings, and the training and
    validation graph names a variant learns from: those of ``sources`` (``None``: every source)."""
    extra = list(ctx.data.extra.graphs) if ctx.data.extra is not None else []
    graphs = ([*fold.split.train, *extra], list(fold.split.val))
    parts = (fold.train_q, fold.train_e, fold.val_q, fold.val_e)
    if sources is None:
        return parts, graphs
    keep = set(sources)
    mine = [[q.graph for q in qs] for qs in (fold.train_q, fold.val_q)]
    rows = [[i for i, g in enumerate(gs) if ctx.data.source_of[g] in keep] for gs in mine]
    if not rows[0] or not rows[1]:
        raise ValueError(
            f"fold {fold.k}: sources {sources} leave no {'training' if not rows[0] else 'validation'} question"
        )
    parts = (
        [fold.train_q[i] for i in rows[0]],
        fold.train_e[rows[0]],
        [fold.val_q[i] for i in rows[1]],
        fold.val_e[rows[1]],
    )
    return parts, tuple([g for g in names if ctx.data.source_of[g] in keep] for names in graphs)


def train_variant(ctx: RunContext, fold: Fold, name: str, overrides, collected: Collected) -> None:
    """Train one variant on the fold (its checkpoints under ``fold<k>/<name>``), on the training and validation
    graphs of its ``sources`` (all when unset); rank 0 then tests it on the fold's test graphs of every source."""
    cfg, k = ctx.cfg, fold.k
    overrides, sources = variant_sources(overrides)
    here = {"device": str(ctx.rank_device)} if ctx.world.distributed else {}  # this rank's GPU
    ckpt_dir = run_path(ctx.out, f"fold{k}", name)
    tc = TrainConfig.merged(ctx.base, overrides, checkpoint_dir=str(ckpt_dir), run_id=ctx.folder.run_id, **here)
    run_config = {**plain(cfg), "fold": k, "variant": name}
    tracker = make_tracker(
        ctx.logger_cfg, run_config, out_dir=ctx.out, name=f"fold{k}-{name}", job_type="train", group=ctx.group
    )
    if ctx.graphset_input is not None:
        tracker.use_artifact(ctx.graphset_input)
    epochs = sum(n for _, n, _ in tc.phases())
    bar = ProgressLogger(epochs, desc=f"fold {k} {name}", disable=not cfg.progress)
    logger = MultiLogger(PrintLogger(every=1), TrackerLogger(tracker), bar) if ctx.world.is_main else None
    t0 = time.perf_counter()
    selector = cfg.policy.get("entry_selector", "embedding")
    parts, (train_graphs, val_graphs) = learned_parts(ctx, fold, sources)
    inputs = checkpoint_inputs(ctx.data.gs, train_graphs, val_graphs)
    trainer = WalkTrainer(tc, ctx.data.train_graphs, *parts, ctx.budget, logger, selector, inputs)
    try:
        result = trainer.learn()
    except NothingMeasuredError as err:  # the reward's LLM is failing: nothing of this run is a result
        bar.close()
        tracker.update_summary({"error": str(err)})
        tracker.finish(exit_code=3)
        raise NothingMeasuredError(f"fold {k} {name}: {err}; no results.json written") from None
    train_s = time.perf_counter() - t0
    bar.close()
    collected.curves.setdefault(name, {})[k] = result.history
    if ctx.world.is_main:  # rank 0 tests and reports
        policy = make_policy("router", scorer=result.scorer, device=tc.run.device, entry_selector=selector)
        test_variant(ctx, fold, name, policy, tc, trainer, result, train_s, tracker, collected)


def test_variant(ctx: RunContext, fold: Fold, name: str, policy, tc, trainer, result, train_s, tracker, collected):
    """Test the trained variant on the fold; track its summary, test questions and best checkpoint; keep its record."""
    gs, k = ctx.data.gs, fold.k
    res = collected.test(name, policy, fold, ctx.budget)
    tracker.update_summary(
        {"best_epoch": result.best_epoch, "val/best_return": result.best_score, "train_wall_s": train_s}
        | {f"test/{m}": v for m, v in fold.metrics[name].items()}
        | {f"reward/{c}": n for c, n in (result.reward_calls or {}).items() if c in ("calls", "failures")}
    )
    log_question_tables(tracker, [res], prefix=f"test_questions/fold{k}")
    meta = {"fold": k, "variant": name, "best_epoch": result.best_epoch, "config_hash": gs.config_hash}
    artifact = f"router-{gs.dataset}-fold{k}-{name}"
    collected.models += log_checkpoints(tracker, tc.run.checkpoint_dir, artifact, meta)[:1]  # best
    tracker.finish()
    collected.records.append(
        {
            "fold": k,
            "policy": name,
            "best_phase": result.best_phase,
            "best_epoch": result.best_epoch,
            "val_return": result.best_score,
            "train_questions": len(trainer.train.qids),  # those trained on (with a gold node and entries)
            "dropped_train_questions": trainer.train.dropped,
            "reward_calls": result.reward_calls,  # the LLM-backed reward's calls and failures (null: none)
            "rank_head": rank_record(result.rank),  # which order the router returns, and the validation figures
            "train_wall_s": round(train_s, 2),
            "test": res.overall,
            "trainer": dataclasses.asdict(tc),
            "history": result.history,
        }
    )


def rank_record(rank) -> dict[str, Any] | None:
    """The ranking head's selection (``rl.walk.rank.RankResult``): kept or load order, best epoch, validation
    ranked recall of the head and of the load order; ``None`` when no head was trained."""
    if rank is None:
        return None
    return {"selected": rank.selected, "best_epoch": rank.best_epoch, "val_ranked_recall": rank.val}


def paired_settings(cfg: DictConfig) -> tuple[str | None, int, int]:
    """The paired statistics' reference policy (``stats.reference``), bootstrap draws and seed (``cv.seed``)."""
    stats = stats_config(cfg)
    return stats.get("reference"), int(stats.get("n_boot", 10_000)), int(cfg.cv.seed)


def assemble(ctx: RunContext, collected: Collected, splits, folds: list[int], variants, started: float):
    """results.json's payload (the node sweep's part added and plotted), results.md's table, the paired comparisons."""
    cfg, gs, extra, budget = ctx.cfg, ctx.data.gs, ctx.data.extra, ctx.budget
    summary = summarize(collected.per_fold)
    reference, n_boot, seed = paired_settings(cfg)
    also = list(stats_config(cfg).get("also") or [])
    groups = paired_groups(collected.test_rows, reference, list(variants), also, n_boot, seed)
    paired = [c for g in groups for c in g]
    table = fold_markdown(summary, question_counts(collected.test_rows))
    for comparisons in groups:
        table += "\n\n" + comparisons_markdown(comparisons) if comparisons else ""
    by_source = None
    if len(set(ctx.data.by_source())) > 1:  # cv_sets: every source's test questions apart
        by_source, text = source_results(
            collected.test_rows, ctx.data.source_of, reference, list(variants), also, n_boot, seed
        )
        table += "\n\n## By source\n\n" + text
    log.info("%s: test graphs, %d fold(s), budget %s\n%s", gs.dataset, len(folds), dataclasses.asdict(budget), table)
    payload = {
        "run_id": ctx.folder.run_id,
        "dataset": gs.dataset,
        "graphset": gs.provenance,
        "budget": dataclasses.asdict(budget),
        "folds": folds,
        "summary": summary,
        "questions": question_counts(collected.test_rows),
        "reference": reference,
        "paired": [c.to_json() for c in paired],
        "by_source": by_source,  # with cv_sets: per source, each policy's means and the paired comparisons
        "sources": None if by_source is None else {g: ctx.data.source_of[g] for g in gs.graphs},
        "cv_sets": (gs.provenance or {}).get("cv_sets", []),  # each set cross-validated with the main one
        "train_extra": None if extra is None else {"graphs": len(extra.graphs), "questions": len(extra.questions)},
        "train_sets": [] if extra is None else extra.provenance["train_sets"],  # each set: file, sha256, counts
        "records": collected.records,
        "splits": [dataclasses.asdict(splits[k]) for k in folds],
        "node_sweep": None,
        "wall_s": round(time.perf_counter() - started, 2),
        "device": str(resolve_device(ctx.base.get("run", {}).get("device", "auto"))),
        "world_size": ctx.world.size,
        # data file, graph set and config hashes; written with results.json, the run's last file: finished
        "provenance": run_provenance(plain(cfg), gs, question_counts(collected.test_rows)),
    }
    if collected.sweep_rows:
        payload["node_sweep"] = node_sweep_results(ctx, collected, folds)
    return payload, table, paired


def node_sweep_results(ctx: RunContext, collected: Collected, folds: list[int]) -> dict[str, Any]:
    """The node sweep's budgets and statistics, plotted as recall_at_nodes.png (evidence recall per level)."""
    reference, n_boot, seed = paired_settings(ctx.cfg)
    results = {
        "budgets": [dataclasses.asdict(b) for b in collected.sweep_budgets],
        **node_sweep_payload(collected.sweep_rows, reference, n_boot, seed),
    }
    title = f"{ctx.data.gs.dataset}: evidence recall at a node budget, {len(folds)} fold(s) of test questions"
    plot_node_sweep(collected.sweep_rows, ctx.out / "recall_at_nodes.png", title)
    return results


def write_outputs(ctx: RunContext, collected: Collected, payload: dict, table: str, folds: list[int]) -> None:
    """results.md, every policy's test rows and node-sweep rows, the learning curves and, last, results.json."""
    out = ctx.out
    atomic_write(out / "results.md", lambda tmp: tmp.write_text(table + "\n"))
    for name, rows in collected.test_rows.items():
        write_jsonl(rows, run_path(out, f"questions_{name}.jsonl"))
    for name, levels in collected.sweep_rows.items():  # the node sweep's rows: what a merge of fold runs needs
        rows = [
            {k: r.get(k) for k in ("fold", "qid", "category", "metrics")} | {"max_nodes": n}
            for n, level in levels.items()
            for r in level
        ]
        write_jsonl(rows, run_path(out, f"node_sweep_{name}.jsonl"))
    if collected.curves:
        title = f"{ctx.data.gs.dataset}: {len(folds)} fold(s)"
        plot_learning_curves(collected.curves, out / "learning_curves.png", title=title)
    write_json(out / "results.json", payload)  # last: its provenance marks the run finished


def log_summary(ctx: RunContext, collected: Collected, summary: dict, paired: list) -> None:
    """The summary run: the checkpoints as inputs, the test means and stds, the tables and the results artifact."""
    out, group = ctx.out, ctx.group
    with make_tracker(
        ctx.logger_cfg, ctx.cfg, out_dir=out, name="summary", job_type="evaluate", group=group
    ) as tracker:
        for ref in collected.models:  # lineage: graph set -> checkpoints -> these results
            tracker.use_artifact(ref)
        tracker.update_summary(
            {f"test/{p}/{m}": ms[m]["mean"] for p, ms in summary.items() for m in METRICS}
            | {f"test/{p}/{m}_std": ms[m]["std"] for p, ms in summary.items() for m in METRICS}
        )
        tracker.log_table(
            "summary", ["policy", *METRICS], [[p, *(ms[m]["mean"] for m in METRICS)] for p, ms in summary.items()]
        )
        if paired:
            tracker.log_table("paired_vs_reference", *paired_table(paired))
        files = ["results.json", "results.md", *(f"questions_{n}.jsonl" for n in collected.test_rows)]
        files += ["learning_curves.png"] if collected.curves else []
        tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


def run_and_shut_down(cfg: DictConfig) -> None:
    """:func:`run`, then the process group (a ``torchrun`` job's) shut down."""
    try:
        run(cfg)
    finally:
        shutdown()


if __name__ == "__main__":
    main("train", run_and_shut_down, lambda cfg: check(cfg)[0])
