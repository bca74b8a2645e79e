"""Lexical features of query and node text (graphmem/index/lexical_features.py): exact values by hand, the
pair and dense paths agree, they read no gold, the walk scorer learns a rare shared word the embedding
does not show, and ``lexical=False`` is the scorer without them."""

from __future__ import annotations

import dataclasses
import math

import torch

from graphmem.core import Budget
from graphmem.core.graph import MemoryGraph
from graphmem.datasets.types import Question
from graphmem.eval.harness import evaluate_policy
from graphmem.index.lexical import bm25_for
from graphmem.index.lexical_features import dense_features, lexical_inputs, pair_features, query_kinds
from graphmem.policies import make_policy
from graphmem.policies.walk import walk
from models.edge_encoder import EDGE_FEATURE_DIM, NUM_PAIR_FEATURES
from models.gnn_reader import GNNReader
from models.walk_scorer import NUM_PATH_FEATURES, NUM_SIMILARITY_FEATURES, ScorerConfig, WalkScorer
from rl.walk.data import walk_data
from rl.walk.trainer import TrainConfig, WalkTrainer
from tests.test_no_gold_leak import _policy_view, graphset, scrambled

TEXTS = ["Paris in May", "Caroline paints 3 cats", "Caroline visited Paris"]
QUERY = "Did Caroline see Paris in May?"


def text_graph(texts, dim: int = 4, seed: int = 0) -> MemoryGraph:
    g = MemoryGraph.empty(dim)
    gen = torch.Generator().manual_seed(seed)
    g.add_nodes([f"n{i}" for i in range(len(texts))], list(texts), torch.randn(len(texts), dim, generator=gen))
    return g


def test_features_of_a_hand_made_case():
    """Tokens: paris may | caroline paints 3 cats | caroline visited paris (avgdl 3, N 3, k1 1.5, b 0.75);
    the query's are caroline, see, paris, may: names caroline, paris; date may; rare (df <= 1) see, may."""
    g = text_graph(TEXTS)
    assert query_kinds(QUERY) == {"name": {"caroline", "paris"}, "number": set(), "date": {"may"}}
    lex = lexical_inputs([g], [[QUERY, "How many cats did Caroline paint in 2023, 3 or 4?"]])
    got = pair_features(lex, torch.tensor([0, 0, 0, 1]), torch.tensor([0, 1, 2, 1]))
    idf1, idf2 = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5)  # df 1 and df 2
    bound = 2.5 * (2 * idf2 + idf1)  # (k1 + 1) Σ idf over caroline, paris, may (see: in no node, idf 0)
    w = lambda dl: 2.5 / (1 + 1.5 * (0.25 + 0.75 * dl / 3))  # noqa: E731  tf = 1
    want = torch.tensor(
        [
            [w(2) * (idf2 + idf1) / bound, 1 / 2, 1 / 2, 0.0, 1.0],  # paris, may
            [w(4) * idf2 / bound, 0.0, 1 / 2, 0.0, 0.0],  # caroline
            [w(3) * 2 * idf2 / bound, 0.0, 1.0, 0.0, 0.0],  # caroline, paris
            # the second query: names caroline; numbers 3, 4; date 2023; node 1 holds cats, caroline, 3
            [got[3, 0].item(), 2 / 6, 1.0, 1 / 2, 0.0],  # rare: many cats paint 2023 3 4
        ]
    )
    assert torch.allclose(got, want, atol=1e-6)
    index = bm25_for(g)  # φ_bm25 is the index's BM25 score over its local bound
    assert torch.allclose(got[:3, 0], index.scores(QUERY, torch.arange(3)) / index.max_score(QUERY), atol=1e-6)
    assert torch.allclose(dense_features(lex)[0], got[:3], atol=1e-6)


def test_pair_and_dense_features_agree_over_a_graph_union():
    a, b = text_graph(TEXTS), text_graph(["cats in Paris", "dogs in May 2023", "nothing here"], seed=1)
    lex = lexical_inputs([a, b], [[QUERY], ["Where are the cats of Paris?", "dogs 2023"]])
    query = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    node = torch.tensor([0, 1, 2, 3, 4, 5, 3, 4, 5])
    pairs = pair_features(lex, query, node)
    dense = dense_features(lex)
    assert torch.allclose(pairs, dense[query, node], atol=1e-6)
    assert float(pairs[3, 0]) > 0 and float(pairs[7, 4]) == 1.0  # cats/paris in b's node 0; 2023 in node 1
    assert float(dense[1:, :3].abs().sum()) > 0  # a table of the union: b's queries also meet a's nodes
    assert torch.equal(lexical_inputs([a], [[QUERY]]).queries.term[0], lex.queries.term[0])


def scanned_features(lex, query, node):
    """The features by a scan of each node's entries in CSR order, each hit added in that order."""
    q, nodes = lex.queries, lex.nodes
    out = torch.zeros(node.numel(), q.value.shape[-1], dtype=q.value.dtype)
    for c, (i, v) in enumerate(zip(query.tolist(), node.tolist())):
        for e in range(int(nodes.rowptr[v]), int(nodes.rowptr[v + 1])):
            match = (q.term[i] == nodes.term[e]) & q.valid[i]
            if bool(match.any()):
                contrib = q.value[i, int(match.nonzero()[0])].clone()
                contrib[0] = contrib[0] * nodes.weight[e]
                out[c] += contrib
    return out / q.norm[query]


def test_pair_features_are_the_scan_of_each_nodes_entries_bit_for_bit():
    """Found by binary search, the hits are still summed in the node's entry order: the same floats."""
    gen = torch.Generator().manual_seed(3)
    words = "paris may caroline cats 2023 3 melanie garden book run lake june oslo 7 april tea".split()
    texts = [" ".join(words[i] for i in torch.randint(0, len(words), (9,), generator=gen).tolist()) for _ in range(30)]
    a, b = text_graph(texts[:18], seed=1), text_graph(texts[18:], seed=2)
    queries = [" ".join(words[i] for i in torch.randperm(len(words), generator=gen)[:7].tolist()) for _ in range(6)]
    lex = lexical_inputs([a, b], [queries[:3], queries[3:]])
    query = torch.cat([torch.arange(3).repeat_interleave(18), torch.arange(3, 6).repeat_interleave(12)])
    node = torch.cat([torch.arange(18).repeat(3), torch.arange(18, 30).repeat(3)])  # each query's own graph
    assert torch.equal(pair_features(lex, query, node), scanned_features(lex, query, node))


def lexical_scorer(dim: int, seed: int) -> WalkScorer:
    scorer = WalkScorer(ScorerConfig(dim=dim, rank=4))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in scorer.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return scorer


def lexical_reader(dim: int) -> GNNReader:
    torch.manual_seed(0)
    reader = GNNReader(input_dim=dim, num_relations=4, lexical=True)
    with torch.no_grad():
        reader.lexical_weight.copy_(torch.tensor([8.0, 4.0, 2.0, 1.0, 1.0]))
    return reader


def test_lexical_policies_read_no_gold():
    gs = graphset()
    # questions that share words with the nodes, so the features are not all zero
    gs.questions = [
        dataclasses.replace(q, text=" ".join(gs.graphs[q.graph].texts[i % 7].split()[:4]))
        for i, q in enumerate(gs.questions)
    ]
    budget = Budget(max_entries=3, top_k_neighbors=2, max_hops=2, max_nodes=8, max_tokens=400)
    for policy in (
        make_policy("router", scorer=lexical_scorer(16, 1), device="cpu"),
        make_policy("gnn", reader=lexical_reader(16), device="cpu"),
    ):
        true = evaluate_policy(policy, gs, budget, progress=False)
        fake = evaluate_policy(policy, scrambled(gs), budget, progress=False)
        assert _policy_view(true) == _policy_view(fake)
        assert [r["metrics"] for r in true.rows] != [r["metrics"] for r in fake.rows]
    g = gs.graphs["conv-0"]
    lex = lexical_inputs([g], [[gs.questions[0].text]])
    assert float(dense_features(lex).max()) > 0


# ---------------------------------------------------------------------- a rare word the embedding misses
RARE_BUDGET = Budget(max_entries=1, top_k_neighbors=1, max_hops=1, max_nodes=2)
WORDS = "zorblat quimmet vashnor plitrix gondrel yaskir".split()


def rare_word_set(seed: int, tasks: int = 6, dim: int = 32):
    """Per task: an entry (cosine ~0.99 to the query), two decoys (cosine ~0.6) and three fillers
    (cosine ~0), all neighbours of the entry; one filler, the gold, names the query's rare word."""
    gen = torch.Generator().manual_seed(seed)
    g = MemoryGraph.empty(dim)
    unit = lambda v: torch.nn.functional.normalize(v, dim=-1)  # noqa: E731
    questions, emb = [], []
    name = f"rare{seed}"
    for t in range(tasks):
        q = unit(torch.randn(dim, generator=gen))
        ortho = lambda: unit((r := torch.randn(dim, generator=gen)) - (r @ q) * q)  # noqa: E731
        word = f"{WORDS[t % len(WORDS)]}{seed}x{t}"
        rows = [unit(q + 0.1 * torch.randn(dim, generator=gen))]
        rows += [unit(0.6 * q + 0.8 * ortho()) for _ in range(2)]
        rows += [unit(ortho() + 0.05 * torch.randn(dim, generator=gen)) for _ in range(3)]
        texts = [f"entry note number {t}", "decoy plain words", "decoy other words"]
        texts += [f"the {word} sits here", "filler plain text", "filler other text"]
        ids = [f"t{t}n{i}" for i in range(6)]
        order = torch.randperm(6, generator=gen).tolist()
        g.add_nodes([ids[i] for i in order], [texts[i] for i in order], torch.stack([rows[i] for i in order]))
        targets = [ids[1 + i] for i in torch.randperm(5, generator=gen).tolist()]  # no order to read
        g.add_edges([g.index_of(ids[0])] * 5, [g.index_of(i) for i in targets], "semantic")
        questions.append(Question(f"{name}#{t}", name, f"where does the {word} sit", None, (ids[3],), 1))
        emb.append(q)
    g.info["name"] = name
    return {name: g}, questions, torch.stack(emb)


def rare_recall(scorer, seed: int) -> float:
    graphs, questions, emb = rare_word_set(seed)
    d = walk_data(graphs, questions, emb, RARE_BUDGET)
    lexical = d.lexical if scorer.config.lexical else None
    ep = walk(d.tables, scorer, d.q, d.entries, RARE_BUDGET, lexical=lexical)
    return float(((ep.loaded[:, :, None] == d.gold[:, None, :]).any(1).sum(1) / (d.gold >= 0).sum(1)).mean())


def train_rare(lexical: bool) -> WalkScorer:
    graphs, questions, emb = {}, [], []
    for s in (0, 1, 2):
        g, q, e = rare_word_set(s)
        graphs.update(g)
        questions += q
        emb.append(e)
    val_graphs, val_q, val_emb = rare_word_set(7)
    cfg = TrainConfig.from_mapping(
        {
            "model": {"rank": 0, "stop": False, "lexical": lexical},
            "objective": {"imitation_epochs": 4, "rl_epochs": 0, "temperature": 0.5},
            "optim": {"lr": 2e-2, "batch_size": 6},
            "run": {"device": "cpu"},
        }
    )
    trainer = WalkTrainer(cfg, {**graphs, **val_graphs}, questions, torch.cat(emb), val_q, val_emb, RARE_BUDGET)
    assert rare_recall(trainer.scorer, 11) == 0.0  # untrained: the walk takes a decoy by cosine
    return trainer.learn().scorer


def test_walk_learns_a_shared_rare_word_the_embedding_does_not_show():
    assert rare_recall(train_rare(lexical=True), 11) >= 0.9  # a graph it never saw
    assert rare_recall(train_rare(lexical=False), 11) <= 0.5  # the gold looks like the fillers


def test_lexical_false_is_the_scorer_without_lexical_inputs():
    old_width = EDGE_FEATURE_DIM + NUM_PAIR_FEATURES + NUM_SIMILARITY_FEATURES + NUM_PATH_FEATURES
    plain = WalkScorer(ScorerConfig(dim=32, rank=4, lexical=False))
    assert plain.head[0].in_features == old_width
    assert WalkScorer(ScorerConfig(dim=32, rank=4)).head[0].in_features == old_width + 5
    graphs, questions, emb = rare_word_set(5)
    d = walk_data(graphs, questions, emb, RARE_BUDGET)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in plain.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    a = walk(d.tables, plain, d.q, d.entries, RARE_BUDGET)
    b = walk(d.tables, plain, d.q, d.entries, RARE_BUDGET, lexical=d.lexical)  # given, and ignored
    assert torch.equal(a.scores, b.scores) and torch.equal(a.loaded, b.loaded)
    # a checkpoint written before the switch existed loads as the scorer without lexical features
    state = plain.checkpoint()
    del state["config"]["lexical"]
    assert WalkScorer.from_checkpoint(state).config.lexical is False
    try:
        walk(d.tables, WalkScorer(ScorerConfig(dim=32)), d.q, d.entries, RARE_BUDGET)
    except ValueError as err:
        assert "lexical" in str(err)
    else:
        raise AssertionError("a lexical scorer walked without its lexical inputs")
