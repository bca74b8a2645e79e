"""Retrieval metrics against hand-computed values on a toy graph."""

import pytest
import torch

from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.metrics import aggregate, percentile, question_metrics, summarize


def toy_graph(ids, titles=None) -> MemoryGraph:
    g = MemoryGraph.empty(dim=3)
    meta = [{"title": t} for t in titles] if titles else None
    g.add_nodes(ids, [f"text of {i}" for i in ids], torch.eye(3)[torch.arange(len(ids)) % 3], metadata=meta)
    return g


def question(evidence, category=4, support_titles=(), support_chain=(), qid="q"):
    return Question(
        qid=qid,
        graph="g",
        text="?",
        answer="x",
        evidence=tuple(evidence),
        category=category,
        support_titles=tuple(support_titles),
        support_chain=tuple(support_chain),
    )


G = toy_graph(["a", "b", "c", "d", "e"])


def score(evidence, loaded, tokens=10, hops=1, latency=0.01, graph=G, **kw):
    return question_metrics(question(evidence, **kw), graph, loaded, tokens, hops, latency)


def test_partial_recall_precision_rank():
    m = score(["b", "d"], ["a", "b", "c"])
    assert m.evidence_recall == pytest.approx(0.5)  # 1 of 2 gold loaded
    assert m.all_evidence_hit == 0.0
    assert m.precision == pytest.approx(1 / 3)  # 1 gold of 3 loaded
    assert m.first_gold_rank == 2 and m.reciprocal_rank == pytest.approx(0.5)
    assert (m.n_loaded, m.n_gold, m.n_gold_loaded) == (3, 2, 1)
    assert (m.loaded_tokens, m.hops, m.latency_s) == (10, 1, 0.01)


def test_dangling_gold_is_not_counted():
    m = score(["a", "missing"], ["a"])
    assert m.n_gold == 1
    assert (m.evidence_recall, m.all_evidence_hit, m.precision, m.first_gold_rank) == (1.0, 1.0, 1.0, 1)


def test_no_resolvable_gold_is_undefined():
    m = score(["missing"], ["a", "b"])
    assert m.evidence_recall is None and m.all_evidence_hit is None and m.precision is None
    assert m.first_gold_rank is None and m.reciprocal_rank is None


def test_nothing_loaded():
    m = score(["a"], [])
    assert (m.evidence_recall, m.precision, m.first_gold_rank, m.reciprocal_rank) == (0.0, 0.0, None, 0.0)


def test_duplicate_loads_and_gold_count_once():
    m = score(["b", "b", "c"], ["b", "b", "c"])
    assert (m.n_loaded, m.n_gold, m.evidence_recall, m.precision) == (2, 2, 1.0, 1.0)


def test_hotpot_supporting_sentence_and_paragraph_recall():
    ids = ["T1::T1", "T1::0", "T1::1", "T2::T2", "T2::0", "T3::0"]
    g = toy_graph(ids, titles=["T1", "T1", "T1", "T2", "T2", "T3"])
    # paragraph T1 counts through its sentence 0, T2 through its title node; no gold sentence is loaded
    m = score(["T1::1", "T2::0"], ["T1::0", "T2::T2"], graph=g, category="bridge", support_titles=["T1", "T2"])
    assert m.support_sentence_recall == 0.0 and m.evidence_recall == 0.0
    assert m.support_paragraph_recall == 1.0
    m = score(["T1::1", "T2::0"], ["T1::1", "T3::0"], graph=g, category="bridge", support_titles=["T1", "T2"])
    assert m.support_sentence_recall == 0.5 and m.support_paragraph_recall == 0.5
    assert m.precision == 0.5 and m.first_gold_rank == 1


def test_paragraph_title_falls_back_to_node_id():
    g = toy_graph(["X::0", "Y::0"])  # no title metadata
    m = score(["X::0"], ["Y::0"], graph=g, category="comparison", support_titles=["X", "Y"])
    assert m.support_paragraph_recall == 0.5


def test_percentile_linear_interpolation():
    assert percentile([4, 1, 3, 2], 50) == pytest.approx(2.5)
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)  # h = 3 * 0.95 = 2.85 -> 3 + 0.85 * (4 - 3)
    assert percentile([7], 95) == 7 and percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_aggregate_means_and_exclusions():
    ms = [
        score(["b", "d"], ["a", "b", "c"], latency=0.001),
        score(["a"], ["a"], tokens=20, hops=0, latency=0.003),
        score(["missing"], ["a"], tokens=30, hops=2, latency=0.002),
    ]
    agg = aggregate(ms)
    assert (agg["n"], agg["n_scored"], agg["n_no_gold"]) == (3, 2, 1)
    assert agg["evidence_recall"] == pytest.approx((0.5 + 1.0) / 2)
    assert agg["all_evidence_hit"] == pytest.approx(0.5)
    assert agg["precision"] == pytest.approx((1 / 3 + 1.0) / 2)
    assert agg["first_gold_rank"] == pytest.approx((2 + 1) / 2)
    assert agg["mrr"] == pytest.approx((0.5 + 1.0) / 2)
    assert agg["loaded_tokens"] == pytest.approx(20.0) and agg["hops"] == pytest.approx(1.0)
    assert agg["latency_ms_p50"] == pytest.approx(2.0) and agg["latency_ms_p95"] == pytest.approx(2.9)
    assert agg["support_paragraph_recall"] is None


def test_summarize_locomo_groups_keep_adversarial_apart():
    ms = [score(["a"], ["a"]), score(["a"], ["b"]), score(["a"], ["a"]), score(["a"], ["a", "b"])]
    groups = summarize([1, 2, 5, 4], ms)
    assert list(groups) == ["overall", "multi-hop", "temporal", "single-hop", "adversarial", "all"]
    assert groups["overall"]["n"] == 3 and groups["overall"]["evidence_recall"] == pytest.approx(2 / 3)
    assert groups["adversarial"]["n"] == 1 and groups["all"]["n"] == 4
    assert groups["single-hop"]["precision"] == pytest.approx(0.5)


def test_summarize_hotpot_types():
    ms = [score(["a"], ["a"]), score(["a"], ["b"])]
    groups = summarize(["comparison", "bridge"], ms)
    assert list(groups) == ["overall", "bridge", "comparison"]
    assert groups["overall"]["n"] == 2 and "all" not in groups
    with pytest.raises(ValueError):
        summarize([9], ms[:1])


# ---------------------------------------------------------------------------- passage R@k, chain following
def passage_graph():
    # passages P1..P6 (node id = title), P2 and P4 with sentence nodes
    ids = ["P1", "P2", "P2::0", "P2::1", "P3", "P4", "P4::0", "P5", "P6"]
    return toy_graph(ids, titles=[i.split("::")[0] for i in ids])


def chain_question(chain, support):
    return question(support, "3hop1", support, chain, qid="m")


def test_passage_recall_at_k_ranks_passages_by_first_loaded_node():
    g = passage_graph()
    # load order: P2 via its sentence, P2 again, P1, P4 via its sentence, P3, P5 -> passages P2, P1, P4, P3, P5
    loaded = ["P2::1", "P2", "P1", "P4::0", "P3", "P5"]
    m = question_metrics(chain_question([], ["P4", "P5"]), g, loaded, 10, 1, 0.0)
    assert m.passage_recall_2 == 0.0  # top-2 passages P2, P1
    assert m.passage_recall_5 == 1.0  # P4 is 3rd, P5 5th
    assert m.support_paragraph_hit == 1.0 and m.all_evidence_hit == 0.0  # P4 only through its sentence
    m = question_metrics(chain_question([], ["P1", "P6"]), g, loaded, 10, 1, 0.0)
    assert m.passage_recall_2 == 0.5 and m.passage_recall_5 == 0.5 and m.support_paragraph_recall == 0.5
    assert m.support_paragraph_hit == 0.0
    assert m.evidence_recall == 0.5 and m.support_sentence_recall is None  # passage-level gold has no sentence


def test_recall_at_k_on_a_conversation_reads_each_turn_as_its_passage():
    g = passage_graph()  # any node ids will do: a question without supporting titles ranks nodes
    q = Question(qid="c", graph="g", text="?", answer="x", evidence=("P4", "P5", "gone"), category=2)
    m = question_metrics(q, g, ["P1", "P4", "P2", "P3", "P5", "P6"], 10, 1, 0.0)
    assert m.passage_recall_2 == 0.5 and m.passage_recall_5 == 1.0  # "gone" names no node: gold is P4, P5
    assert m.support_paragraph_recall is None and m.evidence_recall == 1.0


def test_chain_following_counts_the_prefix_reached_in_order():
    g = passage_graph()
    loaded = ["P3", "P1", "P4::0", "P2", "P6"]  # passage positions P3 0, P1 1, P4 2, P2 3, P6 4

    def follow(chain):
        return question_metrics(chain_question(chain, sorted(set(chain))), g, loaded, 10, 1, 0.0).chain_following

    assert follow(["P1", "P4", "P2"]) == 1.0  # in order
    assert follow(["P1", "P2", "P4"]) == pytest.approx(2 / 3)  # P4 comes before P2: stops after step 2
    assert follow(["P4", "P1", "P2"]) == pytest.approx(1 / 3)
    assert follow(["P5", "P1"]) == 0.0  # first step never loaded
    assert follow(["P1", "P5", "P2"]) == pytest.approx(1 / 3)  # a missing step breaks the chain
    assert follow(["P1", "P1", "P6"]) == 1.0  # one passage supporting two steps is in order with itself
    m = question_metrics(chain_question([], ["P1"]), g, loaded, 10, 1, 0.0)
    assert m.chain_following is None  # no chain, no chain metric


def test_aggregate_reports_passage_metrics():
    g = passage_graph()
    rows = [
        question_metrics(chain_question(["P1", "P2"], ["P1", "P2"]), g, ["P1", "P3", "P2"], 10, 1, 0.0),
        question_metrics(chain_question(["P5", "P6"], ["P5", "P6"]), g, ["P6", "P5"], 10, 1, 0.0),
    ]
    agg = aggregate(rows)
    assert agg["passage_recall_2"] == pytest.approx((0.5 + 1.0) / 2)
    # chain P5 -> P6 with P6 loaded first: step 1 is reached, step 2 comes out of order -> 1/2
    assert agg["passage_recall_5"] == 1.0 and agg["chain_following"] == pytest.approx((1.0 + 0.5) / 2)
