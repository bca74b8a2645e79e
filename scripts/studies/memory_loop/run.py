"""GraphMemory's Retrieve-Generate-Reflect-Curate loop end to end on a slice of one graph.

    python scripts/studies/memory_loop/run.py graphset=outputs/graphs/locomo  # local SmolLM2, offline
    python scripts/studies/memory_loop/run.py llm=openai entry_selector=llm graph_name=... n_questions=50

For each of the first ``n_questions`` questions of graph ``graph_name`` (in graph-set order),
:class:`memory_loop.MemoryLoop` retrieves (Beta BFS from embedding entries, or from the
LLM retriever's selection over the compact index with ``entry_selector=llm``), generates an answer and
influence trace, and only then receives feedback on the prediction; the Reflector's labels
update the Beta counters (eq. 21) and the Curator's validated edits change the graph, which is
validated after every edit. The graph is a copy: the saved graph set is not modified.

Beta BFS (embedding entries) evidence recall is measured on the saved graph (before) and on the
evolved copy (after), both over the questions the loop ran (all ``n_questions`` unless it stopped
early). Prints the counts of calls, schema-valid replies per role, tokens,
applied transitions and edits, and discarded items, and writes one JSON line per example
(``trace.jsonl``) and the totals (``summary.json``) in ``out_dir``. Tracked as one ``evaluate``
run (:mod:`graphmem.tracking`): per-example counts against the example number, the totals in the
run summary, one row per example in a table, the graph set as input and the files as its results.

Failures are loud: an example whose retrieval or generation call failed stops there, and after
``max_consecutive_failures`` failed examples in a row the run stops, writes what it has, prints
the failure summary and exits with status 3; so does a run in which every example failed, or
every LLM call did, however few ran. The run owns ``out_dir`` (:mod:`graphmem.store.run_folder`): a live
run's folder is refused, an earlier run's files are moved into ``replaced-<run id>/``, and
``run.json`` and ``summary.json`` carry the run id.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import hydra
from memory_loop import ExampleRecord, MemoryLoop
from omegaconf import DictConfig, OmegaConf

import graphmem.config.schemas  # noqa: F401  (registers the config-group schemas before Hydra composes)
from graphmem.config.cli import check_int, check_out_dir, load_graphset, run_or_exit, set_threads
from graphmem.config.launch import check_command_line
from graphmem.core import Budget
from graphmem.eval.harness import evaluate_policy, write_jsonl
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.policies.selectors import make_entry_selector
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from graphmem.store.run_folder import open_run_folder
from graphmem.tracking import describe_artifact, experiment_group, graphset_location, make_tracker, use_graphset

log = logging.getLogger(__name__)


def feedback_note(answer: str | None) -> Any:
    """The environment's feedback on a prediction, built after the prediction exists (eq. 22)."""

    def note(prediction: str) -> str:
        if answer is None:
            return f"Prediction: {prediction or '(none)'}. No reference answer is available."
        return f"Prediction: {prediction or '(none)'}. Reference answer: {answer}."

    return note


EXIT_FAILURES = 3
ARTIFACTS = ("trace.jsonl", "summary.json", "tracking", "wandb")
"""What a run writes in its folder: a fresh run moves an earlier run's aside (graphmem.store.run_folder)."""


def record_json(rec: ExampleRecord, question_text: str, elapsed: float) -> dict[str, Any]:
    return {
        "qid": rec.qid,
        "failed": rec.failed,
        "question": question_text,
        "prediction": rec.prediction,
        "loaded": rec.loaded,
        "trace": rec.trace,
        "applied_transitions": [list(t) for t in rec.applied_transitions],
        "applied_ops": rec.applied_ops,
        "discarded": rec.discarded,
        "tokens": rec.tokens,
        "entries": [] if rec.retrieval is None else rec.retrieval.entries,
        "graph_checks": rec.graph_checks,
        "seconds": elapsed,
    }


def example_counts(row: dict[str, Any]) -> dict[str, Any]:
    """The per-example figures tracked against the example number (from a ``trace.jsonl`` row)."""
    return {
        "failed": int(row["failed"] is not None),
        "loaded": len(row["loaded"]),
        "transitions": len(row["applied_transitions"]),
        "ops": len(row["applied_ops"]),
        "discarded": sum(row["discarded"].values()),
        "seconds": row["seconds"],
    }


def schema_validity(usage: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Per role: replies received, those that parsed into the call's schema, and their share."""
    out = {}
    for role, u in usage["roles"].items():
        replies = u["requests"] + u["cache_hits"]
        bad = u["invalid_replies"] + u["failure_kinds"].get("empty", 0)
        out[role] = {
            "replies": replies,
            "valid": replies - bad,
            "valid_fraction": (replies - bad) / replies if replies else None,
        }
    return out


def beta_recall(gs: GraphSet, name: str, graph, idx: list[int], budget: Budget) -> float | None:
    """Evidence recall of Beta BFS (embedding entries) on questions ``idx`` over ``graph``."""
    view = GraphSet(gs.dataset, {name: graph}, [gs.questions[i] for i in idx], gs.query_embeddings[idx], gs.report)
    return evaluate_policy(BetaBFS(), view, budget, progress=False).overall.get("evidence_recall")


def check(cfg: DictConfig) -> Path:
    """Refuse an impossible config before any work; returns the run's folder."""
    out = check_out_dir(hydra.utils.to_absolute_path(cfg.out_dir))
    check_int(cfg, "n_questions", 1)
    check_int(cfg, "max_consecutive_failures", 0)
    LLMConfig.from_dict(OmegaConf.to_container(cfg.llm, resolve=True))
    Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
    if cfg.entry_selector != "llm":
        make_entry_selector(cfg.entry_selector)
    return out


def run(cfg: DictConfig) -> dict[str, Any]:
    """The loop in its own run folder (a live run's folder is refused, an earlier run's files moved aside)."""
    set_threads(cfg)
    out = check(cfg)
    config = OmegaConf.to_container(cfg, resolve=True)
    with open_run_folder(
        out, config, resume=False, artifacts=ARTIFACTS, resume_hint=None, kind="memory_loop"
    ) as folder:
        return _run(cfg, out, folder.run_id)


@dataclasses.dataclass
class LoopTally:
    """What the examples add up to: their trace rows, the discarded outputs by kind, the applied edit ops by
    name, the applied transitions, and why the loop stopped early (None: it ran every example)."""

    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    discarded: Counter = dataclasses.field(default_factory=Counter)
    ops: Counter = dataclasses.field(default_factory=Counter)
    transitions: int = 0
    stopped: str | None = None


def _run(cfg: DictConfig, out: Path, run_id: str) -> dict[str, Any]:
    """The loop over the graph's first ``n_questions`` questions, tracked; writes trace.jsonl and summary.json
    and exits with EXIT_FAILURES when it stopped early."""
    gs: GraphSet = load_graphset(cfg)
    name = cfg.graph_name or sorted(gs.graphs)[0]
    if name not in gs.graphs:
        raise KeyError(f"graph {name!r} is not in the graph set; have {sorted(gs.graphs)}")
    graph = gs.graphs[name].copy()
    idx = [i for i, q in enumerate(gs.questions) if q.graph == name][: cfg.n_questions]
    client, selector = _client_and_selector(cfg)
    budget = Budget(**OmegaConf.to_container(cfg.budget, resolve=True))
    policy, embed = BetaBFS(entry_selector=selector), _lazy_encoder(cfg)
    loop = MemoryLoop(client, policy, embed=embed, budget=budget, max_tokens=_max_tokens(cfg))
    before = {"nodes": graph.num_nodes, "edges": graph.num_edges}
    log.info("graph %s: %d nodes, %d edges; %d questions; model %s", name, *before.values(), len(idx), client.model)
    group = experiment_group("evaluate", gs.dataset)
    with make_tracker(cfg.logger, cfg, out, name=f"memory_loop-{name}", job_type="evaluate", group=group) as tracker:
        use_graphset(tracker, graphset_location(cfg))
        tracker.define_metric("example")
        tracker.define_metric("loop/*", step_metric="example")
        t_start = time.perf_counter()
        tally = _run_examples(cfg, loop, gs, graph, idx, tracker)
        wall = time.perf_counter() - t_start
        graph.validate()
        usage, failures = client.usage_report(), client.failure_summary()
        tally.stopped = _stop_reason(tally, client)
        head = {"run_id": run_id, "graph": name, "questions": len(idx), "examples_run": len(tally.rows)}
        head |= {"examples_failed": _failed(tally.rows), "stopped_early": tally.stopped, "loop_wall_s": round(wall, 1)}
        summary = head | _summary(gs, name, graph, idx, tally, usage, failures, selector, budget, before)
        _write_results(out, tracker, tally.rows, summary)
        if failures["failures"]:
            print(f"LLM call failures: {json.dumps(failures, default=str)}", file=sys.stderr)
        if tally.stopped:
            print(f"error: stopped after {len(tally.rows)} of {len(idx)} examples: {tally.stopped}", file=sys.stderr)
            tracker.finish(exit_code=EXIT_FAILURES)
            sys.exit(EXIT_FAILURES)
        return summary


def _client_and_selector(cfg: DictConfig):
    """The LLM client (``llm``; its cache folder made absolute) and the entry selector (the LLM one uses it)."""
    llm_cfg = OmegaConf.to_container(cfg.llm, resolve=True)
    if llm_cfg.get("cache_dir"):
        llm_cfg["cache_dir"] = hydra.utils.to_absolute_path(llm_cfg["cache_dir"])
    client = LLMClient(LLMConfig.from_dict(llm_cfg))
    selector = (
        make_entry_selector(cfg.entry_selector, client=client)
        if cfg.entry_selector == "llm"
        else make_entry_selector(cfg.entry_selector)
    )
    return client, selector


def _lazy_encoder(cfg: DictConfig):
    """``texts -> [n, D]`` embeddings by ``cfg.encoder``, the encoder loaded at the first call (curated nodes only)."""
    encoder = None

    def embed(texts):
        nonlocal encoder
        if encoder is None:
            from graphmem.index.embed import make_encoder

            encoder = make_encoder(cfg.encoder)
        return encoder.encode(list(texts))

    return embed


def _max_tokens(cfg: DictConfig):
    """``max_tokens``: one reply cap, or a cap per role."""
    if OmegaConf.is_dict(cfg.max_tokens):
        return OmegaConf.to_container(cfg.max_tokens, resolve=True)
    return cfg.max_tokens


def _run_examples(cfg: DictConfig, loop: MemoryLoop, gs: GraphSet, graph, idx: list[int], tracker) -> LoopTally:
    """One loop step per question (the answer read only after the prediction), each logged and tracked;
    stops after ``max_consecutive_failures`` failed examples in a row (0: never)."""
    tally, streak, queries = LoopTally(), 0, gs.queries()
    for i in idx:
        t0 = time.perf_counter()
        rec = loop.step(graph, queries[i], feedback_note(gs.questions[i].answer))  # answer read only after predict
        tally.rows.append(record_json(rec, gs.questions[i].text, time.perf_counter() - t0))
        tally.discarded.update(rec.discarded)
        tally.ops.update(op.split()[0] for op in rec.applied_ops)
        tally.transitions += len(rec.applied_transitions)
        log.info(
            "  %s: %sloaded %d, trace %d, transitions %d, ops %d, discarded %d (%.1fs)",
            rec.qid,
            "FAILED at " + rec.failed + ", " if rec.failed else "",
            len(rec.loaded),
            len(rec.trace),
            len(rec.applied_transitions),
            len(rec.applied_ops),
            sum(rec.discarded.values()),
            tally.rows[-1]["seconds"],
        )
        counts = example_counts(tally.rows[-1])
        tracker.log({"example": len(tally.rows) - 1, **{f"loop/{k}": v for k, v in counts.items()}})
        streak = streak + 1 if rec.failed else 0
        if cfg.max_consecutive_failures and streak >= cfg.max_consecutive_failures:
            tally.stopped = f"{streak} consecutive examples failed"
            break
    return tally


def _failed(rows: list[dict[str, Any]]) -> int:
    return sum(r["failed"] is not None for r in rows)


def _stop_reason(tally: LoopTally, client: LLMClient) -> str | None:
    """Why the run is a failure: the failure streak, every example failed, or every LLM call failed; None: none."""
    stopped = tally.stopped
    if not stopped and tally.rows and _failed(tally.rows) == len(tally.rows):
        stopped = f"every one of the {len(tally.rows)} examples failed"
    return stopped or client.all_calls_failed()


def _summary(gs, name, graph, idx, tally: LoopTally, usage, failures, selector, budget, before) -> dict[str, Any]:
    """summary.json after the run's head: the model and its calls and tokens, schema validity, the edits and
    checks, Beta BFS's evidence recall on the questions run over the graph before and after, what was
    discarded, the client's failures, the entry selector's stats, the graph before and after, the usage."""
    rows, ran = tally.rows, idx[: len(tally.rows)]  # before and after on the same questions: those the loop ran
    return {
        "model": usage["model"],
        "local_substitute": usage["local_substitute"],
        "calls": {r: u["calls"] for r, u in usage["roles"].items()},
        "total_calls": usage["total"].get("calls", 0),
        "requests": usage["total"].get("requests", 0),
        "cache_hits": usage["total"].get("cache_hits", 0),
        "prompt_tokens": usage["total"].get("prompt_tokens", 0),
        "completion_tokens": usage["total"].get("completion_tokens", 0),
        "memory_tokens": sum(r["tokens"].get("memory", 0) for r in rows),
        "index_tokens": sum(r["tokens"].get("index", 0) for r in rows),
        "schema_valid": schema_validity(usage),
        "applied_transitions": tally.transitions,
        "edits": dict(tally.ops),
        "graph_checks": sum(r["graph_checks"] for r in rows),
        "beta_bfs_recall": {
            "questions": len(ran),
            "before": beta_recall(gs, name, gs.graphs[name], ran, budget),
            "after": beta_recall(gs, name, graph, ran, budget),
        },
        "discarded": dict(tally.discarded),
        "client_failures": failures["by_role_kind"],
        "entry_selection": {k: v for k, v in vars(selector.stats).items() if k != "last_sections"}
        if hasattr(selector, "stats")
        else {},
        "graph_before": before,
        "graph_after": {
            "nodes": graph.num_nodes,
            "edges": graph.num_edges,
            "S_total": float(graph.S.sum()),
            "F_total": float(graph.F.sum()),
        },
        "usage": usage,
    }


def _write_results(out: Path, tracker, rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """trace.jsonl and summary.json, the summary (less the usage) logged and tracked with the examples' table."""
    write_jsonl(rows, out / "trace.jsonl")
    write_json(out / "summary.json", summary)
    brief = {k: v for k, v in summary.items() if k != "usage"}
    log.info("%s", json.dumps(brief, indent=1, default=str))
    log.info("trace written to %s", out / "trace.jsonl")
    tracker.update_summary(brief)
    counts = [example_counts(r) for r in rows]
    columns = ["qid", *(counts[0] if counts else []), "prediction"]
    tracker.log_table("examples", columns, [[r["qid"], *c.values(), r["prediction"]] for r, c in zip(rows, counts)])
    files = ["trace.jsonl", "summary.json"]
    tracker.log_artifact(describe_artifact(out, "results", tracker.run_artifact_name("results"), files=files))


@hydra.main(version_base="1.3", config_path=".", config_name="memory_loop")
def main(cfg: DictConfig) -> None:
    run_or_exit(run, cfg)


if __name__ == "__main__":
    check_command_line("memory_loop", check)  # every job's config, before Hydra writes .hydra/
    main()
