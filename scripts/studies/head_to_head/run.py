"""Beta evidence learning head to head with the learned router: same graphs, questions and budget.

    python scripts/studies/head_to_head/run.py experiment=beta_vs_router

Three traversal policies are evaluated on the same held-out questions under one budget:

* ``beta_bfs_uniform`` — Algorithm 1 with every counter at ``S = F = 0`` (all weights 1/2);
* ``beta_bfs_learned`` — Algorithm 1 after oracle evidence learning (:mod:`feedback`) on
  copies of the graphs, one sequential pass over the training questions;
* ``router`` — the learned walk (:class:`rl.walk.trainer.WalkTrainer`, the ``trainer`` config:
  imitation warm start, then REINFORCE; ``trainer.objective.rl=hage_mdp`` for HAGE's MDP) trained
  on the same training questions, selected on the validation questions.

Two protocols:

* ``conversation`` — train / validation / test conversations (:func:`rl.common.splits.conversation_folds`).
  Beta counters live on edges of the training graphs, so nothing learned reaches a test graph:
  ``beta_bfs_learned`` equals ``beta_bfs_uniform`` there by construction (reported, with the
  counter mass on test graphs as a check).
* ``within`` — questions split inside each conversation (:func:`rl.common.splits.within_conversation_split`):
  training questions of a conversation update that conversation's counters, its held-out
  questions are evaluated.

Feedback sources (``feedback.sources``, e.g. ``[oracle, llm]``): on one graph (``feedback.graph``,
default the first by name) and the first ``feedback.n_questions`` of its shuffled ``within``
training questions, Beta BFS learns from the oracle Reflector and from the LLM Reflector
(:class:`feedback.LLMReflector`, ``llm`` config), each on its own copy of the graph
with the counters at zero; evidence recall on that graph's held-out questions is reported before
and after, with the number of counter updates and labels.

Exploration (``exploration.rankings``, e.g. ``[mean, ucb, thompson]``): on the ``within`` split,
Beta BFS learners that rank by the posterior mean, a UCB or a Thompson draw learn from the same
shuffled stream of training questions in ``exploration.rounds`` chunks
(:mod:`exploration`); per round the recall of the retrievals they served and the
held-out recall with the posterior mean, paired against ``mean``. Writes ``exploration.json`` and
``exploration_rounds.png`` in ``out_dir``.

Learning curves: with ``N`` shuffled training questions (one order shared by both learners), the
learners see the first ``round(f · N)`` for each ``f`` in ``fractions``; Beta learns incrementally,
the router is retrained from scratch on each prefix (``f = 0``: its initialisation, the cosine walk). Writes
``results.json``, ``results.md`` and ``recall_vs_examples.png`` in ``out_dir``. Tracked
(:mod:`graphmem.tracking`) as one ``train`` run per (protocol, learner), its test figures drawn
against the training examples seen, and a ``summary`` run holding the table and the results artifact.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import hydra
import torch
from exploration import compare_rankings, make_learners, plot_rounds, round_bounds
from feedback import EvidenceStats, LLMReflector, OracleConfig, learn_evidence
from omegaconf import DictConfig

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import METRICS, graphset_location, load_graphset, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.errors import NothingMeasuredError
from graphmem.eval.harness import evaluate_policy
from graphmem.eval.stats import compare_policies
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.policies import make_policy
from graphmem.store.graphset import GraphSet
from graphmem.store.io import atomic_write, write_json
from graphmem.tracking import (
    describe_artifact,
    experiment_group,
    graphset_artifact,
    make_tracker,
)
from rl.common.splits import conversation_folds, within_conversation_split
from rl.walk.folds import train_walk
from rl.walk.trainer import TrainConfig

log = logging.getLogger(__name__)
PAIRED_LOG = ("policy", "round", "mean_diff", "ci_low", "ci_high", "n")


def pick(gs: GraphSet, qids) -> tuple[list, torch.Tensor]:
    """Questions with ids in ``qids`` (in graph-set order) and their embedding rows."""
    keep = set(qids)
    idx = [i for i, q in enumerate(gs.questions) if q.qid in keep]
    return [gs.questions[i] for i in idx], gs.query_embeddings[idx]


def protocol_parts(gs: GraphSet, name: str, cfg: DictConfig) -> dict[str, tuple[list, torch.Tensor]]:
    """train / val / test questions (with embeddings) of one protocol."""
    if name == "conversation":
        split = conversation_folds(list(gs.graphs), k=cfg.cv.k, seed=cfg.cv.seed, val_fraction=cfg.cv.val_fraction)[
            cfg.cv.fold
        ]
        return {
            part: pick(gs, [q.qid for q in gs.questions if q.graph in set(getattr(split, part))])
            for part in ("train", "val", "test")
        }
    if name == "within":
        s = within_conversation_split(
            [q.qid for q in gs.questions],
            [q.graph for q in gs.questions],
            test_fraction=cfg.within.test_fraction,
            val_fraction=cfg.within.val_fraction,
            seed=cfg.within.seed,
        )
        return {"train": pick(gs, s.train), "val": pick(gs, s.val), "test": pick(gs, s.test)}
    raise ValueError(f"unknown protocol {name!r}: use conversation or within")


def counter_mass(graphs: dict, names) -> float:
    """Σ (S + F) over the graphs ``names``."""
    return float(sum((graphs[n].S.sum() + graphs[n].F.sum()).item() for n in names))


def evaluate(
    policy,
    gs: GraphSet,
    graphs: dict,
    questions: list,
    embeddings: torch.Tensor,
    budget: Budget,
    rows: list | None = None,
) -> dict[str, Any]:
    """The policy's overall metrics on ``questions``; its per-question rows are put in ``rows`` when given."""
    view = GraphSet(gs.dataset, graphs, questions, embeddings, gs.report)
    result = evaluate_policy(policy, view, budget, progress=False)
    if rows is not None:
        rows[:] = result.rows
    return {m: result.overall.get(m) for m in METRICS}


def run_protocol(name: str, gs: GraphSet, cfg: DictConfig, budget: Budget) -> dict[str, Any]:
    """One protocol: Beta BFS (uniform, then learning evidence) and the router trained on the same shuffled
    prefixes of the training questions, their test curves, and the router paired against both Beta variants."""
    parts = protocol_parts(gs, name, cfg)
    (train_q, train_e), (val_q, val_e), (test_q, test_e) = parts["train"], parts["val"], parts["test"]
    order = list(range(len(train_q)))
    random.Random(cfg.seed).shuffle(order)  # one order of training examples for both learners
    train_q, train_e = [train_q[i] for i in order], train_e[order]
    counts = sorted({round(f * len(train_q)) for f in cfg.fractions})
    test_graphs = sorted({q.graph for q in test_q})
    log.info(
        "[%s] train %d / val %d / test %d questions; test graphs %s; checkpoints %s",
        name,
        len(train_q),
        len(val_q),
        len(test_q),
        test_graphs,
        counts,
    )
    test_rows = {"beta_bfs_uniform": [], "beta_bfs_learned": []}
    test = (test_q, test_e, test_graphs)
    stats, curve_beta = beta_curve(name, gs, cfg, budget, (train_q, train_e), test, counts, test_rows)
    curve_router = router_curve(name, gs, cfg, budget, (train_q, train_e, val_q, val_e), test, counts, test_rows)
    table = {"beta_bfs_uniform": curve_beta[0], "beta_bfs_learned": curve_beta[-1], "router": curve_router[-1]}
    return {
        "protocol": name,
        "sizes": {k: len(v[0]) for k, v in parts.items()},
        "test_graphs": test_graphs,
        "evidence": stats.to_json(),
        "table": table,
        "paired": router_vs_beta(name, test_rows),
        "curves": {"beta_bfs": curve_beta, "router": curve_router},
    }


def beta_curve(name: str, gs: GraphSet, cfg: DictConfig, budget: Budget, train, test, counts, test_rows):
    """Beta BFS on copies of the graphs with zeroed counters, learning evidence from each further prefix of
    ``train`` (oracle feedback) and tested after each; ``(evidence stats, curve)``. Its test rows at 0
    examples go to ``test_rows["beta_bfs_uniform"]``, the last ones to ``test_rows["beta_bfs_learned"]``."""
    (train_q, train_e), (test_q, test_e, test_graphs) = train, test
    graphs = {n: g.copy() for n, g in gs.graphs.items()}  # the saved graph set is never touched
    for g in graphs.values():
        g.S.zero_(), g.F.zero_(), g.invalidate()
    beta = make_policy("beta_bfs", entry_selector=cfg.entry_selector)
    oracle = typed(cfg.oracle, OracleConfig)
    stats, seen, curve_beta = EvidenceStats(), 0, []
    for n in counts:
        t0 = time.perf_counter()
        learn_evidence(graphs, train_q[seen:n], train_e[seen:n], beta, budget, oracle, stats)
        seen = n
        row = {
            "examples": n,
            **evaluate(beta, gs, graphs, test_q, test_e, budget, test_rows["beta_bfs_learned"]),
            "test_counter_mass": counter_mass(graphs, test_graphs),
            "seconds": time.perf_counter() - t0,
        }
        curve_beta.append(row)
        if n == 0:
            test_rows["beta_bfs_uniform"] = list(test_rows["beta_bfs_learned"])
        log.info(
            "[%s] beta_bfs after %5d examples: recall %.4f (counter mass on test graphs %.1f)",
            name,
            n,
            row["evidence_recall"],
            row["test_counter_mass"],
        )
    return stats, curve_beta


def router_curve(name: str, gs: GraphSet, cfg: DictConfig, budget: Budget, data, test, counts, test_rows):
    """The router trained on each prefix of the training questions (0: its initialisation only) and tested;
    the curve, its last test rows in ``test_rows["router"]``."""
    (train_q, train_e, val_q, val_e), (test_q, test_e, _) = data, test
    base = plain(cfg.trainer)
    selector = plain(cfg.policy)["entry_selector"]
    untrained = {"objective": {"imitation_epochs": 0, "rl_epochs": 0}}
    curve_router, test_rows["router"] = [], []
    for n in counts:
        t0 = time.perf_counter()
        tc = TrainConfig.merged(base, {} if n else untrained, checkpoint_dir="", resume=False)
        q, e = (train_q[:n], train_e[:n]) if n else (train_q, train_e)  # n = 0: initialisation only
        trained = train_walk(tc, gs.graphs, (q, e, val_q, val_e), budget, selector)
        router, result = trained.policy(selector), trained.result
        row = {
            "examples": n,
            **evaluate(router, gs, gs.graphs, test_q, test_e, budget, test_rows["router"]),
            "best_epoch": result.best_epoch,
            "val_return": result.best_score,
            "seconds": time.perf_counter() - t0,
        }
        curve_router.append(row)
        log.info("[%s] router after %5d examples: recall %.4f (%.0fs)", name, n, row["evidence_recall"], row["seconds"])
    return curve_router


def router_vs_beta(name: str, test_rows: dict[str, list]) -> list[dict[str, Any]]:
    """The router's evidence recall paired per test question against each Beta BFS variant (router minus it)."""
    paired = [
        dataclasses.asdict(c)
        for ref in ("beta_bfs_uniform", "beta_bfs_learned")
        for c in compare_policies({ref: test_rows[ref], "router": test_rows["router"]}, ref, ["evidence_recall"])
    ]
    for c in paired:
        log.info(
            "[%s] router - %s: evidence recall %+.4f [%.4f, %.4f] (n = %d)",
            name,
            c["reference"],
            c["mean_diff"],
            c["ci_low"],
            c["ci_high"],
            c["n"],
        )
    return paired


def run_feedback_sources(gs: GraphSet, cfg: DictConfig, budget: Budget) -> dict[str, Any]:
    """Oracle vs LLM Reflector as Beta BFS's feedback, same questions and graph (module docstring)."""
    fb = cfg.feedback
    name = fb.graph or sorted(gs.graphs)[0]
    parts = protocol_parts(gs, "within", cfg)
    train_q, train_e = parts["train"]
    test_q, test_e = parts["test"]
    order = [i for i, q in enumerate(train_q) if q.graph == name]
    random.Random(cfg.seed).shuffle(order)
    order = order[: fb.n_questions]
    keep = [i for i, q in enumerate(test_q) if q.graph == name]
    questions, embeddings = [train_q[i] for i in order], train_e[order]
    test_q, test_e = [test_q[i] for i in keep], test_e[keep]
    beta = make_policy("beta_bfs", entry_selector=cfg.entry_selector)
    rows: dict[str, Any] = {}
    for source in fb.sources:
        graph = gs.graphs[name].copy()
        graph.S.zero_(), graph.F.zero_(), graph.invalidate()
        before = evaluate(beta, gs, {name: graph}, test_q, test_e, budget)
        reflector, client = None, None
        if source == "llm":
            llm_cfg = plain(cfg.llm)
            if llm_cfg.get("cache_dir"):
                llm_cfg["cache_dir"] = hydra.utils.to_absolute_path(llm_cfg["cache_dir"])
            client = LLMClient(LLMConfig.from_dict(llm_cfg))
            reflector = LLMReflector(client, max_tokens=fb.max_tokens)
        elif source != "oracle":
            raise ValueError(f"feedback.sources: unknown source {source!r}; use oracle or llm")
        t0 = time.perf_counter()
        oracle = typed(cfg.oracle, OracleConfig)
        stats = learn_evidence({name: graph}, questions, embeddings, beta, budget, oracle, reflector=reflector)
        after = evaluate(beta, gs, {name: graph}, test_q, test_e, budget)
        rows[source] = {
            "recall_before": before["evidence_recall"],
            "recall_after": after["evidence_recall"],
            "counter_updates": stats.edges_updated,
            "evidence": stats.to_json(),
            "counter_mass": counter_mass({name: graph}, [name]),
            "seconds": round(time.perf_counter() - t0, 1),
        }
        if client is not None:
            if failed := client.all_calls_failed():  # counters never moved: before = after is no measurement
                raise NothingMeasuredError(f"feedback source llm: {failed}")
            rows[source]["llm"] = {"model": client.model, "local_substitute": client.is_local_substitute}
            rows[source]["llm_failures"] = client.failure_summary()["by_role_kind"]
        log.info(
            "[feedback] %s: recall %.4f -> %.4f, %d counter updates, labels %s (%.0fs)",
            source,
            before["evidence_recall"],
            after["evidence_recall"],
            stats.edges_updated,
            stats.labels,
            rows[source]["seconds"],
        )
    return {"graph": name, "train_questions": len(questions), "test_questions": len(test_q), "sources": rows}


def run_exploration(gs: GraphSet, cfg: DictConfig, budget: Budget, out: Path) -> dict[str, Any]:
    """Mean vs UCB vs Thompson Beta BFS on one feedback stream (module docstring)."""
    ex, t0 = cfg.exploration, time.perf_counter()
    parts = protocol_parts(gs, "within", cfg)
    (train_q, train_e), heldout = parts["train"], parts["test"]
    order = list(range(len(train_q)))
    random.Random(cfg.seed).shuffle(order)  # the stream: one order for every learner

    def progress(name: str, run: dict) -> None:
        log.info("[exploration] %s: labels %s (%.0fs)", name, run["evidence"]["labels"], run["seconds"])

    stream = ([train_q[i] for i in order], train_e[order])
    oracle = typed(cfg.oracle, OracleConfig)
    kwargs = {"rounds": ex.rounds, "thompson_seeds": list(ex.thompson_seeds), "ucb_c": list(ex.ucb_c), "oracle": oracle}
    result = compare_rankings(
        gs.graphs,
        stream,
        heldout,
        budget,
        gs.dataset,
        list(ex.rankings),
        entry_selector=cfg.entry_selector,
        log=progress,
        **kwargs,
    )
    for c in result["paired"]["served"] + result["paired"]["heldout"]:
        log.info("[exploration] %s - mean, round %s: %+.4f [%+.4f, %+.4f] (n = %d)", *(c[k] for k in PAIRED_LOG))
    payload = {
        "command": " ".join(["python scripts/studies/head_to_head/run.py", *map(shlex.quote, sys.argv[1:])]),
        "dataset": gs.dataset,
        "protocol": "within",
        "budget": dataclasses.asdict(budget),
        "wall_seconds": round(time.perf_counter() - t0),
        **result,
    }
    write_json(out / "exploration.json", payload)
    plot_rounds(payload, out / "exploration_rounds.png")
    return payload


def feedback_markdown(fb: dict[str, Any]) -> str:
    lines = [
        f"Feedback sources on {fb['graph']}: {fb['train_questions']} training / {fb['test_questions']} test questions",
        "",
        "| source | recall before | recall after | counter updates | helpful | harmful | neutral | failed calls |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for source, r in fb["sources"].items():
        lab = r["evidence"]["labels"]
        lines.append(
            f"| {source} | {r['recall_before']:.4f} | {r['recall_after']:.4f} | {r['counter_updates']} | "
            f"{lab['helpful']} | {lab['harmful']} | {lab['neutral']} | {r['evidence']['failed_calls']} |"
        )
    return "\n".join(lines)


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| protocol | policy | train examples | " + " | ".join(METRICS) + " |",
        "|---|---|---|" + "---|" * len(METRICS),
    ]
    for r in results:
        for policy, row in r["table"].items():
            n = 0 if policy == "beta_bfs_uniform" else row["examples"]
            cells = [f"{row[m]:.4f}" if m != "loaded_tokens" else f"{row[m]:.0f}" for m in METRICS]
            lines.append(f"| {r['protocol']} | {policy} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.8), squeeze=False)
    for ax, r in zip(axes[0], results):
        for policy, style in (("beta_bfs", "o-"), ("router", "s--")):
            curve = r["curves"][policy]
            ax.plot([c["examples"] for c in curve], [c["evidence_recall"] for c in curve], style, label=policy)
        ax.set_title(f"{r['protocol']} split ({r['sizes']['test']} test questions)")
        ax.set_xlabel("training examples seen")
        ax.set_ylabel("evidence recall (test)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    plt.close(fig)


def run(cfg: DictConfig) -> dict[str, Any]:
    out = Path(hydra.utils.to_absolute_path(cfg.out_dir))
    out.mkdir(parents=True, exist_ok=True)
    set_threads(cfg)
    budget = typed(cfg.budget, Budget)
    if (ex := cfg.exploration).rankings:  # the exploration settings are checked before anything is loaded
        make_learners(list(ex.rankings), list(ex.thompson_seeds), list(ex.ucb_c)), round_bounds(0, ex.rounds)
    gs = load_graphset(cfg)
    feedback = run_feedback_sources(gs, cfg, budget) if cfg.feedback.sources else None
    exploration = run_exploration(gs, cfg, budget, out) if cfg.exploration.rankings else None
    results = [run_protocol(p, gs, cfg, budget) for p in cfg.protocols]
    table = markdown(results) if results else ""
    if feedback is not None:
        table = (table + "\n\n" if table else "") + feedback_markdown(feedback)
    log.info("%s: budget %s\n%s", gs.dataset, dataclasses.asdict(budget), table)
    payload = {
        "dataset": gs.dataset,
        "budget": dataclasses.asdict(budget),
        "results": results,
        "feedback_sources": feedback,
        "exploration": exploration,
        "config": plain(cfg),
    }
    write_json(out / "results.json", payload)
    atomic_write(out / "results.md", lambda tmp: tmp.write_text(table + "\n"))
    if results:
        plot(results, out / "recall_vs_examples.png")
    track(cfg, gs, results, feedback, out)
    log.info("results written to %s", out)
    return payload


def track(
    cfg: DictConfig, gs: GraphSet, results: list[dict[str, Any]], feedback: dict[str, Any] | None, out: Path
) -> None:
    """One ``train`` run per (protocol, learner) with its test curve against the examples seen, then a
    ``summary`` run with the tables (and the feedback-source comparison) and the results artifact;
    all in one group."""
    group = experiment_group("train", gs.dataset)
    location = graphset_location(cfg)
    graphset = graphset_artifact(location) if (location / "manifest.json").is_file() else None
    for r in results:
        for learner, curve in r["curves"].items():
            name = f"{r['protocol']}-{learner}"
            with make_tracker(
                cfg.logger,
                {**plain(cfg), "protocol": r["protocol"]},
                out,
                name=name,
                job_type="train",
                group=group,
            ) as tracker:
                if graphset is not None:
                    tracker.use_artifact(graphset)
                tracker.define_metric("examples")
                tracker.define_metric("test/*", step_metric="examples")
                for row in curve:
                    tracker.log({"examples": row["examples"], **{f"test/{m}": row[m] for m in METRICS}})
                tracker.update_summary(
                    {f"test/{m}": curve[-1][m] for m in METRICS} | {"examples": curve[-1]["examples"]}
                )
    with make_tracker(cfg.logger, cfg, out, name="summary", job_type="evaluate", group=group) as tracker:
        rows = [
            [r["protocol"], p, row["examples"], *(row[m] for m in METRICS)]
            for r in results
            for p, row in r["table"].items()
        ]
        if rows:
            tracker.log_table("head_to_head", ["protocol", "policy", "examples", *METRICS], rows)
        if feedback is not None:
            columns = ["source", "recall_before", "recall_after", "counter_updates"]
            tracker.log_table(
                "feedback_sources", columns, [[k, *(v[c] for c in columns[1:])] for k, v in feedback["sources"].items()]
            )
        files = [f for f in ("results.json", "results.md", "recall_vs_examples.png") if (out / f).is_file()]
        tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


if __name__ == "__main__":
    main("head_to_head", run)
