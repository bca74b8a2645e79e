"""A question is bounded and every query-side pass is linear in it: the query-kind pass of a 100,000-word
question, the router's retrieval of one, and the refusal of a longer one take seconds, not minutes (the
query-kind pass re-read the text before each word: 102 s at 10^5 words)."""

import json
import time

import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget
from graphmem.core.retrieval import MAX_QUERY_TOKENS, Query, QueryTooLongError
from graphmem.index.lexical_features import query_kinds
from graphmem.policies.router import RouterPolicy
from models.walk_scorer import ScorerConfig, WalkScorer

SENTENCE = "Alice met Bob in Paris on 8 May 2023. They talked about the Garden Project for 3 hours! "


def words(n: int) -> str:
    return " ".join((SENTENCE.split() * (n // 17 + 1))[:n])


def test_the_query_kinds_of_a_100000_word_question_take_one_pass():
    t0 = time.perf_counter()
    kinds = query_kinds(words(100_000))
    assert time.perf_counter() - t0 < 5.0  # linear: ~0.1 s on an idle core; the quadratic pass took ~100 s
    assert kinds == {"name": {"bob", "paris", "garden", "project"}, "number": {"3", "8"}, "date": {"may", "2023"}}


def test_a_100000_word_question_is_served_and_a_longer_one_refused_in_one_line():
    graph = make_synthetic_graph(40, avg_degree=4.0, dim=8, seed=0)
    graph.texts = [f"{SENTENCE} turn {i}" for i in range(graph.num_nodes)]  # words the question shares
    policy = RouterPolicy(scorer=WalkScorer(ScorerConfig(dim=8)), device="cpu")
    t0 = time.perf_counter()
    found = policy.retrieve(graph, Query("long", words(100_000), torch.ones(8)), Budget())
    assert found.loaded and time.perf_counter() - t0 < 10.0  # ~0.3 s on an idle core
    t0 = time.perf_counter()
    with pytest.raises(QueryTooLongError) as refused:
        Query("longer", words(2 * MAX_QUERY_TOKENS), torch.ones(8))
    assert time.perf_counter() - t0 < 5.0
    message = str(refused.value)
    assert message.startswith("query 'longer': its text holds more than MAX_QUERY_TOKENS=131,072 tokens")
    assert "\n" not in message and isinstance(refused.value, ValueError)


def test_the_length_benchmark_writes_its_json_and_plot(tmp_path):
    from script_loader import load_script

    bench = load_script("benchmarks/bench_query_length")
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    args = ["--lengths", "10", "1000", "--policies", "bm25", "--repeats", "1", "--out", str(out), "--plot", str(png)]
    assert bench.main(args) == 0
    payload = json.loads(out.read_text())
    assert payload["lengths"] == [10, 1000] and len(payload["policies"]["bm25"]["seconds"]) == 2
    assert payload["refused"]["error"].startswith("query 'too-long': its text holds more than MAX_QUERY_TOKENS")
    assert png.read_bytes()[:4] == b"\x89PNG"
