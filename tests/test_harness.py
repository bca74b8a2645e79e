"""Evaluation harness: batching per graph, gold joined after retrieval, sweeps, reports."""

import json
from dataclasses import dataclass

import pytest
import torch

from graphmem.core import Budget, Query, Retrieval
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.harness import budget_sweep, evaluate_policy, scaled_budgets, sweep_curve, write_jsonl
from graphmem.eval.report import full_report, markdown_table, plot_budget_curves, results_payload, table_data


@dataclass
class ToySet:
    """The parts of a graph set the harness reads."""

    dataset: str
    graphs: dict
    questions: list
    query_embeddings: torch.Tensor

    def queries(self):
        return [Query(q.qid, q.text, e) for q, e in zip(self.questions, self.query_embeddings)]


def line_graph(name: str, n: int = 4) -> MemoryGraph:
    g = MemoryGraph.empty(dim=n, info={"name": name})
    g.add_nodes([f"{name}:{i}" for i in range(n)], [f"turn {i} of {name}" for i in range(n)], torch.eye(n))
    return g


def toy_set() -> ToySet:
    graphs = {"g1": line_graph("g1"), "g2": line_graph("g2")}
    qs = [  # query i points at node i of its graph (one-hot embedding)
        Question("g1#0", "g1", "where?", "a", ("g1:0",), 1),
        Question("g2#0", "g2", "when?", "b", ("g2:1", "g2:2"), 2),
        Question("g1#1", "g1", "who?", "c", ("g1:3",), 5),
        Question("g1#2", "g1", "what?", "d", (), 3),
    ]
    emb = torch.eye(4)[[0, 1, 2, 3]]
    return ToySet("locomo", graphs, qs, emb)


class NearestTwo:
    """Loads the node the query points at, then the next row; records what it was given. A stand-in
    with the harness's interface (``retrieve_graphs``) and hand-set latencies, not a :class:`TraversalPolicy`."""

    name = "nearest_two"

    def __init__(self):
        self.calls = []

    def retrieve_graphs(self, graphs, queries, budget):
        return [self.retrieve_batch(g, qs, budget) for g, qs in zip(graphs, queries)]

    def retrieve_batch(self, graph, queries, budget):
        self.calls.append((graph.info["name"], list(queries)))
        out = []
        for q in queries:
            top = int(torch.argmax(graph.embeddings @ q.embedding))
            loaded = [top, (top + 1) % graph.num_nodes][: budget.max_nodes]
            out.append(
                Retrieval(
                    loaded=loaded,
                    entries=[top],
                    loaded_tokens=5 * len(loaded),
                    max_depth=1,
                    wall_time_s=0.001 * (top + 1),
                )
            )
        return out


def test_one_batched_call_per_graph_with_queries_only():
    gs, policy = toy_set(), NearestTwo()
    result = evaluate_policy(policy, gs, Budget(), progress=False)
    assert [(g, [q.qid for q in qs]) for g, qs in policy.calls] == [("g1", ["g1#0", "g1#1", "g1#2"]), ("g2", ["g2#0"])]
    assert all(type(q) is Query for _, qs in policy.calls for q in qs)
    assert [r["qid"] for r in result.rows] == ["g1#0", "g2#0", "g1#1", "g1#2"]  # question order kept


def test_rows_and_summary_hand_computed():
    result = evaluate_policy(NearestTwo(), toy_set(), Budget(), progress=False)
    r0, r1, r2, r3 = result.rows
    assert r0["loaded"] == ["g1:0", "g1:1"] and r0["metrics"]["evidence_recall"] == 1.0
    assert r0["metrics"]["precision"] == 0.5 and r0["metrics"]["first_gold_rank"] == 1
    assert r1["loaded"] == ["g2:1", "g2:2"] and r1["metrics"]["all_evidence_hit"] == 1.0
    assert r2["loaded"] == ["g1:2", "g1:3"] and r2["metrics"]["first_gold_rank"] == 2
    assert r3["metrics"]["evidence_recall"] is None  # no gold evidence: excluded
    assert r0["trace"]["loaded"] == r0["loaded"] and r0["trace"]["entries"] == ["g1:0"]
    assert r2["category_name"] == "adversarial" and r0["category_name"] == "multi-hop"
    s = result.summary
    assert s["overall"]["n"] == 3 and s["overall"]["n_no_gold"] == 1  # categories 1, 2, 3
    assert s["overall"]["evidence_recall"] == pytest.approx(1.0)
    assert s["overall"]["precision"] == pytest.approx((0.5 + 1.0) / 2)
    assert s["adversarial"]["first_gold_rank"] == 2 and s["all"]["n"] == 4
    assert s["overall"]["latency_ms_p50"] == pytest.approx(2.0)  # latencies 1, 2, 4 ms


def test_question_subset_and_unknown_question():
    gs = toy_set()
    result = evaluate_policy(NearestTwo(), gs, Budget(), questions=gs.questions[1:2], progress=False)
    assert [r["qid"] for r in result.rows] == ["g2#0"]
    stranger = Question("zz", "g1", "?", None, (), 4)
    with pytest.raises(KeyError, match="no query"):
        evaluate_policy(NearestTwo(), gs, Budget(), questions=[stranger], progress=False)


def test_wrong_number_of_retrievals_is_an_error():
    class Broken(NearestTwo):
        def retrieve_batch(self, graph, queries, budget):
            return super().retrieve_batch(graph, queries, budget)[:-1]

    with pytest.raises(RuntimeError, match="returned"):
        evaluate_policy(Broken(), toy_set(), Budget(), progress=False)


def test_scaled_budgets_and_sweep():
    budgets = scaled_budgets(Budget(), [250, 500, 1000, 1500, 2500])
    assert [(b.max_tokens, b.max_nodes) for b in budgets] == [(250, 1), (500, 2), (1000, 5), (1500, 7), (2500, 12)]
    assert all(b.max_hops == 2 and b.max_entries == 6 for b in budgets)
    with pytest.raises(ValueError):
        scaled_budgets(Budget(), [0])
    curve = sweep_curve(budget_sweep(NearestTwo(), toy_set(), budgets[:2], progress=False))
    # one node loaded at 250 tokens: g2#0 gets 1 of 2 gold -> overall recall (1 + 0.5) / 2
    assert curve[0]["max_nodes"] == 1 and curve[0]["evidence_recall"] == pytest.approx(0.75)
    assert curve[1]["evidence_recall"] == pytest.approx(1.0)


def test_reports_and_files(tmp_path):
    gs = toy_set()
    result = evaluate_policy(NearestTwo(), gs, Budget(), progress=False)
    table = markdown_table(result)
    assert "| overall | 3 (1 no gold) |" in table and "adversarial" in table and "p95 ms" in table
    assert "nearest_two" in full_report([result])
    cols, rows = table_data(result)
    assert len(rows) == len(result.summary) and len(cols) == len(rows[0])
    path = write_jsonl(result.rows, tmp_path / "rows.jsonl")
    back = [json.loads(line) for line in path.read_text().splitlines()]
    assert [b["qid"] for b in back] == [r["qid"] for r in result.rows]
    sweeps = {"nearest_two": budget_sweep(NearestTwo(), gs, scaled_budgets(Budget(), [250, 2500]), progress=False)}
    payload = json.loads(json.dumps(results_payload([result], sweeps, {"dataset": "locomo"})))
    assert payload["policies"]["nearest_two"]["summary"]["overall"]["n"] == 3
    png = plot_budget_curves(sweeps, tmp_path / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
