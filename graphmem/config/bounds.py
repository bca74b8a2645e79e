"""Bounds of every size-like config key (counts, sizes, epochs, folds, batch sizes, budgets), checked
when the config is composed, before any work.

One table per entry point's config (:data:`CONFIG_BOUNDS`, by Hydra config name) and one per shared
group (:data:`GROUP_BOUNDS`, applied wherever the group is part of the config) say, per dotted key,
what the value may be (:class:`Bound`, :class:`OneOf`); keys a config lacks (an optional
``+suite=``) are skipped. Where memory is the limit, :data:`MEMORY_BOUNDS` estimate what the value
allocates and compare it with the memory available on this machine (:func:`available_memory`).
:func:`check_bounds` raises :class:`BoundsError` (an :class:`~graphmem.core.errors.InputError`), one line
naming the key, its value and the allowed range; :func:`graphmem.config.launch.check_command_line` calls it
for every job of the command line and :func:`graphmem.config.cli.run_or_exit` again inside the run.

The hard caps are far above any measured setting and keep a typo (an extra zero or three) from
starting a run that cannot end; the memory estimates are documented at :func:`walk_bytes` and
:func:`synthetic_node_bytes`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Callable, Mapping

from graphmem.core.errors import InputError

SEED_MAX = 2**32 - 1
EPOCHS_MAX = 100_000
COUNT_MAX = 10_000_000


class BoundsError(InputError, ValueError):
    """A config value outside its allowed range (the message names the key and the range)."""


@dataclasses.dataclass(frozen=True)
class Bound:
    """An integer ``lo <= value <= hi``.

    ``hi`` is a number, ``None`` (no upper bound) or another key of the same config, optionally minus
    one (``"cv.k-1"``: below the fold count). ``each``: the value is a list and every element is
    bounded; ``null``: ``None`` is allowed too (a default such as "all folds")."""

    lo: int
    hi: int | str | None = None
    each: bool = False
    null: bool = False

    def upper(self, cfg: Any) -> int | None:
        """The upper bound in ``cfg`` (``None`` when unbounded or when the key it names is not an integer)."""
        if not isinstance(self.hi, str):
            return self.hi
        key, minus, offset = self.hi.partition("-")
        value = _select(cfg, key)
        if not _is_int(value):
            return None
        return value - int(offset) if minus else value

    def allowed(self, cfg: Any) -> str:
        hi = self.upper(cfg)
        span = f"in [{self.lo}, {hi}]" if hi is not None else f">= {self.lo}"
        if isinstance(self.hi, str) and hi is not None:
            span += f" ({self.hi.partition('-')[0]}={_select(cfg, self.hi.partition('-')[0])})"
        what = f"a list of integers, each {span}" if self.each else f"an integer {span}"
        return what + (", or null" if self.null else "")

    def check(self, cfg: Any, key: str, value: Any) -> None:
        if value is None and self.null:
            return
        values = value if self.each and isinstance(value, list) else [value]
        if self.each and not isinstance(value, list):
            raise BoundsError(f"{key}={value!r}: must be {self.allowed(cfg)}")
        hi = self.upper(cfg)
        for v in values:
            if not _is_int(v) or v < self.lo or (hi is not None and v > hi):
                got = f", got {_show(v)}" if self.each else ""
                raise BoundsError(f"{key}={_show(value)}: must be {self.allowed(cfg)}{got}")


@dataclasses.dataclass(frozen=True)
class Real:
    """A finite number ``lo <= value <= hi`` (``lo < value`` with ``lo_open``), e.g. a learning rate: a value far
    past ``hi`` (``lr=1e20``) makes a training diverge or overflow, so it is refused before any work."""

    lo: float
    hi: float
    lo_open: bool = False
    each: bool = False

    def check(self, cfg: Any, key: str, value: Any) -> None:
        span = f"{'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}]"
        what = f"a list of finite numbers, each in {span}" if self.each else f"a finite number in {span}"
        values = value if self.each and isinstance(value, list) else [value]
        if (self.each and not isinstance(value, list)) or not all(self._within(v) for v in values):
            raise BoundsError(f"{key}={_show(value)}: must be {what}")

    def _within(self, v: Any) -> bool:
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return number and v <= self.hi and (v > self.lo if self.lo_open else v >= self.lo)


@dataclasses.dataclass(frozen=True)
class OneOf:
    """One of ``values``."""

    values: tuple[Any, ...]

    def check(self, cfg: Any, key: str, value: Any) -> None:
        if value not in self.values:
            raise BoundsError(f"{key}={_show(value)}: must be one of {list(self.values)}")


@dataclasses.dataclass(frozen=True)
class MemoryBound:
    """``value · per_unit(cfg)`` bytes must fit in the memory available here (``what`` says what is
    allocated, its ``{unit}`` filled with ``shown(cfg)`` bytes, default ``per_unit(cfg)``)."""

    key: str
    per_unit: Callable[[Any], float]
    what: str
    shown: Callable[[Any], float] | None = None


BUDGET = {
    "max_entries": Bound(0, 100_000),
    "top_k_neighbors": Bound(0, 100_000),
    "max_hops": Bound(0, 10_000),
    "max_nodes": Bound(0, 1_000_000),
    "max_tokens": Bound(0, 10**9),
}
LR = Real(0, 10, lo_open=True)
"""A learning rate: Adam above 10 only diverges (measured runs use 1e-5 to 3e-3)."""
DECAY = Real(0, 10)
OPTIM = {"lr": LR, "rl_lr": LR, "weight_decay": DECAY, "max_grad_norm": Real(0, 1e6), "batch_size": Bound(1, 1_000_000)}
"""The walk trainer's optimiser keys (``trainer.optim``), checked at compose time and by ``OptimConfig`` itself."""
TRAINER = {
    **{f"optim.{k}": v for k, v in OPTIM.items()},
    "rank.lr": LR,
    "rank.weight_decay": DECAY,
    "model.rank": Bound(0, 4096),
    "model.hidden": Bound(1, 65_536),
    "model.edge_hidden": Bound(1, 65_536),
    "model.edge_rank": Bound(0, 4096),
    "objective.imitation_epochs": Bound(0, EPOCHS_MAX),
    "objective.rl_epochs": Bound(0, EPOCHS_MAX),
    "objective.group_size": Bound(1, 65_536),
    "objective.ppo_epochs": Bound(1, 1000),
    "run.seed": Bound(0, SEED_MAX),
    "run.eval_every": Bound(1, EPOCHS_MAX),
    "rank.epochs": Bound(0, EPOCHS_MAX),
    "rank.hidden": Bound(1, 65_536),
    "rank.negatives": Bound(0, 100_000),
    "rank.batch_size": Bound(1, 1_000_000),
    "rank.graphs_per_call": Bound(1, 1_000_000),
}
STREAMING = {  # the online walk's test-time learning (rl.walk.online.OnlineConfig)
    "online.rollouts": Bound(1, 65_536),
    "online.steps": Bound(1, 1000),
    "online.router_lr": Real(0, 10),
    "online.edge_lr": Real(0, 100),
    "online.max_grad_norm": Real(0, 1e6),
    "online.seed": Bound(0, SEED_MAX),
}
GROUP_BOUNDS: dict[str, dict[str, Bound | Real | OneOf]] = {
    "budget": BUDGET,
    "trainer": TRAINER,
    "streaming": STREAMING,
}
"""Shared config group -> key within it -> bound (every config holding the group)."""


def _split(prefix: str) -> dict[str, Bound]:
    """The fold split (:class:`rl.common.splits.FoldSplit`) at ``prefix``: ``k`` folds (3 graphs at least per
    fold), the shuffle's ``seed``, the fold ``fold`` and the folds ``folds`` (null: all) below ``k``."""
    below_k = f"{prefix}.k-1"
    table = {"k": Bound(3, 1000), "seed": Bound(0, SEED_MAX), "fold": Bound(0, below_k)}
    return _prefixed(prefix, {**table, "folds": Bound(0, below_k, each=True, null=True)})


def _prefixed(prefix: str, table: Mapping[str, Any]) -> dict[str, Any]:
    return {f"{prefix}.{k}": v for k, v in table.items()}


CONFIG_BOUNDS: dict[str, dict[str, Bound | Real | OneOf]] = {
    "train": {
        **_split("cv"),
        "node_sweep.levels": Bound(1, 1_000_000, each=True, null=True),
        "stats.n_boot": Bound(1, COUNT_MAX),
    },
    "gnn": {
        **_split("split"),
        "train.lr": LR,
        "train.weight_decay": DECAY,
        "train.hidden_dim": Bound(1, 65_536),
        "train.num_layers": Bound(1, 64),
        "train.epochs": Bound(1, EPOCHS_MAX),
        "train.query_batch": Bound(1, 1_000_000),
        "train.eval_chunk": Bound(1, 1_000_000),
        "train.seed": Bound(0, SEED_MAX),
        "threads": Bound(0, 4096, null=True),
    },
    "evaluate": {
        "seed": Bound(0, SEED_MAX),
        "graphs_part": OneOf(("train", "val", "test")),
        "sweep_tokens": Bound(1, 10**9, each=True, null=True),
        "stats.n_boot": Bound(1, COUNT_MAX),
        "protocol": OneOf(("batch", "streaming")),
        "streaming.ask_at": OneOf(("evidence", "end")),
        "streaming.feedback": OneOf(("none", "answer", "evidence", "judge")),
        "streaming.online.rollouts": Bound(2, 4096),
        "streaming.online.steps": Bound(0, 1000),
        "streaming.online.seed": Bound(0, SEED_MAX),
    },
    "benchmark": {
        "sizes": Bound(1, 10**9, each=True),
        "dim": Bound(1, 65_536),
        "seed": Bound(0, SEED_MAX),
        "num_queries": Bound(1, 1_000_000),
        "loop_queries": Bound(0, "num_queries"),
        "ppr_queries": Bound(0, "num_queries"),
        "gnn_queries": Bound(0, "num_queries"),
        "threads": Bound(0, 4096, null=True),
        "traversal_rounds": Bound(1, 10_000),
        "repeats": Bound(1, 10_000),
        "locomo.graphs": Bound(0, COUNT_MAX),
        "dataset_loop_queries": Bound(0, COUNT_MAX),
        "dataset_repeats": Bound(1, 10_000),
        "train.nodes": Bound(1, 10**8),
        "train.dim": Bound(1, 65_536),
        "train.batch": Bound(1, 1_000_000),
        "train.single": Bound(0, 1_000_000),
        "train.repeats": Bound(1, 10_000),
        **_prefixed("budget", BUDGET),
        "suite.sizes": Bound(1, 10**9, each=True),
        "suite.dim": Bound(1, 65_536),
        "suite.queries": Bound(1, 1_000_000),
        "suite.slow_queries": Bound(0, "suite.queries"),
        "suite.rounds": Bound(1, 10_000),
        "suite.serve_repeats": Bound(1, 10_000),
        "suite.index_threads": Bound(0, 4096, null=True),
    },
    "build_graph": {"plot_max_nodes": Bound(1, 100_000)},
    "serve": {
        "port": Bound(0, 65_535),
        "max_body_bytes": Bound(1, 2**31),
        "max_records": Bound(1, COUNT_MAX),
        "max_memories": Bound(1, 100_000),
        "threads": Bound(0, 4096, null=True),
    },
    "build_index": {"threads": Bound(0, 4096, null=True)},  # index.*: graphmem.index.vector_index.SPEC_RANGES
    "head_to_head": {
        **_split("cv"),
        "within.seed": Bound(0, SEED_MAX),
        "seed": Bound(0, SEED_MAX),
        "feedback.n_questions": Bound(1, COUNT_MAX),
        "feedback.max_tokens": Bound(1, 1_000_000),
        "exploration.rounds": Bound(1, 100_000),
        "exploration.thompson_seeds": Bound(0, SEED_MAX, each=True),
        "threads": Bound(0, 4096, null=True),
    },
    "memory_loop": {
        "n_questions": Bound(1, COUNT_MAX),
        "max_consecutive_failures": Bound(0, COUNT_MAX),
        "threads": Bound(0, 4096, null=True),
    },
    "relation_family": {
        "family.num_graphs": Bound(3, 1_000_000),
        "family.events": Bound(2, 1_000_000),
        "family.questions_per_graph": Bound(1, 1_000_000),
        "family.dim": Bound(1, 65_536),
        "seeds": Bound(0, SEED_MAX, each=True),
        **_split("split"),
        "n_boot": Bound(1, COUNT_MAX),
    },
    "writer": {
        **_split("split"),
        "writer.fragments_per_task": Bound(1, 100_000),
        "writer.max_steps": Bound(1, 10**7),
        "writer.batch_size": Bound(1, 100_000),
        "writer.num_generations": Bound(1, 10_000),
        "writer.max_completion_length": Bound(1, 1_000_000),
        "writer.num_iterations": Bound(1, 10_000),
        "writer.seed": Bound(0, SEED_MAX),
        "writer.learning_rate": LR,
        "sft.learning_rate": LR,
        "sft.max_steps": Bound(1, 10**7),  # TRL reads 0 as "one epoch"; sft.enabled=false skips the warm start
        "sft.batch_size": Bound(1, 100_000),
        "sft.eval_tasks": Bound(0, COUNT_MAX),
        "sft_tasks": Bound(0, COUNT_MAX),
        "max_tasks": Bound(1, COUNT_MAX),
        "threads": Bound(0, 4096, null=True),
    },
}
"""Entry point's config name (``configs/<name>.yaml``, or a study's own ``<name>.yaml`` beside its script)
-> dotted key -> bound."""
CONFIG_BOUNDS["self_evolve"] = {  # the writer's config, the reader's fine-tune (gnn's train.*) and the rounds
    **CONFIG_BOUNDS["writer"],
    **{key: bound for key, bound in CONFIG_BOUNDS["gnn"].items() if key.startswith("train.")},
    "writer.max_steps": Bound(0, 10**7),  # 0: the writer as it is rebuilds the graphs
    "rounds": Bound(1, 100_000),
    "rebuild_batch": Bound(1, 100_000),
}
CONFIG_BOUNDS["streaming"] = {
    **_split("cv"),
    "seed": Bound(0, SEED_MAX),
    "n_boot": Bound(1, COUNT_MAX),
    "threads": Bound(0, 4096, null=True),
}
CONFIG_BOUNDS["learning_curve"] = {  # each point is a train.py or train_gnn.py run, bounded by its own table
    "seeds": Bound(0, SEED_MAX, each=True),
    "fractions": Real(0, 1, lo_open=True, each=True),
    "n_boot": Bound(1, COUNT_MAX),
    "threads": Bound(0, 4096, null=True),
}
CONFIG_BOUNDS["writer_heldout"] = {  # the writer's config, its frozen reader (gnn's train.* under reader.*)
    **CONFIG_BOUNDS["writer"],
    **{f"reader.{key[6:]}": bound for key, bound in CONFIG_BOUNDS["gnn"].items() if key.startswith("train.")},
    "rebuild_batch": Bound(1, 100_000),
    "curve_window": Bound(1, 100_000),
}


def walk_bytes(cfg: Any) -> float:
    """Estimated bytes one sampled training walk allocates: ``262144 · max_nodes · (max_entries + max_nodes)
    / (12 · 18)``, i.e. 256 KiB at the default budget (12 nodes, 6 entries), measured as the peak
    resident growth of a policy-gradient epoch on HotpotQA passage graphs (the walk's candidate
    pool grows with the loaded nodes, and every step keeps its scores for the update)."""
    nodes, entries = _select(cfg, "budget.max_nodes"), _select(cfg, "budget.max_entries")
    nodes = nodes if _is_int(nodes) else 12
    entries = entries if _is_int(entries) else 6
    return 262_144 * max(nodes, 1) * (entries + max(nodes, 1)) / (12 * 18)


def synthetic_node_bytes(dim: Any, avg_degree: Any) -> float:
    """Estimated bytes per node of a synthetic benchmark graph: ``16 · dim + 192 · avg_degree + 512``
    (embeddings and their normalised copy, edge lists with features, token counts); 3.0 KB at dim 64
    and degree 8, as measured for ``make_synthetic_graph`` at 200,000 nodes. The policies' own
    working memory comes on top."""
    dim = dim if _is_int(dim) else 64
    degree = avg_degree if isinstance(avg_degree, (int, float)) and not isinstance(avg_degree, bool) else 8.0
    return 16 * dim + 192 * degree + 512


MEMORY_BOUNDS: dict[str, list[MemoryBound]] = {
    "trainer": [
        MemoryBound(
            "trainer.objective.group_size",
            lambda c: _int_or(_select(c, "trainer.optim.batch_size"), 1) * walk_bytes(c),
            "walks of one policy-gradient step (trainer.optim.batch_size questions x group_size walks, "
            "about {unit} each)",
            walk_bytes,
        ),
        MemoryBound(
            "trainer.optim.batch_size",
            lambda c: _int_or(_select(c, "trainer.objective.group_size"), 1) * walk_bytes(c),
            "walks of one training step (batch_size questions x trainer.objective.group_size walks, about {unit} each)",
            walk_bytes,
        ),
    ],
    "sizes": [
        MemoryBound(
            "sizes",
            lambda c: synthetic_node_bytes(_select(c, "dim"), _select(c, "avg_degree")),
            "a synthetic graph of that many nodes (about {unit} per node)",
        )
    ],
    "suite.sizes": [
        MemoryBound(
            "suite.sizes",
            lambda c: synthetic_node_bytes(_select(c, "suite.dim"), _select(c, "suite.avg_degree")),
            "a synthetic graph of that many nodes (about {unit} per node)",
        )
    ],
}
"""A key the config holds -> the memory checks that apply when it does."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation here (psutil's ``available``, else the free
    physical pages from ``os.sysconf``); ``None`` when neither says."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def bounds_for(config_name: str, cfg: Any) -> dict[str, Bound | Real | OneOf]:
    """Every bound of config ``config_name``: its own table and those of the shared groups it holds."""
    table: dict[str, Bound | Real | OneOf] = {}
    for group, bounds in GROUP_BOUNDS.items():
        if isinstance(_select(cfg, group), dict):
            table.update(_prefixed(group, bounds))
    table.update(CONFIG_BOUNDS.get(config_name, {}))
    return table


def check_bounds(config_name: str, cfg: Any, memory: int | None = None) -> None:
    """Check ``cfg`` (a composed config of ``configs/<config_name>.yaml``) against :func:`bounds_for`
    and :data:`MEMORY_BOUNDS` (``memory``: bytes available, default :func:`available_memory`);
    :class:`BoundsError` naming the first key out of range."""
    cfg = _plain(cfg)
    for key, bound in bounds_for(config_name, cfg).items():
        value = _select(cfg, key, missing := object())
        if value is not missing:
            bound.check(cfg, key, value)
    limit = available_memory() if memory is None else memory
    if limit is None:
        return
    for anchor, checks in MEMORY_BOUNDS.items():
        if _select(cfg, anchor) is not None:
            for check in checks:
                _check_memory(cfg, check, limit)


def _check_memory(cfg: Any, check: MemoryBound, limit: int) -> None:
    value, unit = _select(cfg, check.key), check.per_unit(cfg)
    for v in value if isinstance(value, list) else [value]:
        if _is_int(v) and v * unit > limit:
            most = max(int(limit // unit), 0)
            what = check.what.format(unit=_size((check.shown or check.per_unit)(cfg)))
            raise BoundsError(
                f"{check.key}={_show(v)}: {what} needs about {_size(v * unit)}, more than the {_size(limit)} "
                f"of memory available here; allowed here: at most {most:,}"
            )


def _plain(cfg: Any) -> Any:
    try:
        from omegaconf import DictConfig, OmegaConf
    except ImportError:  # pragma: no cover - hydra-core is a core dependency
        return cfg
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    return cfg


def _select(cfg: Any, key: str, default: Any = None) -> Any:
    node = cfg
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_or(value: Any, default: int) -> int:
    return value if _is_int(value) else default


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} bytes"
