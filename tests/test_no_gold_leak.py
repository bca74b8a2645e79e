"""No gold leakage: what a policy loads cannot depend on gold evidence, answers or categories.

Every registered policy is run through the harness twice on the same graphs and queries, once
with the true gold fields and once with every gold field scrambled; the loaded ids and traces
must be identical. A spy policy checks that the harness hands policies nothing but
:class:`Query` objects, and a question proxy checks that no gold field is read before the last
retrieval has returned.
"""

import dataclasses
import random
import sys
from pathlib import Path

import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query, RetrievalBatch
from graphmem.datasets.types import LoadReport, Question
from graphmem.eval.harness import evaluate_policy
from graphmem.policies import POLICIES, TraversalPolicy
from graphmem.store.graphset import GraphSet

sys.path.insert(0, str(Path(__file__).parent))
import pytest  # noqa: E402
from policy_references import make_test_policy  # noqa: E402

DIM = 16
GOLD_FIELDS = ("answer", "evidence", "category", "dangling_evidence", "support_titles", "support_chain")


def graphset() -> GraphSet:
    graphs, questions = {}, []
    gen = torch.Generator().manual_seed(1)
    rng = random.Random(2)
    for g in range(2):
        graph = make_synthetic_graph(40, avg_degree=4.0, dim=DIM, seed=g)
        graph.S = torch.randint(0, 5, (graph.num_edges,), generator=gen).float()  # non-trivial Beta weights
        graph.F = torch.randint(0, 5, (graph.num_edges,), generator=gen).float()
        name = f"conv-{g}"
        graphs[name] = graph
        for i in range(6):
            questions.append(
                Question(
                    qid=f"{name}#{i}",
                    graph=name,
                    text=f"question {i} about {name}",
                    answer=f"answer {i}",
                    evidence=tuple(rng.sample(graph.node_ids, 2)),
                    category=1 + i % 5,
                    dangling_evidence=(),
                    support_titles=(),
                )
            )
    emb = torch.nn.functional.normalize(torch.randn(len(questions), DIM, generator=gen), dim=1)
    return GraphSet("locomo", graphs, questions, emb, LoadReport("synthetic"))


def scrambled(gs: GraphSet) -> GraphSet:
    """The same graphs and queries with every gold field of every question replaced."""
    rng = random.Random(3)
    qs = []
    for q in gs.questions:
        ids = gs.graphs[q.graph].node_ids
        qs.append(
            dataclasses.replace(
                q,
                answer="scrambled " + str(rng.random()),
                evidence=tuple(rng.sample(ids, 3)),
                category=1 + (q.category % 5),
                dangling_evidence=("D99:99",),
                support_titles=("Nowhere",),
                support_chain=tuple(rng.sample(ids, 2)),
            )
        )
    return GraphSet(gs.dataset, gs.graphs, qs, gs.query_embeddings, gs.report)


def _policy_view(result):
    """What a policy decided, per question (timings excluded)."""
    keep = ("loaded", "entries", "edges_considered", "edges_traversed", "loaded_tokens", "max_depth")
    return {r["qid"]: {k: r["trace"][k] for k in keep} for r in result.rows}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_scrambled_gold_leaves_retrieval_unchanged(name):
    policy = make_test_policy(name, DIM)
    gs = graphset()
    budget = Budget(max_entries=3, top_k_neighbors=2, max_hops=2, max_nodes=8, max_tokens=400)
    true = evaluate_policy(policy, gs, budget, progress=False)
    fake = evaluate_policy(policy, scrambled(gs), budget, progress=False)
    assert _policy_view(true) == _policy_view(fake)
    assert any(r["loaded"] for r in true.rows), f"{name} loaded nothing; the comparison would be vacuous"
    assert [r["metrics"] for r in true.rows] != [r["metrics"] for r in fake.rows]  # gold did change


def test_builtin_policies_are_registered():
    assert {"beta_bfs", "dense_topk", "ppr", "uniform_bfs"} <= set(POLICIES)


class Spy(TraversalPolicy):
    """Records each (graph, queries) a finished ``retrieve_graphs`` call was given; loads each query's first node."""

    name = "spy"

    def __init__(self):
        self.received = []

    def retrieve_graphs(self, graphs, queries, budget):
        out = super().retrieve_graphs(graphs, queries, budget)
        self.received += [(g, qs, budget) for g, qs in zip(graphs, queries)]
        return out

    def traverse(self, scope, entries, budget):
        b = len(scope.queries)
        first = scope.node_offset
        return RetrievalBatch(first[:, None], torch.zeros(b, dtype=torch.long), torch.arange(b), first)


def test_harness_gives_policies_only_queries():
    gs, spy = graphset(), Spy()
    evaluate_policy(spy, gs, Budget(), progress=False)
    assert len(spy.received) == len(gs.graphs)
    for graph, queries, budget in spy.received:
        assert type(budget) is Budget and any(graph is g for g in gs.graphs.values())
        for q in queries:
            assert type(q) is Query and [f.name for f in dataclasses.fields(q)] == ["qid", "text", "embedding"]
            assert not any(hasattr(q, f) for f in GOLD_FIELDS)


class GoldTrap:
    """A question proxy that logs each gold-field read with the number of retrievals done so far."""

    def __init__(self, question, spy, log):
        self._q, self._spy, self._log = question, spy, log

    def __getattr__(self, attr):
        if attr in GOLD_FIELDS:
            self._log.append((attr, len(self._spy.received)))
        return getattr(self._q, attr)


def test_gold_is_read_only_after_every_retrieval():
    gs, spy, log = graphset(), Spy(), []
    trapped = [GoldTrap(q, spy, log) for q in gs.questions]
    result = evaluate_policy(spy, gs, Budget(), questions=trapped, progress=False)
    assert len(result.rows) == len(gs.questions)
    assert log, "metrics never read the gold fields"
    assert all(done == len(gs.graphs) for _, done in log), "a gold field was read before retrieval finished"
