"""Train the learned router (the budget-aware walk) and compare it with the other policies on held-out conversations.

    python scripts/train.py                                   # one fold, default trainer (minutes on CPU)
    python scripts/train.py cv.folds=null                     # all 5 folds
    python scripts/train.py +experiment=hage_full             # HAGE's setting: per-edge table, HAGE's MDP, 200 epochs
    python scripts/train.py +experiment=ablation              # every ablation variant over 5 folds, one table

For each fold (splits by conversation, :mod:`rl.common.splits`) and each variant (trainer overrides,
``part -> key -> value``), the fold loop (:func:`rl.walk.folds.cross_validate`) trains the router on the
training conversations (:class:`rl.walk.trainer.WalkTrainer`: imitation warm start, then REINFORCE on the walk or
on HAGE's MDP), selects it on the validation conversations, and evaluates it once on the test conversations, next
to the baselines, under the same budget. ``fold_baselines`` adds policies whose config differs per fold
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
import functools
import logging
import time
from pathlib import Path
from typing import Any, Iterator

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
    set_threads,
)
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.device import resolve_device
from graphmem.core.errors import NothingMeasuredError
from graphmem.eval.folds import FoldTests
from graphmem.eval.harness import write_jsonl
from graphmem.eval.plots import plot_learning_curves
from graphmem.eval.provenance import run_provenance
from graphmem.eval.report import fold_markdown, paired_table
from graphmem.eval.runs import node_sweep_payload, plot_node_sweep, source_results
from graphmem.eval.stats import fold_summary
from graphmem.policies import POLICIES, make_policy
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
from rl.common.splits import check_fraction, check_share, source_folds
from rl.walk.folds import Fold, FoldHooks, Trained, Variant, cross_validate, open_fold
from rl.walk.trainer import TrainConfig

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
        variant = Variant.parse(name, overrides)
        if variant.sources and set(variant.sources) - kinds:
            raise ValueError(
                f"variants.{name}.sources: {sorted(set(variant.sources) - kinds)} not among this run's sets "
                f"{sorted(kinds)}"
            )
        TrainConfig.merged(base, variant.overrides)
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


def train_and_test(cfg, world, out: Path, folder, budget: Budget, base, variants, baselines) -> dict[str, Any] | None:
    """Train every variant of every fold and test it next to the baselines (:func:`rl.walk.folds.cross_validate`);
    rank 0 returns the results."""
    data = load_data(cfg, world, folder)
    splits = source_folds(data.by_source(), k=cfg.cv.k, seed=cfg.cv.seed, val_fraction=cfg.cv.val_fraction)
    folds = list(cfg.cv.folds) if cfg.cv.folds is not None else list(range(cfg.cv.k))
    tests = FoldTests(METRICS, node_budgets(cfg, budget))
    started = time.perf_counter()
    ctx = run_context(cfg, world, out, folder, budget, base, data)
    hooks = TrainHooks(ctx)
    chosen = [Variant.parse(name, overrides) for name, overrides in variants.items()]
    selector = cfg.policy.get("entry_selector", "embedding")
    fold_baselines = functools.partial(with_fold_baselines, cfg, baselines)
    cross_validate(
        open_folds(ctx, splits, folds), chosen, base, fold_baselines, tests, budget, selector, hooks, world.is_main
    )
    if not world.is_main:
        return None
    payload, table, paired = assemble(ctx, tests, hooks, splits, folds, variants, started)
    write_outputs(ctx, tests, hooks, payload, table, folds)
    log_summary(ctx, tests, hooks, payload["summary"], paired)
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


def open_folds(ctx: RunContext, splits, folds: list[int]) -> Iterator[Fold]:
    """Each fold's parts in turn (:func:`rl.walk.folds.open_fold`): the training questions with the training-only
    ones (a ``train_fraction`` of them, drawn by ``train_seed``), validation, test set."""
    data, cfg = ctx.data, ctx.cfg
    for k in folds:
        split = splits[k]
        if ctx.world.is_main:
            log.info(
                "fold %d: train %d / val %d / test %d conversations",
                k,
                len(split.train),
                len(split.val),
                len(split.test),
            )
        fraction, seed = float(cfg.get("train_fraction", 1.0)), int(cfg.get("train_seed", 0))
        yield open_fold(data.gs, k, split, data.extra, data.train_graphs, data.source_of, fraction, seed)


def with_fold_baselines(cfg: DictConfig, baselines: dict[str, Any], fold: Fold) -> dict[str, Any]:
    """The baselines with this fold's own ones (``fold_baselines``: ``{fold}`` in a value replaced) made and added."""
    for name, kwargs in fold_baseline_config(cfg).items():
        given = {key: v.format(fold=fold.k) if isinstance(v, str) else v for key, v in kwargs.items()}
        baselines[name] = make_policy({**policy_config(name), **given})
    return baselines


@dataclasses.dataclass
class TrainHooks(FoldHooks):
    """This script's part of the fold loop: each variant's checkpoint folder and tracked run (its progress bar and
    W&B run, finished once it is tested), every tested policy's record, the learning curves (variant -> fold ->
    history) and the best checkpoints (the summary run's inputs)."""

    ctx: RunContext
    records: list[dict] = dataclasses.field(default_factory=list)
    curves: dict[str, dict[int, Any]] = dataclasses.field(default_factory=dict)
    models: list = dataclasses.field(default_factory=list)
    tracker: Any = None
    bar: Any = None

    def run_fields(self, fold: Fold, variant: Variant) -> dict[str, Any]:
        here = {"device": str(self.ctx.rank_device)} if self.ctx.world.distributed else {}  # this rank's GPU
        ckpt_dir = run_path(self.ctx.out, f"fold{fold.k}", variant.name)
        return {"checkpoint_dir": str(ckpt_dir), "run_id": self.ctx.folder.run_id, **here}

    def logger(self, fold: Fold, variant: Variant, config: TrainConfig):
        ctx, k, name = self.ctx, fold.k, variant.name
        run_config = {**plain(ctx.cfg), "fold": k, "variant": name}
        self.tracker = make_tracker(
            ctx.logger_cfg, run_config, out_dir=ctx.out, name=f"fold{k}-{name}", job_type="train", group=ctx.group
        )
        if ctx.graphset_input is not None:
            self.tracker.use_artifact(ctx.graphset_input)
        epochs = sum(n for _, n, _ in config.phases())
        self.bar = ProgressLogger(epochs, desc=f"fold {k} {name}", disable=not ctx.cfg.progress)
        return MultiLogger(PrintLogger(every=1), TrackerLogger(self.tracker), self.bar) if ctx.world.is_main else None

    def failed(self, fold: Fold, variant: Variant, err: Exception) -> None:
        if isinstance(err, NothingMeasuredError):  # the reward's LLM is failing: nothing of this run is a result
            self.bar.close()
            self.tracker.update_summary({"error": str(err)})
            self.tracker.finish(exit_code=3)
            raise NothingMeasuredError(f"fold {fold.k} {variant.name}: {err}; no results.json written") from None

    def trained(self, fold: Fold, trained: Trained) -> None:
        self.bar.close()
        self.curves.setdefault(trained.variant.name, {})[fold.k] = trained.result.history

    def tested(self, fold: Fold, name: str, result, trained: Trained | None = None) -> None:
        """A baseline's record; a trained variant's tracked summary, test questions and best checkpoint too."""
        if trained is None:
            self.records.append({"fold": fold.k, "policy": name, "test": result.overall})
            return
        gs, k, tracker, res = self.ctx.data.gs, fold.k, self.tracker, trained.result
        tracker.update_summary(
            {"best_epoch": res.best_epoch, "val/best_return": res.best_score, "train_wall_s": trained.seconds}
            | {f"test/{m}": v for m, v in fold.metrics[name].items()}
            | {f"reward/{c}": n for c, n in (res.reward_calls or {}).items() if c in ("calls", "failures")}
        )
        log_question_tables(tracker, [result], prefix=f"test_questions/fold{k}")
        meta = {"fold": k, "variant": name, "best_epoch": res.best_epoch, "config_hash": gs.config_hash}
        artifact = f"router-{gs.dataset}-fold{k}-{name}"
        self.models += log_checkpoints(tracker, trained.config.run.checkpoint_dir, artifact, meta)[:1]  # best
        tracker.finish()
        self.records.append(
            {
                "fold": k,
                "policy": name,
                "best_phase": res.best_phase,
                "best_epoch": res.best_epoch,
                "val_return": res.best_score,
                "train_questions": len(trained.trainer.train.qids),  # those trained on (with a gold node and entries)
                "dropped_train_questions": trained.trainer.train.dropped,
                "reward_calls": res.reward_calls,  # the LLM-backed reward's calls and failures (null: none)
                "rank_head": rank_record(res.rank),  # which order the router returns, and the validation figures
                "train_wall_s": round(trained.seconds, 2),
                "test": result.overall,
                "trainer": dataclasses.asdict(trained.config),
                "history": res.history,
            }
        )

    def closed(self, fold: Fold) -> None:
        counts = {p: len(fold.test_set.questions) for p in fold.metrics}
        log.info("fold %d test:\n%s", fold.k, fold_markdown(fold_summary([fold.metrics], METRICS), counts))


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


def assemble(ctx: RunContext, tests: FoldTests, hooks: TrainHooks, splits, folds: list[int], variants, started: float):
    """results.json's payload (the node sweep's part added and plotted), results.md's table, the paired comparisons."""
    cfg, gs, extra, budget = ctx.cfg, ctx.data.gs, ctx.data.extra, ctx.budget
    summary = tests.summary()
    reference, n_boot, seed = paired_settings(cfg)
    also = list(stats_config(cfg).get("also") or [])
    groups = tests.paired(reference, list(variants), also, n_boot, seed)
    paired = [c for g in groups for c in g]
    table = tests.markdown(groups)
    by_source = None
    if len(set(ctx.data.by_source())) > 1:  # cv_sets: every source's test questions apart
        by_source, text = source_results(
            tests.test_rows, ctx.data.source_of, reference, list(variants), also, n_boot, seed
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
        "questions": tests.questions(),
        "reference": reference,
        "paired": [c.to_json() for c in paired],
        "by_source": by_source,  # with cv_sets: per source, each policy's means and the paired comparisons
        "sources": None if by_source is None else {g: ctx.data.source_of[g] for g in gs.graphs},
        "cv_sets": (gs.provenance or {}).get("cv_sets", []),  # each set cross-validated with the main one
        "train_extra": None if extra is None else {"graphs": len(extra.graphs), "questions": len(extra.questions)},
        "train_sets": [] if extra is None else extra.provenance["train_sets"],  # each set: file, sha256, counts
        "records": hooks.records,
        "splits": [dataclasses.asdict(splits[k]) for k in folds],
        "node_sweep": None,
        "wall_s": round(time.perf_counter() - started, 2),
        "device": str(resolve_device(ctx.base.get("run", {}).get("device", "auto"))),
        "world_size": ctx.world.size,
        # data file, graph set and config hashes; written with results.json, the run's last file: finished
        "provenance": run_provenance(plain(cfg), gs, tests.questions()),
    }
    if tests.sweep_rows:
        payload["node_sweep"] = node_sweep_results(ctx, tests, folds)
    return payload, table, paired


def node_sweep_results(ctx: RunContext, tests: FoldTests, folds: list[int]) -> dict[str, Any]:
    """The node sweep's budgets and statistics, plotted as recall_at_nodes.png (evidence recall per level)."""
    reference, n_boot, seed = paired_settings(ctx.cfg)
    results = {
        "budgets": [dataclasses.asdict(b) for b in tests.sweep_budgets],
        **node_sweep_payload(tests.sweep_rows, reference, n_boot, seed),
    }
    title = f"{ctx.data.gs.dataset}: evidence recall at a node budget, {len(folds)} fold(s) of test questions"
    plot_node_sweep(tests.sweep_rows, ctx.out / "recall_at_nodes.png", title)
    return results


def write_outputs(
    ctx: RunContext, tests: FoldTests, hooks: TrainHooks, payload: dict, table: str, folds: list[int]
) -> None:
    """results.md, every policy's test rows and node-sweep rows, the learning curves and, last, results.json."""
    out = ctx.out
    atomic_write(out / "results.md", lambda tmp: tmp.write_text(table + "\n"))
    for name, rows in tests.test_rows.items():
        write_jsonl(rows, run_path(out, f"questions_{name}.jsonl"))
    for name, levels in tests.sweep_rows.items():  # the node sweep's rows: what a merge of fold runs needs
        rows = [
            {k: r.get(k) for k in ("fold", "qid", "category", "metrics")} | {"max_nodes": n}
            for n, level in levels.items()
            for r in level
        ]
        write_jsonl(rows, run_path(out, f"node_sweep_{name}.jsonl"))
    if hooks.curves:
        title = f"{ctx.data.gs.dataset}: {len(folds)} fold(s)"
        plot_learning_curves(hooks.curves, out / "learning_curves.png", title=title)
    write_json(out / "results.json", payload)  # last: its provenance marks the run finished


def log_summary(ctx: RunContext, tests: FoldTests, hooks: TrainHooks, summary: dict, paired: list) -> None:
    """The summary run: the checkpoints as inputs, the test means and stds, the tables and the results artifact."""
    out, group = ctx.out, ctx.group
    with make_tracker(
        ctx.logger_cfg, ctx.cfg, out_dir=out, name="summary", job_type="evaluate", group=group
    ) as tracker:
        for ref in hooks.models:  # lineage: graph set -> checkpoints -> these results
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
        files = ["results.json", "results.md", *(f"questions_{n}.jsonl" for n in tests.test_rows)]
        files += ["learning_curves.png"] if hooks.curves else []
        tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


def run_and_shut_down(cfg: DictConfig) -> None:
    """:func:`run`, then the process group (a ``torchrun`` job's) shut down: together after a run that finished,
    at once after one that failed (its peers may never come)."""
    finished = False
    try:
        run(cfg)
        finished = True
    finally:
        shutdown(wait=finished)


if __name__ == "__main__":
    main("train", run_and_shut_down, lambda cfg: check(cfg)[0])
