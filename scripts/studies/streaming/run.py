"""Memories that evolve while they are used: each fold's held-out conversations streamed into live memories, the
policies that keep learning at test time paired with their frozen copies.

    python scripts/studies/streaming/run.py                           # LoCoMo, 5 folds (docs/streaming.md)
    python scripts/studies/streaming/run.py experiment=realtalk       # REALTALK

For each fold of the set's conversations (:func:`rl.common.splits.conversation_folds`, the folds of
``scripts/train.py``), with the fold's trained walk (``checkpoint``) and GNN reader (``gnn_checkpoint``):

1. **tune**, on the fold's validation conversations only: the online walk (:mod:`rl.walk.online`) is streamed
   (:mod:`graphmem.streaming`) with each setting of ``tune.grid`` (``OnlineConfig`` fields over
   ``streaming.online``) beside the frozen walk; the setting with the largest mean recall difference over the
   validation questions is kept (the first among equals);
2. **runs**, on the fold's test conversations: each entry of ``runs`` streams them with its ``ask_at`` and
   ``feedback``; each policy that learns runs online and frozen (``<name>_frozen``), and each of the run's
   ``variants`` is the kept setting with other parts (counters, edges, router), paired with the frozen walk.

The rows of all folds are pooled per run: each policy's evidence recall over all questions and over the second half
of each stream; paired per question (95% percentile bootstrap CI, paired t-test) with ``reference`` and, for each
online policy, with its frozen copy (all questions and ``second_half``); how far the learners moved (router drift,
residual rows, counters) and how often their served lists differ from the frozen ones; cost (feedback steps per
second, memory records, edges and database bytes); recall by place in the stream. Written to ``out``;
``plot`` draws the first run's recall by place; ``docs/streaming.md`` is rendered from ``out`` (``page.py``).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config import cli
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.eval.metrics import in_overall
from graphmem.eval.plots import plot_recall_vs_position
from graphmem.eval.stats import compare_policies
from graphmem.index.embed import make_encoder
from graphmem.policies import make_policy
from graphmem.store.io import write_json
from graphmem.streaming import SECOND_HALF, StreamConfig, position_curve, run_streaming, second_half_rows
from rl.common.splits import conversation_folds
from rl.walk.online import FROZEN, OnlineConfig, stream_policies

log = logging.getLogger(__name__)


@dataclass
class RunSpec:
    """One streaming run over the test conversations (an entry of ``runs`` in ``streaming.yaml``)."""

    name: str
    ask_at: str = "evidence"
    feedback: str = "none"
    variants: dict[str, Any] = field(default_factory=dict)
    """online walks beside ``router``: name -> OnlineConfig fields over the kept setting (e.g. one part alone)"""
    policies: list[str] | None = None
    """the policies of this run (null: the study's)"""
    judge: dict[str, Any] = field(default_factory=dict)
    """feedback=judge: the judge's LLM settings (graphmem.llm.client.LLMConfig fields)"""


@dataclass
class TuneSpec:
    """How the online walk's setting is chosen on each fold's validation conversations (``tune``)."""

    feedback: str = "answer"
    ask_at: str = "evidence"
    grid: list[dict[str, Any]] = field(default_factory=list)
    """candidate settings: OnlineConfig fields over streaming.online (empty: streaming.online as it is)"""


@dataclass
class Fold:
    """What one fold needs: its split, the set's questions over its conversations, its policies."""

    index: int
    split: Any
    policies: dict[str, Any]
    online: OnlineConfig
    tuning: list[dict[str, Any]] = field(default_factory=list)


# ---------------------------------------------------------------------------- per fold
def fold_policies(cfg: DictConfig, fold: int, names: list[str]) -> dict[str, Any]:
    """The policies ``names`` of fold ``fold``: the router and GNN reader from their fold's checkpoints (a GNN
    checkpoint that does not exist leaves the reader out), the others as ``configs/policy`` makes them."""
    out = {}
    for name in names:
        config = cli.policy_config(name)
        if name in ("router", "gnn"):
            path = cfg.checkpoint if name == "router" else cfg.gnn_checkpoint
            path = None if path is None else Path(str(path).replace("{fold}", str(fold)))
            if path is None or not path.is_file():
                if name == "router":
                    raise FileNotFoundError(f"fold {fold}: no trained walk at {path} (scripts/train.py)")
                log.warning("fold %d: no GNN reader at %s: left out", fold, path)
                continue
            config.update(checkpoint=str(path), device="cpu")
        out[name] = make_policy(config)
    return out


def stream(cfg: DictConfig, gs, names, policies, protocol: StreamConfig):
    """One :func:`run_streaming` over the conversations ``names`` of ``gs``."""
    part = cli.restrict_graphs(gs, list(names))
    settings = gs.provenance.get("graph") or plain(cfg.graph)
    encoder = make_encoder(settings.get("encoder", "minilm"))
    budget = typed(cfg.budget, Budget)
    return run_streaming(part, policies, budget, protocol, encoder=encoder, graph_config=settings)


def tune(cfg: DictConfig, gs, fold: Fold, spec: TuneSpec, base: OnlineConfig) -> None:
    """Choose ``fold.online`` on the fold's validation conversations (module docstring); the table goes to
    ``fold.tuning``."""
    grid = spec.grid or [{}]
    router = {"router": fold.policies["router"]}
    variants = {f"setting{i}": overrides for i, overrides in enumerate(grid)}
    budget = typed(cfg.budget, Budget)
    policies, _ = stream_policies(router, spec.feedback, base, budget, variants)
    policies = [p for p in policies if p.name != "router"]  # the settings and the frozen walk
    protocol = StreamConfig(ask_at=spec.ask_at, feedback=spec.feedback)
    run = stream(cfg, gs, fold.split.val, policies, protocol)
    rows = {r.policy: r.rows for r in run.results}
    best, best_diff = 0, float("-inf")
    for i, overrides in enumerate(grid):
        diff = paired_rows(rows, f"setting{i}", "router" + FROZEN, cfg)
        late = paired_rows(rows, f"setting{i}", "router" + FROZEN, cfg, SECOND_HALF)
        fold.tuning.append({"setting": overrides, "all": diff, SECOND_HALF: late})
        if diff is not None and diff["mean_diff"] > best_diff:
            best, best_diff = i, diff["mean_diff"]
    fold.online = dataclasses.replace(base, **grid[best])
    fold.tuning[best]["kept"] = True


def paired_rows(
    rows, policy: str, reference: str, cfg: DictConfig, group: str = "overall", metric: str = "evidence_recall"
) -> dict | None:
    """``metric`` of ``policy`` against ``reference`` on their rows (``group``: all, or the second half)."""
    pick = second_half_rows if group == SECOND_HALF else list
    got = compare_policies(
        {policy: pick(rows[policy]), reference: pick(rows[reference])},
        reference,
        (metric,),
        n_boot=int(cfg.n_boot),
        seed=int(cfg.seed),
        group=group,
    )
    return got[0].to_json() if got else None


def run_fold(cfg: DictConfig, gs, fold: Fold, spec: RunSpec) -> dict[str, Any]:
    """One run on the fold's test conversations: rows (tagged with the fold), learners' cost, memories."""
    names = spec.policies or list(cfg.policies)
    chosen = {n: p for n, p in fold.policies.items() if n in names}
    budget = typed(cfg.budget, Budget)
    policies, pairs = stream_policies(chosen, spec.feedback, fold.online, budget, spec.variants or None)
    protocol = StreamConfig(ask_at=spec.ask_at, feedback=spec.feedback, judge=dict(spec.judge))
    t0 = time.perf_counter()
    run = stream(cfg, gs, fold.split.test, policies, protocol)
    rows = {
        r.policy: [arrival({**row, "fold": fold.index}, gs.graphs[row["graph"]]) for row in r.rows] for r in run.results
    }
    memory = [{**m, "fold": fold.index} for m in run.memory]
    return {
        "rows": rows,
        "learning": run.learning,
        "memory": memory,
        "pairs": pairs,
        "judge": run.judge,
        "seconds": time.perf_counter() - t0,
    }


NEWEST, EARLIER = "newest_evidence_hit", "earlier_evidence_recall"
"""a row's recall split by arrival: whether its last-arriving gold record was served (under ``ask_at=evidence`` the
newest record in the memory), and the recall of its other gold records (questions with two or more)"""


def arrival(row: dict[str, Any], graph) -> dict[str, Any]:
    """``row`` with :data:`NEWEST` and :data:`EARLIER` among its metrics (``None`` where undefined), read from its
    served list and gold evidence after it was scored."""
    gold = [e for e in dict.fromkeys(row["gold_evidence"]) if graph.has_node(e)]
    served = set(row["ranked"])
    newest = max(gold, key=graph.index_of) if gold else None
    earlier = [e for e in gold if e != newest]
    metrics = {
        NEWEST: None if newest is None else float(newest in served),
        EARLIER: len(served & set(earlier)) / len(earlier) if earlier else None,
    }
    return {**row, "metrics": {**row["metrics"], **metrics}}


# ---------------------------------------------------------------------------- pooled over folds
def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def summary(rows: list[dict]) -> dict[str, Any]:
    """Mean evidence recall over the overall group's questions, all and in the second half of their stream, and
    split by the evidence's arrival (:func:`arrival`)."""
    scored = [r for r in rows if in_overall(r["category"]) and r["metrics"]["evidence_recall"] is not None]
    late = [r for r in scored if r["second_half"]]
    recall = lambda rs: mean(r["metrics"]["evidence_recall"] for r in rs)  # noqa: E731
    tokens = mean(r["metrics"]["loaded_tokens"] for r in scored)
    return {
        "n": len(scored),
        "recall": recall(scored),
        "n_second_half": len(late),
        SECOND_HALF: recall(late),
        "loaded_tokens": tokens,
        **{m: mean(r["metrics"].get(m) for r in scored) for m in (NEWEST, EARLIER)},
    }


def moved(rows: dict[str, list[dict]], memory: list[dict], pairs: dict[str, str]) -> dict[str, Any]:
    """Per online policy: the share of questions whose loaded set differs from its frozen copy's, and the means over
    streams of what its learner reported at each stream's end (:meth:`graphmem.streaming.Learner.finish`)."""
    out = {}
    for online, frozen in pairs.items():
        mine = {(r["fold"], r["qid"]): set(r["loaded"]) for r in rows[online]}
        other = {(r["fold"], r["qid"]): set(r["loaded"]) for r in rows[frozen]}
        ends = [m for m in memory if m["policy"] == online]
        keys = sorted({k for m in ends for k in m} - {"graph", "policy", "fold", "add_seconds"})
        out[online] = {
            "questions": len(mine),
            "served_differently": sum(mine[k] != other[k] for k in mine) / max(len(mine), 1),
            **{k: mean(m.get(k) for m in ends) for k in keys},
        }
    return out


def cost(parts: list[dict]) -> dict[str, dict[str, float]]:
    """Per learner: feedback steps, seconds, steps per second and policy-gradient steps over all folds."""
    out: dict[str, dict[str, float]] = {}
    for part in parts:
        for name, c in part["learning"].items():
            t = out.setdefault(name, {})
            for key, value in c.items():
                if key != "steps_per_s" and value is not None:
                    t[key] = t.get(key, 0.0) + value
    for t in out.values():
        t["steps_per_s"] = t["steps"] / t["seconds"] if t.get("seconds") else None
    return out


def growth(memory: list[dict]) -> dict[str, dict[str, float]]:
    """Per policy's memory: mean records, edges, feedback entries and database megabytes at a stream's end, and the
    seconds per record spent adding (all the run's memories together)."""
    out = {}
    for name in dict.fromkeys(m["policy"] for m in memory):
        ms = [m for m in memory if m["policy"] == name]
        out[name] = {
            "streams": len(ms),
            "records": mean(m["records"] for m in ms),
            "edges": mean(m["edges"] for m in ms),
            "feedback": mean(m["feedback"] for m in ms),
            "megabytes": mean(m["bytes"] / 1e6 for m in ms),
            "add_ms_per_record": 1000 * sum(m["add_seconds"] for m in ms) / max(sum(m["records"] for m in ms), 1),
        }
    return out


def pooled(cfg: DictConfig, spec: RunSpec, parts: list[dict]) -> dict[str, Any]:
    """One run's figures over all folds (module docstring)."""
    rows = {p: [r for part in parts for r in part["rows"][p]] for p in parts[0]["rows"]}
    pairs = parts[0]["pairs"]
    memory = [m for part in parts for m in part["memory"]]
    paired = [paired_rows(rows, p, cfg.reference, cfg) for p in rows if p != cfg.reference and cfg.reference in rows]
    for online, frozen in pairs.items():
        paired += [paired_rows(rows, online, frozen, cfg), paired_rows(rows, online, frozen, cfg, SECOND_HALF)]
    return {
        "run": dataclasses.asdict(spec),
        "summary": {p: summary(rs) for p, rs in rows.items()},
        "paired": [c for c in paired if c is not None],
        "pairs": pairs,
        "moved": moved(rows, memory, pairs),
        "arrival": {
            online: {m: paired_rows(rows, online, frozen, cfg, metric=m) for m in (NEWEST, EARLIER)}
            for online, frozen in pairs.items()
        },
        "learning": cost(parts),
        "memory": growth(memory),
        "judge": [part["judge"] for part in parts if part["judge"]],
        "position": {p: position_curve(rs) for p, rs in rows.items()},
        "seconds": sum(part["seconds"] for part in parts),
    }


# ---------------------------------------------------------------------------- the study
def run(cfg: DictConfig) -> dict[str, Any]:
    """Every fold's tuning and runs, pooled per run; writes ``out`` and ``plot``."""
    cli.set_threads(cfg)
    t0 = time.perf_counter()
    gs = cli.load_graphset(cfg)
    specs = [RunSpec(**OmegaConf.to_container(r, resolve=True)) for r in cfg.runs]
    tuning = TuneSpec(**plain(cfg.tune))
    base = typed(cfg.streaming.online, OnlineConfig)
    splits = conversation_folds(sorted(gs.graphs), cfg.cv.k, cfg.cv.seed, cfg.cv.val_fraction)
    chosen = range(cfg.cv.k) if cfg.cv.folds is None else list(cfg.cv.folds)
    folds, parts = [], {s.name: [] for s in specs}
    for k in chosen:
        fold = Fold(k, splits[k], fold_policies(cfg, k, list(cfg.policies)), base)
        tune(cfg, gs, fold, tuning, base)
        log.info("fold %d: kept %s", k, [t["setting"] for t in fold.tuning if t.get("kept")])
        for spec in specs:
            parts[spec.name].append(run_fold(cfg, gs, fold, spec))
            log.info("fold %d run %s: %.0f s", k, spec.name, parts[spec.name][-1]["seconds"])
        folds.append(fold)
    payload = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "dataset": gs.dataset,
        "graphset": gs.provenance.get("path"),
        "encoder": gs.provenance.get("encoder"),
        "budget": plain(cfg.budget),
        "reference": cfg.reference,
        "online": dataclasses.asdict(base),
        "folds": [fold_record(f) for f in folds],
        "runs": {spec.name: pooled(cfg, spec, parts[spec.name]) for spec in specs},
        "wall_s": time.perf_counter() - t0,
    }
    write_json(Path(cfg.out), payload, indent=2)
    first = payload["runs"][specs[0].name]
    plot_recall_vs_position(first["position"], Path(cfg.plot), title=f"{gs.dataset}: recall by place in the stream")
    log.info("written to %s", cfg.out)
    return payload


def fold_record(fold: Fold) -> dict[str, Any]:
    """A fold's conversations, the tuning table and the online setting kept."""
    s = fold.split
    return {
        "fold": fold.index,
        "train": list(s.train),
        "val": list(s.val),
        "test": list(s.test),
        "policies": sorted(fold.policies),
        "tuning": fold.tuning,
        "online": dataclasses.asdict(fold.online),
    }


if __name__ == "__main__":
    main("streaming", run)
