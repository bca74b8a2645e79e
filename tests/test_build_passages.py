"""Passage-corpus graphs: MuSiQue per question, pooled HotpotQA / MuSiQue corpora, title mentions, sentences."""

import collections

import pytest

from graphmem.builders import DataConfig, GraphConfig, build_graphset, graphset_dir
from graphmem.builders.entities import CueEntityExtractor
from graphmem.builders.passages import (
    Passage,
    build_passage_graph,
    corpus,
    dedupe_titles,
    musique_passages,
    node_texts,
    title_mentions,
)
from graphmem.builders.registry import load_units
from graphmem.builders.sentences import split_sentences
from graphmem.builders.units import pooled_name
from graphmem.datasets import data_file, load_hotpotqa, load_musique
from graphmem.index.embed import HashingEncoder

MUSIQUE = "musique/musique_ans_50.json"
HOTPOT = "hotpotqa/hotpot_dev_distractor_200.jsonl"
HOTPOT_TRAIN = "hotpotqa/hotpot_train_100.jsonl"


def _graph(c, cfg):
    texts = node_texts(c, cfg)
    return build_passage_graph(c, HashingEncoder().encode(texts), cfg, CueEntityExtractor())


def test_title_mentions_whole_words_parenthetical_and_stopwords():
    titles = ["Tom Hanks (actor)", "Paris", "The", "Ohio River", "X"]
    texts = [
        "Tom Hanks was born in Concord.",
        "They met in paris, then Parisian cafes.",
        "The the x",
        "ohio-river trip",
    ]
    assert title_mentions(texts, titles) == [{0}, {1}, set(), {3}]


def test_dedupe_titles_joins_distinct_texts_in_order():
    got, merged = dedupe_titles(
        [Passage("A", "one.", ("one.",)), Passage("B", "b."), Passage("A", "two.", ("two.",)), Passage("A", "one.")]
    )
    assert [p.title for p in got] == ["A", "B"] and merged == ["A"]
    assert got[0].text == "one. two." and got[0].sentences == ("one.", "two.")
    first, merged = dedupe_titles([Passage("A", "one."), Passage("A", "two."), Passage("B", "b.")], mode="first")
    assert [(p.title, p.text) for p in first] == [("A", "one."), ("B", "b.")] and merged == ["A"]
    with pytest.raises(ValueError, match="duplicate-title mode"):
        dedupe_titles([], mode="last")


def test_pooled_corpora_counts_without_encoding():
    cfg = GraphConfig(encoder="hashing")
    units, questions, report = load_units("musique", data_file(MUSIQUE), cfg, pooled=True)
    assert len(units) == 1 and len(units[0].texts) == 911 and units[0].name == pooled_name(MUSIQUE)
    assert len(report.merged_titles) == 36 and any("titles with several texts" in x for x in report.lines())
    assert len(questions) == 50 and {q.graph for q in questions} == {units[0].name}
    units, questions, _ = load_units("hotpotqa", data_file(HOTPOT), cfg, pooled=True)
    assert len(units[0].texts) == 1999 and len(questions) == 200
    # without sentence nodes a HotpotQA question's gold is its supporting passages
    assert all(q.evidence == q.support_titles and len(q.evidence) == 2 for q in questions)
    per_question, questions, _ = load_units("musique", data_file(MUSIQUE), cfg, limit=4)
    assert [u.name for u in per_question] == [q.graph for q in questions] and len(per_question) == 4


def test_musique_graph_nodes_edges_and_gold():
    cfg = GraphConfig(encoder="hashing")
    gs = build_graphset(DataConfig(name="musique", limit=3), cfg, encoder=HashingEncoder(), progress=False)
    assert gs.dataset == "musique" and len(gs.graphs) == 3
    for q in gs.questions:
        g = gs.graphs[q.graph]
        assert all(g.has_node(e) for e in q.evidence) and all(g.has_node(c) for c in q.support_chain)
        assert {m["kind"] for m in g.metadata} == {"passage"}
        assert g.num_nodes == len({m["title"] for m in g.metadata}) <= 20
        rels = collections.Counter(g.relations[int(t)] for t in g.edge_type)
        assert rels["semantic"] > 0 and rels["entity"] > 0 and rels["temporal"] == 0
    # a passage naming another passage's title is linked to it by an entity edge
    pairs = 0
    for g in gs.graphs.values():
        titles = list(g.node_ids)
        named = title_mentions([g.texts[i][len(t) + 2 :] for i, t in enumerate(titles)], titles)  # "<title>: <text>"
        src, dst = g.edge_index
        entity = g.edge_type == g.relations.index("entity")
        linked = set(zip(src[entity].tolist(), dst[entity].tolist()))
        for a, found in enumerate(named):
            for b in found - {a}:
                assert (a, b) in linked and (b, a) in linked
                pairs += 1
    assert pairs > 0


def test_sentence_nodes_split_musique_and_link_to_their_passage():
    cfg = GraphConfig(encoder="hashing", sentence_nodes=True)
    record = load_musique(data_file(MUSIQUE))[0][0]
    c = corpus(record.qid, "musique", musique_passages(record))
    g = _graph(c, cfg)
    kinds = collections.Counter(m["kind"] for m in g.metadata)
    assert kinds["passage"] == len(c.passages) and kinds["sentence"] > kinds["passage"]
    first = c.passages[0]
    sentences = split_sentences(first.text)
    assert [g.texts[g.index_of(f"{first.title}::{i}")] for i in range(len(sentences))] == [
        f"{first.title}: {s}" for s in sentences
    ]
    temporal = g.relations.index("temporal")
    src, dst = g.edge_index
    p, s0 = g.index_of(first.title), g.index_of(f"{first.title}::0")
    assert ((src == p) & (dst == s0) & (g.edge_type == temporal)).any()


def test_split_sentences_keeps_abbreviations():
    text = "Dr. Smith moved to the U.S. in 1990. He worked at St. Mary's Hospital. It closed."
    assert split_sentences(text) == (
        "Dr. Smith moved to the U.S. in 1990.",
        "He worked at St. Mary's Hospital.",
        "It closed.",
    )
    assert split_sentences("  ") == ()


@pytest.mark.parametrize("sentence_nodes", [False, True])
def test_hotpot_pooled_graphset(sentence_nodes):
    cfg = GraphConfig(encoder="hashing", sentence_nodes=sentence_nodes)
    data = DataConfig(name="hotpotqa", pooled=True, limit=6)
    gs = build_graphset(data, cfg, encoder=HashingEncoder(), progress=False)
    ((name, g),) = gs.graphs.items()
    assert gs.dataset == "hotpotqa-pooled" and name == pooled_name(HOTPOT) and g.info["pooled"]
    assert {q.graph for q in gs.questions} == {name} and len(gs.questions) == 6
    for q in gs.questions:
        assert q.evidence and all(g.has_node(e) for e in q.evidence)
        assert all("::" in e for e in q.evidence) == sentence_nodes
    expected = "hotpotqa-pooled-limit6" + ("-sentences" if sentence_nodes else "") + "-hashing"
    assert graphset_dir("out", data, cfg).name == expected


def test_hotpot_train_file_builds_including_the_four_paragraph_record():
    cfg = GraphConfig(encoder="hashing")
    units, questions, _ = load_units("hotpotqa", data_file(HOTPOT_TRAIN), cfg)
    short = [u for u in units if len(u.texts) < 20]
    assert len(units) == 100 and len(short) == 1
    g = short[0].build(HashingEncoder().encode(short[0].texts), cfg, CueEntityExtractor())
    q = next(q for q in questions if q.graph == short[0].name)
    assert g.num_nodes == len(short[0].texts) and all(g.has_node(e) for e in q.evidence)
    pooled, _, _ = load_units("hotpotqa", data_file(HOTPOT_TRAIN), cfg, pooled=True)
    records = load_hotpotqa(data_file(HOTPOT_TRAIN))[0]
    assert len(pooled[0].texts) == len({p.title for r in records for p in r.paragraphs}) > 900


def test_pooled_mode_is_refused_for_locomo():
    with pytest.raises(ValueError, match="DataConfig.pooled"):
        DataConfig(name="locomo", pooled=True)
    with pytest.raises(ValueError, match="train_files"):
        DataConfig(name="hotpotqa", train_files="hotpotqa/hotpot_train_100.jsonl")


def test_new_settings_at_default_keep_saved_set_hashes():
    import hashlib
    import json
    from dataclasses import asdict

    from graphmem.builders import config_hash
    from graphmem.builders.pipeline import BUILDER_VERSION

    data, graph = DataConfig(name="hotpotqa", train_files=["hotpotqa/hotpot_train_100.jsonl"]), GraphConfig()
    old_data = {
        k: v for k, v in asdict(data).items() if k in ("name", "file", "limit")
    }  # the fields sets were hashed on
    new_graph_keys = ("cache_dir", "sentence_nodes", "duplicate_titles", "max_text_chars", "incremental")
    old_graph = {k: v for k, v in asdict(graph).items() if k not in new_graph_keys}
    blob = json.dumps(
        {"data": old_data, "graph": old_graph, "data_sha256": "s", "builder": BUILDER_VERSION}, sort_keys=True
    )
    assert config_hash(data, graph, "s") == hashlib.sha256(blob.encode()).hexdigest()
    assert config_hash(DataConfig(name="hotpotqa", pooled=True), graph, "s") != config_hash(data, graph, "s")
    assert config_hash(data, GraphConfig(sentence_nodes=True), "s") != config_hash(data, graph, "s")
