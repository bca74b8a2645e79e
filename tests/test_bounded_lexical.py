"""Bounded lexical and hybrid entries: the pruned BM25 top-k is the exact top-k, the hybrid selector above its
threshold finds the exact entries, both follow node mutations, and the text scale sweep runs at tiny sizes."""

from pathlib import Path

import numpy as np
import pytest
import torch
from text_sweep import exact_twin, selector_recall, text_scaling_sweep

from graphmem.builders.synthetic import make_text_graph, text_queries
from graphmem.core import Budget, Query
from graphmem.index.lexical import BM25Index
from graphmem.policies import make_policy
from graphmem.policies.bm25 import BM25EntrySelector, bm25_ranking, bm25_top
from graphmem.policies.hybrid import HybridEntrySelector

POLICY_DIR = Path(__file__).resolve().parents[1] / "configs" / "policy"


def zipf_corpus(rng, n, vocab):
    """``n`` texts over ``vocab`` Zipf-drawn words, a fifth of them copies of others (equal scores: ties)."""
    words = [f"w{i}" for i in range(vocab)]
    p = 1.0 / np.arange(1, vocab + 1)
    texts = [" ".join(rng.choice(words, size=rng.integers(0, 12), p=p / p.sum())) for _ in range(n)]
    for i in rng.integers(0, n, size=n // 5):
        texts[int(rng.integers(0, n))] = texts[int(i)]
    return texts, words


def exact_top(index, query, k, tie):
    """The exact path's order: every row sharing a term, by (score desc, tie asc), cut at k."""
    rows, scores = index.rank(query)
    order = np.lexsort((tie[rows], -scores))[:k]
    return rows[order], scores[order]


def test_bounded_top_k_is_the_exact_top_k_on_random_corpora():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(120):
        texts, words = zipf_corpus(rng, int(rng.integers(1, 250)), int(rng.integers(3, 40)))
        index = BM25Index.build(texts)
        tie = rng.permutation(len(texts))
        for _ in range(4):
            query = " ".join(rng.choice(words, size=rng.integers(1, 6)))
            k, chunk = int(rng.integers(1, 20)), int(rng.integers(1, 9))
            want_rows, want_scores = exact_top(index, query, k, tie)
            got_rows, got_scores = index.rank_bounded(query, k, tie, chunk=chunk)
            assert np.array_equal(got_rows, want_rows) and np.array_equal(got_scores, want_scores)
            default_rows, _ = index.rank_bounded(query, k, chunk=chunk)  # ties by row
            assert np.array_equal(default_rows, index.rank(query, k)[0])
            checked += 1
    assert checked == 480
    assert index.rank_bounded("nothing shared", 5)[0].size == 0


def test_an_index_grown_row_by_row_ranks_as_one_built_at_once(monkeypatch):
    """Appended rows go to per-term lists beside the impact order, which is made anew once they are many: every
    ranking equals a fresh build's (the same float64 scores), the bounded top-k is still exact, and the bound
    on the unread postings holds though ``avgdl`` moved after the order was made."""
    from graphmem.index import lexical

    monkeypatch.setattr(lexical, "REBASE_MIN", 40)
    rng = np.random.default_rng(1)
    rebased = checked = 0
    for _ in range(12):
        texts, words = zipf_corpus(rng, int(rng.integers(40, 160)), int(rng.integers(3, 30)))
        words = words + ["late", "later"]  # terms only the appended rows hold
        texts += [" ".join(rng.choice(words, size=rng.integers(1, 9))) + " late" * int(i % 3 == 0) for i in range(60)]
        first = len(texts) - 60
        index = BM25Index.build(texts[:first])
        index._d()  # the impact order exists before the appends
        for stop in range(first + 1, len(texts) + 1, 7):
            base = index._d().base_nnz
            index.add(texts[index.num_rows : stop])
            d, fresh = index._d(), BM25Index.build(texts[:stop])
            rebased += d.base_nnz != base
            for query in [" ".join(rng.choice(words, size=rng.integers(1, 5))) for _ in range(3)] + ["late w0"]:
                want = fresh.rank(query)
                got = index.rank(query)
                assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
                k = int(rng.integers(1, 12))
                rows, scores = index.rank_bounded(query, k, chunk=int(rng.integers(1, 6)))
                assert np.array_equal(rows, fresh.rank(query, k)[0]) and np.array_equal(scores, fresh.rank(query, k)[1])
                checked += 1
            for t in np.flatnonzero(np.diff(d.post_ptr)):
                lo, hi = d.post_ptr[t], d.post_ptr[t + 1]
                weight = index.posting_weights(np.full(hi - lo, t), np.arange(lo, hi))
                suffix_max = np.maximum.accumulate(weight[::-1])[::-1]
                assert (index.bound(np.full(hi - lo, t), np.arange(lo, hi)) >= suffix_max).all()
    assert checked > 300 and rebased > 5


def test_bounded_top_k_stops_before_the_long_postings():
    """A rare term's matches outscore everything the common term can add: the common term's long postings
    are read one chunk deep, and the top-k is still exact."""
    texts = ["common filler"] * 5000 + ["common rare"] * 3 + ["rare"] * 2
    index = BM25Index.build(texts)
    rows, _ = index.rank_bounded("rare common", 5, chunk=16)
    assert sorted(rows.tolist()) == list(range(5000, 5005))
    assert np.array_equal(rows, index.rank("rare common", 5)[0])
    read, total = index.last_read
    assert total == 5 + 5003 and read <= 5 + 20  # "rare" and one chunk of "common", not its 5,003 postings


@pytest.fixture(scope="module")
def text_graph():
    return make_text_graph(1500, dim=16, seed=3)


def test_bm25_policy_and_selector_bounded_match_exact(text_graph):
    queries = text_queries(text_graph, 12, seed=4)
    queries.append(Query("none", "nothing in common", queries[0].embedding))
    budget = Budget()
    exact, bounded = make_policy("bm25"), make_policy("bm25", min_nodes=0)
    for q in queries:
        a = exact.retrieve_batch(text_graph, [q], budget)[0].loaded_ids(text_graph)
        b = bounded.retrieve_batch(text_graph, [q], budget)[0].loaded_ids(text_graph)
        assert a == b and len(a) == budget.max_nodes
        rows, scores = bm25_ranking(text_graph, q.text)
        top_rows, top_scores = bm25_top(text_graph, q.text, 7)
        assert np.array_equal(top_rows, rows[:7]) and np.array_equal(top_scores, scores[:7])
    assert BM25EntrySelector(min_nodes=0).select(text_graph, queries, budget) == BM25EntrySelector().select(
        text_graph, queries, budget
    )


def test_hybrid_above_threshold_finds_the_exact_entries_and_follows_mutations():
    graph = make_text_graph(1500, dim=16, seed=3)  # mutated below: not the shared one
    queries = text_queries(graph, 40, seed=6)
    budget = Budget()
    bounded = HybridEntrySelector(min_nodes=0)
    assert bounded.bounded(graph) and not exact_twin(bounded).bounded(graph)
    assert selector_recall(bounded, graph, queries, budget) >= 0.99
    # nodes added and removed on the live graph: the BM25 index and the vector index follow
    extra = make_text_graph(200, dim=16, seed=9)
    graph.add_nodes([f"x{i:03d}" for i in range(200)], extra.texts, extra.embeddings)
    graph.remove_nodes([graph.node_ids[i] for i in range(0, 300, 3)])
    moved = text_queries(graph, 40, seed=7)
    assert selector_recall(bounded, graph, moved, budget) >= 0.99
    for q in moved[:10]:
        assert np.array_equal(bm25_top(graph, q.text, 12)[0], bm25_ranking(graph, q.text)[0][:12])
    policy = make_policy("hybrid", min_nodes=0)
    loaded = policy.retrieve_batch(graph, moved[:3], budget)
    assert all(0 < len(r.loaded_ids(graph)) <= budget.max_nodes for r in loaded)


def test_text_graph_has_long_and_short_postings():
    graph = make_text_graph(4000, dim=8, seed=1)
    from graphmem.index.lexical import bm25_for

    df = bm25_for(graph)._d().df
    assert df.max() > 0.2 * graph.num_nodes and np.median(df[df > 0]) < 0.01 * graph.num_nodes
    assert any(w[:1].isupper() for w in graph.texts[0].split()[1:])  # a name
    q = text_queries(graph, 3, seed=2)
    assert all(q_.text.startswith("When did we talk about") and q_.embedding.shape == (8,) for q_ in q)
    assert torch.allclose(graph.embeddings.norm(dim=1), torch.ones(graph.num_nodes), atol=1e-5)


def test_text_scaling_sweep_small():
    sizes = dict(sizes=[300, 600], avg_degree=4.0, dim=8, seed=0, index_threads=1)
    cfg = dict(sizes, queries=6, slow_queries=2, query_noise=0.3, rounds=1)
    cfg["variants"] = {
        "router": {"policy": "router", "config": str(POLICY_DIR / "router.yaml")},
        "hybrid": {"policy": "hybrid", "config": str(POLICY_DIR / "hybrid.yaml"), "min_nodes": 500},
        "bm25": {"policy": "bm25", "config": str(POLICY_DIR / "bm25.yaml"), "min_nodes": 0},
        "beta_bfs": {"policy": "beta_bfs", "config": str(POLICY_DIR / "beta_bfs.yaml"), "slow": True},
    }
    rep = text_scaling_sweep(cfg, Budget(), log=lambda *_: None)
    assert list(rep["sizes"]) == ["300", "600"] and rep["torch_threads"] >= 1
    small, large = (rep["sizes"][s]["policies"] for s in ("300", "600"))
    assert small["hybrid"]["bounded"] is False and large["hybrid"]["bounded"] is True
    assert small["bm25"]["bounded"] is True and small["beta_bfs"]["entry_recall_at_k"] is None
    for entry in rep["sizes"].values():
        assert entry["bm25_build_s"] >= 0 and entry["rss_mb"] > 0 and list(entry["index"]) == ["hnsw-m32-efc80"]
        for name, res in entry["policies"].items():
            assert 0 < res["end_to_end_p50_ms"] <= res["end_to_end_p95_ms"], name
            if name != "beta_bfs":
                assert res["entry_recall_at_k"] >= 0.99, name
    assert set(rep["growth"]) == {"router", "hybrid", "bm25", "beta_bfs"}


def test_benchmark_script_runs_the_text_suite(tmp_path):
    import json
    import sys

    from hydra import compose, initialize_config_dir

    sys.path.insert(0, str(Path(__file__).parent))
    from script_loader import load_script

    root = Path(__file__).resolve().parents[1]
    tiny = ["+suite=scaling_text", "suite.sizes=[200]", "suite.queries=3", "suite.dim=8", "suite.serve_repeats=1"]
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose(config_name="benchmark", overrides=tiny + [f"out_dir={tmp_path}", "logger=none"])
    load_script("benchmark").run(cfg)
    saved = json.loads((tmp_path / "scaling_text.json").read_text())
    assert set(saved["sizes"]["200"]["policies"]) == {"router", "hybrid", "bm25", "beta_bfs"}
    assert saved["command"].startswith("python scripts/benchmark.py") and saved["torch_threads"] == 1


def test_bounded_page_renders_the_lexical_section(tmp_path):
    import json

    from docgen import bounded

    run = {"evidence_recall": 0.63, "served_p50_ms": 0.3, "served_p95_ms": 0.4}
    pair = {
        "first": run,
        "second": {**run, "served_p50_ms": 0.5},
        "paired": {"n": 1224, "first": 0.63, "second": 0.63, "diff": 0.0, "ci": [0.0, 0.0], "p": 1.0},
        "identical_loaded_share": 0.995,
    }
    (tmp_path / "bounded_hybrid.json").write_text(json.dumps({"pairs": {"locomo": pair}, "command": "cmd-h"}))
    served = {"end_to_end_p50_ms": 1.0, "end_to_end_p95_ms": 2.0, "end_to_end_cpu_p50_ms": 0.9}
    size = {"graph_build_s": 1.0, "bm25_build_s": 2.0, "lexical_tables_s": 0.5, "rss_mb": 1234.0}
    sweep = {
        "sizes": {
            "1000": {**size, "index": {}, "policies": {"bm25": {**served, "entry_recall_at_k": 1.0, "bounded": False}}},
            "1000000": {
                **size,
                "index": {"hnsw": {"build_s": 3.0}},
                "policies": {"bm25": {**served, "entry_recall_at_k": 0.995, "bounded": True}},
            },
        },
        "growth": {"bm25": {"p50_largest_over_smallest": 1.0, "cpu_p50_largest_over_smallest": 1.0}},
        "load_average_at_start": [1.0, 1.0, 1.0],
        "load_average_at_end": [2.0, 2.0, 2.0],
        "torch_threads": 1,
        "omp_num_threads": "1",
        "command": "cmd-t",
    }
    (tmp_path / "scaling_text.json").write_text(json.dumps(sweep))
    page = bounded.render(tmp_path)
    assert "| locomo | 1,224 | 0.6300 | 0.6300 | +0.0000 [+0.0000, +0.0000] | 1.000 | 99.5% |" in page
    assert "| `bm25` | 1.00 / 2.00 (0.90) | 1.00 / 2.00 (0.90) | 1.00×, 1.00× |" in page
    assert "| `bm25` | 1.0000 | 0.9950 † |" in page and "| 1,000,000 | 1.0 | 2.0 | 3.0 | 0.5 | 1,234 |" in page
    assert "`cmd-h`" in page and "`cmd-t`" in page and "(bounded_bm25.json not present: not measured)" in page
    assert "OMP_NUM_THREADS=1" in page


def test_hybrid_index_is_set_from_the_command_line():
    """``policy.index={kind: ivf, ...}`` (or just its kind) composes onto the hybrid schema and reaches the index
    spec; a kind FAISS does not have is refused naming the field."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import graphmem.config.schemas  # noqa: F401  (registers the schemas)
    from graphmem.policies import make_policy

    def made(cfg):
        return make_policy({k: v for k, v in OmegaConf.to_container(cfg.policy).items() if k != "name"})

    root = Path(__file__).resolve().parents[1]
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        for override, kind in (("policy.index={kind: ivf, nprobe: 32}", "ivf"), ("policy.index=ivf", "ivf")):
            cfg = compose(config_name="evaluate", overrides=["policy=hybrid", "policy.min_nodes=0", override])
            policy = made(cfg)
            assert policy.fusion.spec.kind == kind and policy.fusion.min_nodes == 0
        cfg = compose(config_name="evaluate", overrides=["policy=hybrid", "policy.index={kind: bogus}"])
    with pytest.raises(Exception, match="IndexSpec.kind 'bogus'"):
        made(cfg)


def test_bounded_and_exact_hybrid_break_ties_alike_when_every_cosine_is_0():
    graph = make_text_graph(600, dim=16, seed=5)
    odd = text_queries(graph, 8, seed=8)  # their words hit the graph; their embeddings point nowhere it does
    zero = torch.zeros(graph.dim)
    zero[0] = 1.0
    graph.embeddings[:, 0] = 0.0  # no node has a component along the queries' direction: every cosine is 0
    queries = [Query(q.qid, q.text, zero) for q in odd]
    budget = Budget()
    bounded, exact = HybridEntrySelector(min_nodes=0), HybridEntrySelector()
    assert bounded.bounded(graph) and not exact.bounded(graph)
    assert bounded.rank(graph, queries, budget) == exact.rank(graph, queries, budget)
    assert bounded.dense(graph, queries, 12) == exact.dense(graph, queries, 12)
