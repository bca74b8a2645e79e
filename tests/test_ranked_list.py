"""The policy's ranked list: ``RetrievalBatch.rank`` orders each query's loaded nodes into
``Retrieval.ranked``, and every rank metric of the harness (first-gold rank, R@k) reads that list."""

import pytest
import torch
from policy_references import make_test_policy

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.core import Budget, Query, Retrieval, RetrievalBatch
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import LoadReport, Question
from graphmem.eval.harness import evaluate_policy
from graphmem.policies import POLICIES, Scope, TraversalPolicy
from graphmem.store.graphset import GraphSet


class LoadAllRankByCosine(TraversalPolicy):
    """Loads every node of the query's own graph in row order; with ``ranked``, reports the cosine of
    the query to each node as its rank (one-hot embeddings: exact ties, broken by load order)."""

    name = "load_all_rank_by_cosine"

    def __init__(self, ranked: bool = True):
        self.ranked = ranked

    def traverse(self, scope: Scope, entries, budget: Budget) -> RetrievalBatch:
        sizes = scope.sizes
        query = torch.repeat_interleave(torch.arange(len(scope.queries)), sizes)
        start = torch.cumsum(sizes, 0) - sizes
        local = torch.arange(query.numel()) - start[query]
        rank = scope.cosine()[query, local] if self.ranked else None
        return RetrievalBatch(
            1, torch.zeros(len(scope.queries), dtype=torch.long), query, scope.node_offset[query] + local, rank=rank
        )


def one_hot_graph(name: str, node_ids: list[str], hot: list[int], dim: int = 4) -> MemoryGraph:
    g = MemoryGraph.empty(dim=dim, info={"name": name})
    g.add_nodes(node_ids, [f"text of {n}" for n in node_ids], torch.eye(dim)[hot])
    return g


def q(qid: str, hot: int, dim: int = 4) -> Query:
    return Query(qid, qid, torch.eye(dim)[hot])


# ---------------------------------------------------------------------------- (1) loaded last, ranked first
def sentence_set() -> GraphSet:
    """One graph of five sentences of passages A, A, B, B, G; the gold sentence G::0 is loaded last."""
    graph = one_hot_graph("g", ["A::0", "A::1", "B::0", "B::1", "G::0"], [0, 0, 1, 1, 2])
    question = Question("g#0", "g", "which?", None, ("G::0",), "bridge", support_titles=("G", "A"))
    return GraphSet("hotpotqa", {"g": graph}, [question], torch.eye(4)[[2]], LoadReport("synthetic"))


def test_gold_loaded_last_but_ranked_first_is_scored_on_the_ranked_list():
    gs = sentence_set()
    row = evaluate_policy(LoadAllRankByCosine(), gs, Budget(), progress=False).rows[0]
    assert row["loaded"] == ["A::0", "A::1", "B::0", "B::1", "G::0"]  # load order: the trace
    assert row["ranked"] == ["G::0", "A::0", "A::1", "B::0", "B::1"]  # ties keep load order
    assert row["trace"]["ranked"] == row["ranked"] and row["trace"]["loaded"] == row["loaded"]
    m = row["metrics"]
    assert m["first_gold_rank"] == 1 and m["reciprocal_rank"] == 1.0
    assert m["passage_recall_2"] == 1.0 and m["passage_recall_5"] == 1.0  # passages G, A, B: both gold in the top 2
    # the same loads without a rank: the load order is the ranking
    plain = evaluate_policy(LoadAllRankByCosine(ranked=False), gs, Budget(), progress=False).rows[0]
    assert plain["ranked"] == plain["loaded"] == row["loaded"]
    p = plain["metrics"]
    assert p["first_gold_rank"] == 5 and p["reciprocal_rank"] == pytest.approx(0.2)
    assert p["passage_recall_2"] == 0.5  # passages A, B, G: only A in the top 2
    for key in ("evidence_recall", "precision", "all_evidence_hit", "support_paragraph_recall"):
        assert p[key] == m[key], key  # set metrics do not read the order


# ---------------------------------------------------------------------------- (2) every policy: R@k by hand
@pytest.fixture(scope="module", params=[False, True], ids=["passages", "sentences"])
def hotpot(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("hotpot")
    data = DataConfig(name="hotpotqa", file="hotpotqa/hotpot_dev_distractor_200.jsonl", limit=8)
    cfg = GraphConfig(encoder="hashing", sentence_nodes=request.param, cache_dir=str(out / "c"))
    return build_graphset(data, cfg, progress=False)


def recall_at_by_hand(graph: MemoryGraph, ranked: list[str], support: tuple[str, ...], k: int) -> float:
    titles = []
    for node in ranked:
        title = graph.metadata[graph.index_of(node)]["title"]
        if title not in titles:
            titles.append(title)
    return len(set(titles[:k]) & set(support)) / len(set(support))


@pytest.mark.parametrize("name", [*sorted(POLICIES), LoadAllRankByCosine.name])
def test_harness_r_at_k_is_recall_of_the_returned_ranked_list(hotpot, name):
    """Every registered policy, and one whose ranked list is not its load order."""
    first = next(iter(hotpot.graphs.values()))
    if name == LoadAllRankByCosine.name:
        policy = LoadAllRankByCosine()
    else:
        policy = make_test_policy(name, first.dim, len(first.relations))
    result = evaluate_policy(policy, hotpot, Budget(max_nodes=12), progress=False)
    assert len(result.rows) == len(hotpot.questions) > 4
    for question, row in zip(hotpot.questions, result.rows):
        graph = hotpot.graphs[row["graph"]]
        assert sorted(row["ranked"]) == sorted(row["loaded"]) and row["ranked"]
        for k in (2, 5):
            expected = recall_at_by_hand(graph, row["ranked"], question.support_titles, k)
            assert row["metrics"][f"passage_recall_{k}"] == pytest.approx(expected), (row["qid"], k)
        first_gold = [i + 1 for i, n in enumerate(row["ranked"]) if n in set(question.evidence)]
        assert row["metrics"]["first_gold_rank"] == (first_gold[0] if first_gold else None)
    if name == LoadAllRankByCosine.name:
        assert any(row["ranked"] != row["loaded"] for row in result.rows)


# ---------------------------------------------------------------------------- (3) split over a union
def test_split_over_a_union_gives_each_query_its_own_order():
    a = one_hot_graph("a", ["a0", "a1", "a2", "a3"], [0, 1, 1, 2])
    b = one_hot_graph("b", ["b0", "b1", "b2"], [2, 0, 2])
    queries = [[q("qa1", 1), q("qa2", 2)], [q("qb2", 2), q("qb0", 0)]]
    policy = LoadAllRankByCosine()
    together = policy.retrieve_graphs([a, b], queries, Budget())
    ranked = [[g.node_ids[v] for v in r.ranked] for g, rs in zip((a, b), together) for r in rs]
    assert ranked == [["a1", "a2", "a0", "a3"], ["a3", "a0", "a1", "a2"], ["b0", "b2", "b1"], ["b1", "b0", "b2"]]
    assert [r.loaded for rs in together for r in rs] == [[0, 1, 2, 3]] * 2 + [[0, 1, 2]] * 2  # load order kept
    apart = [policy.retrieve_batch(g, qs, Budget()) for g, qs in zip((a, b), queries)]
    assert [[r.ranked for r in rs] for rs in apart] == [[r.ranked for r in rs] for rs in together]


def test_split_orders_by_rank_stably_and_shift_carries_it():
    query = torch.tensor([0, 0, 0, 1, 1, 2])
    batch = RetrievalBatch(
        entries=1,
        tokens=torch.zeros(3, dtype=torch.long),
        query=query,
        loaded=torch.tensor([10, 11, 12, 20, 21, 30]),
        scores=torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
        rank=torch.tensor([1.0, 3.0, 1.0, 2.0, 2.0, -1.0]),
    )
    r0, r1, r2 = batch.split()
    assert (r0.ranked, r1.ranked, r2.ranked) == ([11, 10, 12], [20, 21], [30])
    assert (r0.loaded, r1.loaded) == ([10, 11, 12], [20, 21]) and r0.scores == pytest.approx([0.1, 0.2, 0.3])
    moved = batch.shift(torch.tensor([10, 20, 30]), torch.zeros(3, dtype=torch.long))
    assert [r.ranked for r in moved.split()] == [[1, 0, 2], [0, 1], [0]]
    with pytest.raises(ValueError, match="RetrievalBatch.rank has shape"):
        RetrievalBatch(1, torch.zeros(1, dtype=torch.long), query[:2] * 0, torch.tensor([1, 2]), rank=torch.ones(3))


def test_retrieval_built_directly_ranks_in_load_order_and_checks_a_given_ranking():
    r = Retrieval(loaded=[3, 1, 2], entries=[3])
    assert r.ranked == [3, 1, 2] and r.ranked is not r.loaded
    assert Retrieval([3, 1, 2], [3], ranked=[2, 3, 1]).ranked == [2, 3, 1]
    with pytest.raises(ValueError, match="ranked must hold the loaded nodes"):
        Retrieval([3, 1, 2], [3], ranked=[3, 1, 4])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64, torch.int64])
def test_ranked_order_is_each_querys_descending_rank_with_ties_in_load_order(dtype):
    """The one-key sort against a per-query Python sort by (-rank, load position), on ranks with
    many ties, negative values, infinities and a signed zero."""
    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 9, (40,), generator=gen)
    query = torch.repeat_interleave(torch.arange(40), counts)
    values = torch.tensor([-float("inf"), -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 1e30, float("inf")])
    if not dtype.is_floating_point:
        values = torch.tensor([-7, -1, 0, 0, 2, 3, 1 << 40, -(1 << 40), 5])
    rank = values[torch.randint(0, len(values), (query.numel(),), generator=gen)].to(dtype)
    batch = RetrievalBatch(1, torch.zeros(40, dtype=torch.long), query, torch.arange(query.numel()), rank=rank)
    expected = sorted(range(query.numel()), key=lambda i: (int(query[i]), -float(rank[i]), i))
    assert batch.ranked_order().tolist() == expected
    with pytest.raises(ValueError, match="1 NaN values"):
        RetrievalBatch(
            1, torch.zeros(1, dtype=torch.long), query[:2] * 0, torch.arange(2), rank=torch.tensor([1.0, float("nan")])
        ).split()
