"""Evaluate a traversal policy over a graph set: batched retrieval first, gold joined afterwards.

The hot path is ``policy.retrieve_graphs(graphs, queries, budget)`` over groups of graphs of at
most ``batch_nodes`` nodes in all; policies that batch across graphs walk each group as one
disjoint union (:mod:`graphmem.core.graph_batch`), the others make one ``retrieve_batch`` per graph.
``queries`` are :class:`~graphmem.policies.base.Query` objects (id, text, embedding). The
questions' gold fields are read only after every retrieval of the run has returned, by
:mod:`graphmem.eval.metrics`.

The graph set is anything with ``dataset``, ``graphs`` (name -> MemoryGraph), ``questions``
(list of :class:`Question`) and ``queries()`` aligned with ``questions``, i.e.
:class:`graphmem.store.graphset.GraphSet`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from graphmem.core import Budget, Query, Retrieval
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.latency import serving_latency
from graphmem.eval.metrics import QuestionMetrics, category_name, question_metrics, summarize
from graphmem.policies.base import TraversalPolicy
from graphmem.store.io import atomic_write

# what a question's latency_s (and the summary's latency percentiles) measure, in EvalResult.info["latency"]
LATENCY_SERVED = "served alone"  # wall time of retrieve_batch(graph, [q]): a real per-query latency
LATENCY_BATCH_SHARE = "batch share"  # the batched call's wall time divided among its questions


class GraphSetLike(Protocol):
    dataset: str
    graphs: dict[str, MemoryGraph]
    questions: list[Question]

    def queries(self) -> list[Query]: ...


@dataclass
class EvalResult:
    """Per-question rows and the grouped summary of one policy under one budget.

    Args:
        policy: policy name.
        dataset: dataset name of the graph set.
        budget: the budget every retrieval ran under.
        rows: one dict per question (qid, graph, category, ranked ids, loaded ids in load order,
            trace, gold, metrics).
        summary: group name -> aggregate (see :func:`graphmem.eval.metrics.summarize`).
        wall_time_s: wall time of all ``retrieve_graphs`` calls together.
    """

    policy: str
    dataset: str
    budget: Budget
    rows: list[dict[str, Any]]
    summary: dict[str, dict[str, Any]]
    wall_time_s: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def overall(self) -> dict[str, Any]:
        return self.summary["overall"]

    def to_json(self, rows: bool = False) -> dict[str, Any]:
        out = {
            "policy": self.policy,
            "dataset": self.dataset,
            "budget": asdict(self.budget),
            "summary": self.summary,
            "wall_time_s": self.wall_time_s,
            "info": self.info,
        }
        if rows:
            out["rows"] = self.rows
        return out


def _group_by_graph(questions: Sequence[Question], graphs: dict[str, MemoryGraph]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        if q.graph not in graphs:
            raise KeyError(f"question {q.qid!r} is asked over graph {q.graph!r}, which the graph set does not hold")
        groups.setdefault(q.graph, []).append(i)
    return groups


def run_retrievals(
    policy: TraversalPolicy,
    graphs: dict[str, MemoryGraph],
    queries: Sequence[Query],
    graph_of: Sequence[str],
    budget: Budget,
    progress: bool = False,
    desc: str = "",
    batch_nodes: int = 1 << 15,
) -> tuple[list[Retrieval], float]:
    """Retrieve for every query with one ``retrieve_graphs`` call per group of graphs; no gold is in scope here.

    Graphs are grouped in order of first appearance, a group closing before it would exceed
    ``batch_nodes`` nodes (a larger graph forms its own group). Returns the retrievals aligned with
    ``queries`` and the summed wall time of the calls.
    """
    from tqdm.auto import tqdm

    order: dict[str, list[int]] = {}
    for i, g in enumerate(graph_of):
        order.setdefault(g, []).append(i)
    groups: list[list[str]] = []
    size = 0
    for name in order:
        n = graphs[name].num_nodes
        if not groups or size + n > batch_nodes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += n
    out: list[Retrieval | None] = [None] * len(queries)
    wall = 0.0
    with tqdm(
        total=len(order),
        desc=desc or getattr(policy, "name", "policy"),
        unit="graph",
        disable=not progress,
        leave=False,
    ) as bar:
        for names in groups:
            batches = [[queries[i] for i in order[name]] for name in names]
            t0 = time.perf_counter()
            results = policy.retrieve_graphs([graphs[name] for name in names], batches, budget)
            wall += time.perf_counter() - t0
            if len(results) != len(names):
                raise RuntimeError(
                    f"policy {getattr(policy, 'name', policy)!r} returned {len(results)} result lists "
                    f"for {len(names)} graphs"
                )
            for name, batch, got in zip(names, batches, results):
                if len(got) != len(batch):
                    raise RuntimeError(
                        f"policy {getattr(policy, 'name', policy)!r} returned {len(got)} retrievals "
                        f"for {len(batch)} queries on graph {name!r}"
                    )
                for i, r in zip(order[name], got):
                    out[i] = r
            bar.update(len(names))
    return out, wall  # type: ignore[return-value]


def evaluate_policy(
    policy: TraversalPolicy,
    graphset: GraphSetLike,
    budget: Budget,
    questions: Sequence[Question] | None = None,
    progress: bool = True,
    serve_latency: bool = False,
) -> EvalResult:
    """Evaluate ``policy`` on ``questions`` (default: every question of ``graphset``).

    Each question is matched to its query by ``qid``; the policy sees only the queries. Rows keep
    the order of ``questions``; each row holds the policy's ranked list (``ranked``, which
    :func:`~graphmem.eval.metrics.question_metrics` scores) and the same nodes in load order
    (``loaded``). Retrieval runs batched (``info["batched_questions_per_s"]`` is its
    throughput). Each question's latency is, with ``serve_latency``, the wall time of serving it
    alone (:func:`graphmem.eval.latency.serving_latency`: one ``retrieve_batch(graph, [q])`` call,
    after the batched pass), so the summary's percentiles are real latencies; without it, its share
    of the batched call's wall time (throughput: p50 = p95). ``info["latency"]`` names which.
    """
    questions = list(graphset.questions if questions is None else questions)
    by_qid = {q.qid: q for q in graphset.queries()}
    missing = [q.qid for q in questions if q.qid not in by_qid]
    if missing:
        raise KeyError(f"{len(missing)} questions have no query in the graph set (first: {missing[0]!r})")
    _group_by_graph(questions, graphset.graphs)
    queries = [by_qid[q.qid] for q in questions]
    name = getattr(policy, "name", type(policy).__name__)
    retrievals, wall = run_retrievals(
        policy,
        graphset.graphs,
        queries,
        [q.graph for q in questions],
        budget,
        progress=progress,
        desc=f"{name} ({graphset.dataset})",
    )

    latency = [r.wall_time_s for r in retrievals]
    if serve_latency:
        latency = serving_latency(policy, graphset.graphs, queries, budget, graph_of=[q.graph for q in questions])[
            "seconds"
        ]

    # ---- gold joins here, after every retrieval has returned
    rows: list[dict[str, Any]] = []
    metrics: list[QuestionMetrics] = []
    for q, r, lat in zip(questions, retrievals, latency):
        graph = graphset.graphs[q.graph]
        row, m = question_row(q, graph, r.ranked_ids(graph), r.loaded_ids(graph), r.to_json(graph), lat)
        metrics.append(m)
        rows.append(row)
    summary = summarize([q.category for q in questions], metrics)
    info = {
        "graphs": len({q.graph for q in questions}),
        "questions": len(questions),
        "queries_per_s": len(questions) / wall if wall > 0 else None,
        "batched_questions_per_s": len(questions) / wall if wall > 0 else None,
        "latency": LATENCY_SERVED if serve_latency else LATENCY_BATCH_SHARE,
    }
    return EvalResult(
        policy=name, dataset=graphset.dataset, budget=budget, rows=rows, summary=summary, wall_time_s=wall, info=info
    )


def question_row(
    q: Question, graph: MemoryGraph, ranked: list[str], loaded: list[str], trace: dict[str, Any], latency_s: float
) -> tuple[dict[str, Any], QuestionMetrics]:
    """One question's row of the results (ids, category, ranked and loaded ids, gold, the trace, metrics) and its
    metrics: where a retrieval meets the question's gold fields, after it has returned. ``trace`` holds the
    retrieval's ``loaded_tokens`` and ``max_depth``."""
    m = question_metrics(q, graph, ranked, trace["loaded_tokens"], trace["max_depth"], latency_s)
    row = {
        "qid": q.qid,
        "graph": q.graph,
        "category": q.category,
        "category_name": category_name(q.category),
        "question": q.text,
        "ranked": ranked,
        "loaded": loaded,
        "gold_evidence": list(q.evidence),
        "dangling_evidence": list(q.dangling_evidence),
        "trace": trace,
        "metrics": m.to_json(),
    }
    return row, m


def scaled_budgets(base: Budget, max_tokens: Iterable[int]) -> list[Budget]:
    """Budgets for a token sweep: ``max_tokens = t`` and
    ``max_nodes = max(1, round(base.max_nodes · t / base.max_tokens))``,
    other fields from ``base``."""
    if base.max_tokens <= 0:
        raise ValueError("budget sweep needs a base budget with max_tokens > 0")
    out = []
    for t in max_tokens:
        if not isinstance(t, int) or isinstance(t, bool) or t <= 0:
            raise ValueError(f"budget sweep token levels must be positive integers, got {t!r}")
        nodes = max(1, round(base.max_nodes * t / base.max_tokens))
        out.append(dataclasses.replace(base, max_nodes=nodes, max_tokens=t))
    return out


def budget_sweep(
    policy: TraversalPolicy,
    graphset: GraphSetLike,
    budgets: Sequence[Budget],
    questions: Sequence[Question] | None = None,
    progress: bool = True,
) -> list[EvalResult]:
    """The budget sweep: one :func:`evaluate_policy` per budget (recall at each budget, the policy
    rerun under it), in budget order; not R@k, which cuts one run's ranked list."""
    return [evaluate_policy(policy, graphset, b, questions, progress=progress) for b in budgets]


def sweep_curve(results: Sequence[EvalResult], group: str = "overall") -> list[dict[str, Any]]:
    """Points of a budget sweep: the budget limits with the group's recall and loaded tokens."""
    return [
        {
            "max_tokens": r.budget.max_tokens,
            "max_nodes": r.budget.max_nodes,
            "evidence_recall": r.summary[group]["evidence_recall"],
            "all_evidence_hit": r.summary[group]["all_evidence_hit"],
            "loaded_tokens": r.summary[group]["loaded_tokens"],
            "support_paragraph_recall": r.summary[group]["support_paragraph_recall"],
        }
        for r in results
        if group in r.summary
    ]


def write_jsonl(rows: Iterable[dict[str, Any]], path: str | Path) -> Path:
    """Write one JSON object per line, atomically."""

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")

    return atomic_write(path, write)
