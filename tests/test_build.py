"""Builders on one real LoCoMo conversation and a few HotpotQA records (offline hashing encoder)."""

import math
from datetime import timezone

import pytest
import torch

from graphmem.builders import DataConfig, GraphConfig
from graphmem.builders import edges as E
from graphmem.builders.entities import CueEntityExtractor, make_entity_extractor, register_entity_extractor
from graphmem.builders.hotpotqa import build_hotpot_graph
from graphmem.builders.hotpotqa import node_texts as hotpot_texts
from graphmem.builders.locomo import build_locomo_graph, node_texts
from graphmem.datasets import data_file, load_hotpotqa, load_locomo
from graphmem.index.embed import HashingEncoder

ENC = HashingEncoder(64)
CFG = GraphConfig(encoder="hashing", semantic_threshold=0.2)


@pytest.fixture(scope="module")
def conv():
    return load_locomo(data_file("locomo/locomo_dev8.json"))[0][0]


@pytest.fixture(scope="module")
def graph(conv):
    return build_locomo_graph(conv, ENC.encode(node_texts(conv)), CFG, make_entity_extractor("offline"))


@pytest.fixture(scope="module")
def hotpot():
    return load_hotpotqa(data_file("hotpotqa/hotpot_dev_distractor_200.jsonl"))[0][:8]


def _relation_counts(g):
    return dict(zip(g.relations, torch.bincount(g.edge_type, minlength=len(g.relations)).tolist()))


def test_locomo_nodes(conv, graph):
    turns = conv.turns
    assert graph.node_ids == [t.dia_id for t in turns] and graph.num_nodes == 419
    captioned = next(i for i, t in enumerate(turns) if t.image_caption)
    assert (
        graph.texts[captioned]
        == f"{turns[captioned].speaker}: {turns[captioned].text} [image: {turns[captioned].image_caption}]"
    )
    assert graph.texts[0] == f"{turns[0].speaker}: {turns[0].text}"
    s2 = conv.sessions[1]
    row = graph.index_of(s2.turns[3].dia_id)
    assert graph.timestamps[row].item() == s2.date_time.replace(tzinfo=timezone.utc).timestamp() + 3
    assert graph.metadata[row] == {
        "speaker": s2.turns[3].speaker,
        "session": s2.index,
        "dia_id": s2.turns[3].dia_id,
        "position": 3,
        "date_time": s2.raw_date_time,
    }
    assert len(graph.keys[0]) < len(graph.texts[0]) + 20


def test_locomo_edges(graph):
    counts = _relation_counts(graph)
    assert all(counts[r] > 0 for r in ("temporal", "semantic", "causal", "entity")), counts
    src, dst = graph.edge_index
    assert not (src == dst).any()
    triples = set(zip(src.tolist(), dst.tolist(), graph.edge_type.tolist()))
    assert len(triples) == graph.num_edges  # no duplicate edge of one relation
    assert all((v, u, r) in triples for u, v, r in triples)  # both directions
    t = graph.relations.index("temporal")
    assert (graph.index_of("D1:1"), graph.index_of("D1:2"), t) in triples
    # question -> reply of the other speaker is a causal edge
    c = graph.relations.index("causal")
    i = next(
        i
        for i in range(graph.num_nodes - 1)
        if graph.texts[i].endswith("?")
        and graph.metadata[i]["session"] == graph.metadata[i + 1]["session"]
        and graph.metadata[i]["speaker"] != graph.metadata[i + 1]["speaker"]
    )
    assert (i, i + 1, c) in triples
    sem = graph.edge_type == graph.relations.index("semantic")
    assert sem.sum() <= 2 * CFG.semantic_k * graph.num_nodes
    cos = (graph.embeddings[src[sem]] * graph.embeddings[dst[sem]]).sum(1)
    assert (cos >= CFG.semantic_threshold - 1e-6).all()


def test_scored_features_reach_tensors_and_match(conv, graph):
    onehot = torch.nn.functional.one_hot(graph.edge_type, 4).float()
    assert not torch.allclose(graph.edge_attr, onehot)
    assert torch.equal(graph.edge_attr, graph.edge_attr_init)
    entities = make_entity_extractor("offline").extract(
        [t.text + (f" {t.image_caption}" if t.image_caption else "") for t in conv.turns]
    )
    for e in torch.linspace(0, graph.num_edges - 1, 40).long().tolist():
        u, v = graph.edge_index[:, e].tolist()
        mu, mv = graph.metadata[u], graph.metadata[v]
        p_t = (
            math.exp(-(abs(mu["position"] - mv["position"]) - 1) / CFG.temporal_tau)
            if mu["session"] == mv["session"]
            else 0.0
        )
        p_s = float(graph.embeddings[u] @ graph.embeddings[v])
        union = entities[u] | entities[v]
        p_e = len(entities[u] & entities[v]) / len(union) if union else 0.0
        assert graph.edge_attr[e].tolist() == pytest.approx([p_t, p_s, graph.edge_attr[e, 2].item(), p_e], abs=1e-5)
    # causal confidence of a question -> reply edge is at least the q/a cue weight
    c = graph.edge_type == graph.relations.index("causal")
    assert (graph.edge_attr[c, 2] > 0).all() and (graph.edge_attr[~c, 2] == 0).sum() > 0
    assert graph.edge_attr[c, 2].max() >= CFG.causal_qa_confidence - 1e-6


def test_onehot_features(conv):
    cfg = GraphConfig(encoder="hashing", features="onehot", semantic_threshold=0.2)
    g = build_locomo_graph(conv, ENC.encode(node_texts(conv)), cfg, make_entity_extractor("offline"))
    assert torch.equal(g.edge_attr, torch.nn.functional.one_hot(g.edge_type, 4).float())


def test_entity_extractor_and_fanout_cap():
    ex = CueEntityExtractor()
    out = ex.extract(
        [
            "Yesterday I met Alice Smith in Paris and ran 5 km.",
            "Hey there! Thanks so much.",
            "Paris was lovely in 2019, it cost $20.",
        ]
    )
    assert {"alice smith", "paris", "5 km"} <= out[0] and "yesterday" not in out[0]
    assert out[1] == set() and {"paris", "2019", "$20"} <= out[2]
    a, b = E.entity_pairs([{"x"}] * 30, fanout=3, max_share=1.0)
    assert a.numel() == 3 * 30 - 6 and a.numel() < 30 * 29 // 2  # a chain of windows, not a clique
    a, _ = E.entity_pairs([{"x"}] * 30, fanout=3, max_share=0.1)
    assert a.numel() == 0  # too common: in more than max(10, 3) nodes


class LookupOnly:
    """A vocabulary that may be looked up but not read whole (iterated, copied, merged or counted)."""

    def __init__(self, words):
        self._words = frozenset(words)

    def __contains__(self, word) -> bool:
        return word in self._words

    def _whole(self, *args):
        raise AssertionError("the vocabulary was read whole")

    __iter__ = __len__ = __or__ = __ror__ = __and__ = __sub__ = _whole


def test_an_arriving_turn_is_extracted_as_in_a_batch_with_its_vocabulary_only_looked_up(conv):
    ex, known = CueEntityExtractor(), set()
    for turn in conv.turns:
        expected = ex.extract([turn.text], known | ex.proper_words([turn.text]))[0], ex.proper_words([turn.text])
        assert ex.extract_arriving(turn.text, LookupOnly(known)) == expected, turn.text
        known |= expected[1]
    assert len(known) > 20


def test_pluggable_extractor(conv):
    @register_entity_extractor("test-speaker-words")
    class Words:
        def extract(self, texts):
            return [{w.lower() for w in t.split()[:1]} for t in texts]

    ex = make_entity_extractor("test-speaker-words")
    assert ex.name == "test-speaker-words"
    g = build_locomo_graph(conv, ENC.encode(node_texts(conv)), CFG, ex)
    assert _relation_counts(g)["entity"] > 0
    with pytest.raises(ValueError, match="unknown entity extractor"):
        make_entity_extractor("nope")


def test_hotpot_graphs(hotpot):
    ex = make_entity_extractor("offline")
    totals = dict.fromkeys(("temporal", "semantic", "causal", "entity"), 0)
    bridges = 0
    for record in hotpot:
        g = build_hotpot_graph(record, ENC.encode(hotpot_texts(record)), CFG, ex)
        assert g.num_nodes == sum(1 + len(p.sentences) for p in record.paragraphs)
        par = record.paragraphs[0]
        assert g.texts[g.index_of(f"{par.title}::title")] == par.title
        assert g.metadata[g.index_of(f"{par.title}::title")]["kind"] == "title"
        assert g.texts[g.index_of(f"{par.title}::0")] == f"{par.title}: {par.sentences[0].strip()}"
        assert torch.isnan(g.timestamps).all()
        src, dst = g.edge_index
        assert not (src == dst).any()
        triples = set(zip(src.tolist(), dst.tolist(), g.edge_type.tolist()))
        assert (g.index_of(f"{par.title}::title"), g.index_of(f"{par.title}::0"), 0) in triples
        if len(par.sentences) > 1:
            assert (g.index_of(f"{par.title}::0"), g.index_of(f"{par.title}::1"), 0) in triples
        ent = g.relations.index("entity")
        for p in record.paragraphs:
            t_row = g.index_of(f"{p.title}::title")
            for row, m in enumerate(g.metadata):
                if (
                    m["kind"] == "sentence"
                    and m["title"] != p.title
                    and p.title.lower() in g.texts[row].split(": ", 1)[1].lower()
                ):
                    assert (row, t_row, ent) in triples
                    bridges += 1
        for r, n in _relation_counts(g).items():
            totals[r] += n
    assert all(n > 0 for n in totals.values()), totals
    assert bridges > 0


def test_config_validation():
    for bad in (
        dict(semantic_k=-1),
        dict(semantic_threshold=1.5),
        dict(temporal_tau=0),
        dict(features="both"),
        dict(causal_qa_confidence=-0.1),
        dict(temporal_window_s=-5),
    ):
        with pytest.raises(ValueError, match="GraphConfig"):
            GraphConfig(**bad)
    with pytest.raises(ValueError, match="DataConfig.limit"):
        DataConfig(limit=0)
    assert DataConfig(name="hotpotqa").file == "hotpotqa/hotpot_dev_distractor_200.jsonl"  # each dataset's own file
    assert DataConfig().file == "locomo/locomo_dev8.json"
    with pytest.raises(ValueError, match="unknown keys"):
        GraphConfig.from_mapping({"semantic_kk": 3})


def test_yaml_mirrors_dataclasses():
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    configs = Path(__file__).resolve().parents[1] / "configs"
    with initialize_config_dir(str(configs), version_base="1.3"):
        for data in ("locomo", "hotpotqa"):
            for graph in ("default", "onehot"):
                cfg = compose("build_graph", overrides=[f"data={data}", f"graph={graph}"])
                d = DataConfig.from_mapping(OmegaConf.to_container(cfg.data))
                g = GraphConfig.from_mapping(OmegaConf.to_container(cfg.graph))
                assert d.name == data and g.features == ("onehot" if graph == "onehot" else "scored")
                assert set(OmegaConf.to_container(cfg.graph)) == set(GraphConfig.__dataclass_fields__)
                assert set(OmegaConf.to_container(cfg.data)) == set(DataConfig.__dataclass_fields__)


def _edge_table(g):
    """``{(src, dst, relation): features}`` of every edge."""
    return {
        (int(s), int(d), g.relations[int(r)]): tuple(round(float(x), 6) for x in f)
        for s, d, r, f in zip(g.edge_index[0], g.edge_index[1], g.edge_type, g.edge_attr_init)
    }


def test_replacing_entity_edges_with_the_builders_entities_gives_the_built_graph(conv, graph):
    raw = [t.text + (f" {t.image_caption}" if t.image_caption else "") for t in conv.turns]
    entities = make_entity_extractor("offline").extract(raw)
    rebuilt = E.replace_entity_edges(graph, entities, CFG)
    assert _edge_table(rebuilt) == _edge_table(graph)
    # other entities: "x" in 5 turns gets the fan-out chain, "y" in every turn is skipped as too common;
    # the rest of the graph is untouched and the input is not modified
    rows = [0, 3, 9, 20, 30]
    ents = [({"x"} if i in rows else set()) | {"y"} for i in range(graph.num_nodes)]
    other = E.replace_entity_edges(graph, ents, CFG)
    kept = {k: v for k, v in _edge_table(graph).items() if k[2] != "entity"}
    assert {k: v for k, v in _edge_table(other).items() if k[2] != "entity"} == kept
    f = CFG.entity_fanout
    chain = {(a, b) for i, a in enumerate(rows) for b in rows[i + 1 : i + 1 + f]}
    new = {(s, d) for s, d, rel in _edge_table(other) if rel == "entity"}
    assert new == chain | {(b, a) for a, b in chain}
    assert _edge_table(graph) == _edge_table(rebuilt)


def test_sequence_positions_read_back_the_builders_groups(conv, graph, hotpot):
    group, order = E.sequence_positions(graph)
    assert group == [t.session for t in conv.turns] and order == [t.position for t in conv.turns]
    g = build_hotpot_graph(hotpot[0], ENC.encode(hotpot_texts(hotpot[0])), CFG, make_entity_extractor("offline"))
    group, order = E.sequence_positions(g)
    assert group == [m["paragraph"] for m in g.metadata]
    assert order == [-1 if m["kind"] == "title" else m["sent_idx"] for m in g.metadata]
