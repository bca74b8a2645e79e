"""GraphMemory's Retrieve-Generate-Reflect-Curate loop end to end on a live memory grown from one graph.

    python scripts/studies/memory_loop/run.py graphset=outputs/graphs/locomo  # local SmolLM2, offline
    python scripts/studies/memory_loop/run.py llm=openai entry_selector=llm graph_name=... n_questions=50

The run grows a :class:`graphmem.Memory` in ``<out_dir>/memory`` from graph ``graph_name`` of the graph set:
its records in row order (:func:`graphmem.builders.incremental.records_of`: each node's text, speaker, session,
time, metadata and key) with the set's own embeddings, nothing re-encoded, under the set's graph settings. The
memory's edges follow the live memory's arrival-order rules (``docs/memory.md``), so its initial graph may
differ from the saved one in its edges. ``encoder`` embeds the questions and the Curator's lessons; one that is
not the graph set's (name, fingerprint, width) is refused in one line. The saved graph set is not modified.

For each of the first ``n_questions`` questions of that graph (in graph-set order),
:class:`memory_loop.MemoryLoop` retrieves from the memory (Beta BFS from embedding entries, or from the
LLM retriever's selection over the compact index with ``entry_selector=llm``), generates an answer and
influence trace, and only then receives feedback on the prediction; the Reflector's labels
update the Beta counters (eq. 21, one ``Memory.feedback``) and the Curator's validated edits change the memory,
whose integrity is checked after every edit.

Beta BFS (embedding entries) evidence recall is measured on the memory's initial graph (before) and on the
evolved memory (after), both over the questions the loop ran (all ``n_questions`` unless it stopped
early). Prints the counts of calls, schema-valid replies per role, tokens,
applied transitions and edits, and discarded items, and writes one JSON line per example
(``trace.jsonl``) and the totals (``summary.json``) in ``out_dir``, beside the evolved memory. Tracked as one
``evaluate`` run (:mod:`graphmem.tracking`): per-example counts against the example number, the totals in the
run summary, one row per example in a table, the graph set as input and the files as its results.

Failures are loud: an example whose retrieval or generation call failed stops there, and after
``max_consecutive_failures`` failed examples in a row the run stops, writes what it has, prints
the failure summary and exits with status 3; so does a run in which every example failed, or
every LLM call did, however few ran. The run owns ``out_dir`` (:mod:`graphmem.store.run_folder`): a live
run's folder is refused, an earlier run's files (its memory included) are moved into ``replaced-<run id>/``,
and ``run.json`` and ``summary.json`` carry the run id.
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
from graphmem.builders.config import GraphConfig
from graphmem.builders.incremental import records_of
from graphmem.config.cli import check_int, check_out_dir, graphset_location, load_graphset, set_threads
from graphmem.config.entry import main, plain, typed
from graphmem.core import Budget
from graphmem.core.errors import InputError
from graphmem.eval.harness import evaluate_policy, write_jsonl
from graphmem.index.embed import encoder_fingerprint, make_encoder
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.memory import Memory
from graphmem.policies import make_policy
from graphmem.policies.base import TraversalPolicy
from graphmem.policies.selectors import make_entry_selector
from graphmem.store.checkpoint import checkpoint_inputs
from graphmem.store.graphset import GraphSet
from graphmem.store.io import write_json
from graphmem.store.run_folder import open_run_folder
from graphmem.tracking import describe_artifact, experiment_group, make_tracker, use_graphset

log = logging.getLogger(__name__)


def feedback_note(answer: str | None) -> Any:
    """The environment's feedback on a prediction, built after the prediction exists (eq. 22)."""

    def note(prediction: str) -> str:
        if answer is None:
            return f"Prediction: {prediction or '(none)'}. No reference answer is available."
        return f"Prediction: {prediction or '(none)'}. Reference answer: {answer}."

    return note


EXIT_FAILURES = 3
ARTIFACTS = ("trace.jsonl", "summary.json", "memory", "tracking", "wandb")
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
    return evaluate_policy(make_policy("beta_bfs"), view, budget, progress=False).overall.get("evidence_recall")


def check_encoder(gs: GraphSet, name: str) -> None:
    """Refuse ``encoder=name`` when the graph set's embeddings come from another encoder (its recorded name and
    fingerprint, else its width): the memory embeds questions and lessons with it beside the set's embeddings."""
    enc, have = make_encoder(name), checkpoint_inputs(gs, ())
    theirs, fingerprint, dim = have["encoder"], have["encoder_fingerprint"], have["embedding_dim"]
    if enc.dim == dim and theirs in (None, enc.name) and fingerprint in (None, encoder_fingerprint(enc)):
        return
    built = ((gs.provenance or {}).get("graph") or {}).get("encoder")
    raise InputError(
        f"encoder={name} ({enc.name}, {enc.dim}-d) is not the graph set's encoder ({theirs or 'not recorded'}, "
        f"{dim}-d): the memory embeds questions and lessons beside the set's embeddings; "
        + (f"use encoder={built}" if built else "use the encoder the set was built with")
    )


def memory_settings(gs: GraphSet, cfg: DictConfig) -> dict[str, Any]:
    """The graph settings the memory grows under: the set's (as its provenance records them), else ``graph``."""
    saved = (gs.provenance or {}).get("graph")
    settings = dict(saved) if isinstance(saved, dict) else plain(cfg.graph)
    known = {f.name for f in dataclasses.fields(GraphConfig)} - {"encoder", "cache_dir", "incremental"}
    return {k: v for k, v in settings.items() if k in known}


def grow_memory(folder: Path, gs: GraphSet, name: str, cfg: DictConfig, policy: TraversalPolicy) -> Memory:
    """A memory in ``folder`` grown from graph ``name`` of ``gs``: its records in row order with the set's
    embeddings (nothing re-encoded), under the set's graph settings, by the live memory's arrival-order rules."""
    check_encoder(gs, cfg.encoder)
    graph = gs.graphs[name]
    mem = Memory.open(folder, encoder=cfg.encoder, graph=memory_settings(gs, cfg), policy=policy)
    try:
        mem.add_many(records_of(graph), embeddings=graph.embeddings)
    except BaseException:
        mem.close()
        raise
    return mem


def check(cfg: DictConfig) -> Path:
    """Refuse an impossible config before any work; returns the run's folder."""
    out = check_out_dir(hydra.utils.to_absolute_path(cfg.out_dir))
    check_int(cfg, "n_questions", 1)
    check_int(cfg, "max_consecutive_failures", 0)
    LLMConfig.from_dict(plain(cfg.llm))
    typed(cfg.budget, Budget)
    if cfg.entry_selector != "llm":
        make_entry_selector(cfg.entry_selector)
    return out


def run(cfg: DictConfig) -> dict[str, Any]:
    """The loop in its own run folder (a live run's folder is refused, an earlier run's files moved aside)."""
    set_threads(cfg)
    out = check(cfg)
    config = plain(cfg)
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
    """The loop over the graph's first ``n_questions`` questions on a memory grown from it, tracked; writes
    trace.jsonl and summary.json and exits with EXIT_FAILURES when it stopped early."""
    gs: GraphSet = load_graphset(cfg)
    name = cfg.graph_name or sorted(gs.graphs)[0]
    if name not in gs.graphs:
        raise KeyError(f"graph {name!r} is not in the graph set; have {sorted(gs.graphs)}")
    idx = [i for i, q in enumerate(gs.questions) if q.graph == name][: cfg.n_questions]
    client, selector = _client_and_selector(cfg)
    budget = typed(cfg.budget, Budget)
    policy = make_policy("beta_bfs", entry_selector=selector)
    loop = MemoryLoop(client, policy, budget=budget, max_tokens=_max_tokens(cfg))
    with grow_memory(out / "memory", gs, name, cfg, policy) as mem:
        initial = mem.graph.copy()  # Beta BFS recall "before" is measured on it
        before = {"nodes": initial.num_nodes, "edges": initial.num_edges}
        log.info(
            "memory of graph %s: %d records, %d edges; %d questions; model %s",
            name,
            *before.values(),
            len(idx),
            client.model,
        )
        group = experiment_group("evaluate", gs.dataset)
        with make_tracker(
            cfg.logger, cfg, out, name=f"memory_loop-{name}", job_type="evaluate", group=group
        ) as tracker:
            use_graphset(tracker, graphset_location(cfg))
            tracker.define_metric("example")
            tracker.define_metric("loop/*", step_metric="example")
            t_start = time.perf_counter()
            tally = _run_examples(cfg, loop, gs, mem, idx, tracker)
            wall = time.perf_counter() - t_start
            if problems := mem.integrity():
                raise RuntimeError(f"memory {mem.store.folder}: {'; '.join(problems)}")
            usage, failures = client.usage_report(), client.failure_summary()
            tally.stopped = _stop_reason(tally, client)
            head = {"run_id": run_id, "graph": name, "questions": len(idx), "examples_run": len(tally.rows)}
            head |= {
                "examples_failed": _failed(tally.rows),
                "stopped_early": tally.stopped,
                "loop_wall_s": round(wall, 1),
            }
            graphs = {"initial": initial, "evolved": mem.graph, "before": before}
            summary = head | _summary(gs, name, graphs, idx, tally, usage, failures, selector, budget)
            _write_results(out, tracker, tally.rows, summary)
            if failures["failures"]:
                print(f"LLM call failures: {json.dumps(failures, default=str)}", file=sys.stderr)
            if tally.stopped:
                print(
                    f"error: stopped after {len(tally.rows)} of {len(idx)} examples: {tally.stopped}", file=sys.stderr
                )
                tracker.finish(exit_code=EXIT_FAILURES)
                sys.exit(EXIT_FAILURES)
            return summary


def _client_and_selector(cfg: DictConfig):
    """The LLM client (``llm``; its cache folder made absolute) and the entry selector (the LLM one uses it)."""
    llm_cfg = plain(cfg.llm)
    if llm_cfg.get("cache_dir"):
        llm_cfg["cache_dir"] = hydra.utils.to_absolute_path(llm_cfg["cache_dir"])
    client = LLMClient(LLMConfig.from_dict(llm_cfg))
    selector = (
        make_entry_selector(cfg.entry_selector, client=client)
        if cfg.entry_selector == "llm"
        else make_entry_selector(cfg.entry_selector)
    )
    return client, selector


def _max_tokens(cfg: DictConfig):
    """``max_tokens``: one reply cap, or a cap per role."""
    if OmegaConf.is_dict(cfg.max_tokens):
        return plain(cfg.max_tokens)
    return cfg.max_tokens


def _run_examples(cfg: DictConfig, loop: MemoryLoop, gs: GraphSet, mem: Memory, idx: list[int], tracker) -> LoopTally:
    """One loop step per question (the answer read only after the prediction), each logged and tracked;
    stops after ``max_consecutive_failures`` failed examples in a row (0: never)."""
    tally, streak = LoopTally(), 0
    for i in idx:
        t0, q = time.perf_counter(), gs.questions[i]
        rec = loop.step(mem, q.qid, q.text, feedback_note(q.answer))  # the answer is read only after the prediction
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


def _summary(gs, name, graphs, idx, tally: LoopTally, usage, failures, selector, budget) -> dict[str, Any]:
    """summary.json after the run's head: the model and its calls and tokens, schema validity, the edits and
    checks, Beta BFS's evidence recall on the questions run over the memory's initial graph (before) and the
    evolved one (after), what was discarded, the client's failures, the entry selector's stats, the memory's graph
    before and after, the usage. ``graphs``: ``initial`` and ``evolved`` graphs, ``before`` the initial counts."""
    rows, ran = tally.rows, idx[: len(tally.rows)]  # before and after on the same questions: those the loop ran
    graph = graphs["evolved"]
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
            "before": beta_recall(gs, name, graphs["initial"], ran, budget),
            "after": beta_recall(gs, name, graph, ran, budget),
        },
        "discarded": dict(tally.discarded),
        "client_failures": failures["by_role_kind"],
        "entry_selection": {k: v for k, v in vars(selector.stats).items() if k != "last_sections"}
        if hasattr(selector, "stats")
        else {},
        "graph_before": graphs["before"],
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


if __name__ == "__main__":
    main("memory_loop", run, check)
