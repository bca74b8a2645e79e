"""The bm25 and hybrid policies and the hybrid entry selector: lexical matches, fusion, graph batches, configs."""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from policy_references import REFERENCES

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.policies import make_entry_selector, make_policy
from graphmem.policies.hybrid import HybridEntrySelector, rrf
from tests.script_loader import compose

WALKS = ["beta_bfs", "ppr", "uniform_bfs", "router", "gnn"]
WORDS = "apple river stone cloud garden lamp violin harbor meadow pepper".split()


def worded_graph(n: int = 60, dim: int = 8, seed: int = 0) -> MemoryGraph:
    """A synthetic graph whose node texts are short sentences of a small vocabulary."""
    g = make_synthetic_graph(n, dim=dim, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(WORDS), (n, 4), generator=gen).tolist()
    g.texts = [" ".join(WORDS[i] for i in row) + f" note {v}" for v, row in enumerate(picks)]
    return g


def worded_queries(g: MemoryGraph, count: int = 8) -> list[Query]:
    gen = torch.Generator().manual_seed(1)
    rows = torch.randint(0, g.num_nodes, (count,), generator=gen).tolist()
    return [
        Query(
            f"q{i}", f"where is the {g.texts[r].split()[0]} {WORDS[i % len(WORDS)]}", torch.randn(g.dim, generator=gen)
        )
        for i, r in enumerate(rows)
    ]


def rare_word_graph() -> tuple[MemoryGraph, Query]:
    """The gold node holds the query's rare word but points away from the query embedding; twenty
    distractors point along it and share only common words."""
    dim = 8
    q = torch.zeros(dim)
    q[0] = 1.0
    emb = torch.zeros(21, dim)
    emb[:20, 0] = 1.0
    emb[:20, 1:] = 0.1 * torch.randn(20, dim - 1, generator=torch.Generator().manual_seed(0))
    emb[20, 5] = 1.0
    texts = [f"we talked about the weather on day {i}" for i in range(20)] + ["the xylophone concert was loud"]
    g = MemoryGraph.empty(dim)
    g.add_nodes([f"n{i:02d}" for i in range(21)], texts, emb)
    return g, Query("q", "when did we talk about the xylophone?", q)


def test_bm25_and_hybrid_find_the_rare_word_node_dense_does_not():
    g, q = rare_word_graph()
    budget = Budget(max_nodes=5, max_entries=3)
    gold = g.index_of("n20")
    assert gold not in make_policy("dense_topk").retrieve(g, q, budget).loaded
    assert make_policy("bm25").retrieve(g, q, budget).loaded[0] == gold
    assert gold in make_policy("hybrid").retrieve(g, q, budget).loaded
    assert gold in make_entry_selector("hybrid").select(g, [q], budget)[0]
    assert gold not in make_entry_selector("embedding").select(g, [q], budget)[0]


def test_rrf_matches_a_hand_computed_case():
    # dense: 3, 1, 2; bm25: 2, 4. k = 10, weights 1 and 2
    fused = dict(rrf([[3, 1, 2], [2, 4]], [1.0, 2.0], 10, id_rank=[0, 1, 2, 3, 4]))
    assert fused == pytest.approx({3: 1 / 11, 1: 1 / 12, 2: 1 / 13 + 2 / 11, 4: 2 / 12})
    order = [v for v, _ in rrf([[3, 1, 2], [2, 4]], [1.0, 2.0], 10, id_rank=[0, 1, 2, 3, 4])]
    assert order == [2, 4, 3, 1]
    # equal scores: ascending id rank (row 1 ranks before row 0 here)
    assert [v for v, _ in rrf([[0], [1]], [1.0, 1.0], 60, id_rank=[1, 0])] == [1, 0]


@pytest.mark.parametrize("name", ["bm25", "hybrid"])
def test_worded_queries_match_the_references(name):
    g = worded_graph()
    queries = worded_queries(g)
    p = make_policy(name, **({"candidates": 7} if name == "hybrid" else {}))
    for budget in (Budget(), Budget(max_nodes=4, max_tokens=30)):
        got = p.retrieve_batch(g, queries, budget)
        want = [REFERENCES[name](p, g, q, budget) for q in queries]
        assert [(r.loaded, r.entries, r.loaded_tokens) for r in got] == [
            (r.loaded, r.entries, r.loaded_tokens) for r in want
        ]
        assert [s for r in got for s in r.scores] == pytest.approx([s for r in want for s in r.scores], abs=1e-6)
    assert any(r.scores[0] > 0 for r in got)  # lexical matches were found


def test_each_query_of_a_graph_batch_gets_entries_from_its_own_graph():
    graphs = [worded_graph(40, seed=s) for s in (0, 1, 2)]
    queries = [worded_queries(g, 3) for g in graphs]
    budget = Budget()
    for name in ("beta_bfs", "ppr"):
        p = make_policy(name, entry_selector="hybrid")
        together = p.retrieve_graphs(graphs, queries, budget)
        for g, qs, rs in zip(graphs, queries, together):
            own = HybridEntrySelector().select(g, qs, budget)
            assert [r.entries for r in rs] == own
            assert [r.loaded for r in rs] == [r.loaded for r in p.retrieve_batch(g, qs, budget)]


def _configured(walk: str, overrides: list[str], tmp_path: Path):
    cfg = OmegaConf.to_container(compose("evaluate", [f"policy={walk}", *overrides]).policy, resolve=True)
    cfg.pop("name")
    if walk == "gnn":
        from models.gnn_reader import GNNReader
        from rl.gnn.train import save_checkpoint

        cfg["checkpoint"] = str(save_checkpoint(GNNReader(input_dim=8), tmp_path / "reader.pt"))
    if walk == "router":
        from models.walk_scorer import ScorerConfig, WalkScorer

        cfg["scorer"] = WalkScorer(ScorerConfig(dim=8, hidden=8))
    return make_policy(cfg)


@pytest.mark.parametrize("walk", WALKS)
def test_entry_selector_hybrid_composes_with_every_walk(walk, tmp_path):
    g = worded_graph()
    queries = worded_queries(g, 4)
    budget = Budget()
    p = _configured(walk, ["policy.entry_selector=hybrid"], tmp_path)
    assert type(p.entry_selector) is HybridEntrySelector
    want = HybridEntrySelector().select(g, queries, budget)
    assert [r.entries for r in p.retrieve_batch(g, queries, budget)] == want
    tuned = _configured(walk, ["policy.entry_selector={name: hybrid, k: 5, candidates: 3, bm25_weight: 2.0}"], tmp_path)
    assert tuned.entry_selector.k == 5 and tuned.entry_selector.weights == (1.0, 2.0)
    assert [r.entries for r in tuned.retrieve_batch(g, queries, budget)] == tuned.entry_selector.select(
        g, queries, budget
    )


def test_the_lexical_page_renders_from_its_results_and_names_missing_ones(tmp_path):
    from docgen.lexical import render

    empty = render(tmp_path)
    assert "`lexical_baselines.json` is missing" in empty and "`lexical_library_bench.json` is missing" in empty
    results = Path(__file__).resolve().parents[1] / "docs" / "results"
    page = render(results)
    for name in ("lexical_library_bench.json", "lexical_baselines.json", "lexical_baselines_walks.json"):
        assert ((results / name).is_file()) == (f"`{name}` is missing" not in page)
