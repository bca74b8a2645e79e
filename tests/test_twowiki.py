"""2WikiMultiHopQA on the real file in ../shared/data: counts, gold sentences and chains, the file's quirks
(dangling facts, repeated titles), damaged records, and small sets built end to end (hashing encoder)."""

import collections
import dataclasses
import json

import pytest

from graphmem.builders import REGISTRY, DataConfig, GraphConfig, build_graphset
from graphmem.builders.units import pooled_name
from graphmem.core import Budget, Query
from graphmem.datasets import TwoWikiFormatError, data_file, load_twowiki
from graphmem.datasets.twowiki import chain_order
from graphmem.eval.harness import evaluate_policy
from graphmem.index.embed import HashingEncoder
from graphmem.policies import make_policy
from graphmem.store.graphset import GraphSet
from tests.script_loader import compose

TWOWIKI = "2wikimultihopqa/2wiki_train_500.json"
FIRST = "93402dbc0bdb11eba7f7acde48001122"  # compositional: Get Low -> Dillon Francis
BRIDGE = "58f39f7808b511ebbd88ac1f6bf848b6"  # bridge_comparison: two films, their directors
AUNT = "0799d8840baf11ebab90acde48001122"  # inference: its triples name only one supporting title as given
METRICS = ("passage_recall_2", "passage_recall_5", "support_paragraph_recall", "chain_following")


@pytest.fixture(scope="module")
def twowiki():
    return load_twowiki(data_file(TWOWIKI))


@pytest.fixture(scope="module")
def raw():
    return json.loads(data_file(TWOWIKI).read_text())


def test_counts_and_categories(twowiki):
    records, questions, report = twowiki
    assert len(records) == len(questions) == report.records == report.questions == 500
    assert collections.Counter(q.category for q in questions) == {
        "compositional": 227,
        "comparison": 162,
        "bridge_comparison": 92,
        "inference": 19,
    }
    assert all(q.qid == q.graph == r.qid for q, r in zip(questions, records))
    assert not report.malformed_evidence and not report.missing_gold


def test_gold_sentences_titles_chain_and_triples(twowiki):
    _, questions, report = twowiki
    by_qid = {q.qid: q for q in questions}
    q = by_qid[FIRST]
    assert q.evidence == ("Get Low (Dillon Francis and DJ Snake song)::0", "Dillon Francis::0")
    assert q.support_titles == ("Get Low (Dillon Francis and DJ Snake song)", "Dillon Francis")
    assert q.support_chain == ("Get Low (Dillon Francis and DJ Snake song)::title", "Dillon Francis::title")
    assert q.evidence_triples == (
        ("Get Low", "performer", "Dillon Francis"),
        ("Dillon Francis", "date of birth", "October 5, 1987"),
    )
    # the triples reach film 1, its director, film 2, its director: not the supporting-facts order
    bridge = by_qid[BRIDGE]
    assert bridge.support_titles == (
        "The Prairie King",
        "Confessions of an Opium Eater",
        "B. Reeves Eason",
        "Albert Zugsmith",
    )
    assert [c.removesuffix("::title") for c in bridge.support_chain] == [
        "The Prairie King",
        "B. Reeves Eason",
        "Confessions of an Opium Eater",
        "Albert Zugsmith",
    ]
    aunt = by_qid[AUNT]
    assert aunt.support_chain == ("Diana Forbes-Robertson::title", "Gertrude Elliott::title")
    assert AUNT in report.chains_in_fact_order and FIRST not in report.chains_in_fact_order
    assert len(report.chains_in_fact_order) == 31
    assert all(sorted(q.support_chain) == sorted(f"{t}::title" for t in q.support_titles) for q in questions)


def test_chain_order_matches_names_to_titles():
    titles = ("B (film)", "A", "C")
    triples = [("a", "r", "b"), ("  B  ", "r", "x"), ("x", "r", "C")]
    assert chain_order(titles, triples) == (("A", "B (film)", "C"), True)
    assert chain_order(titles, triples[:2]) == (titles, False)  # C is never reached
    # a name as given wins over another title's core
    assert chain_order(("Paris", "Paris (film)"), [("Paris (film)", "r", "Paris")]) == (("Paris (film)", "Paris"), True)
    assert chain_order(("X)",), [("X)", "r", "y")]) == (("X)",), True)


def test_the_six_dangling_facts_are_reported_and_dropped(twowiki, raw):
    _, questions, report = twowiki
    by_qid = {q.qid: q for q in questions}
    expected = []
    for r in raw:
        sizes = {}
        for title, sentences in r["context"]:
            sizes.setdefault(title, len(sentences))
        expected += [f"{r['_id']}: {t}::{i}" for t, i in r["supporting_facts"] if i >= sizes[t]]
    assert len(expected) == 6 and sorted(report.dangling_evidence) == sorted(expected)
    q = by_qid["e2d3bbb60bd911eba7f7acde48001122"]
    assert q.dangling_evidence == ("Prince Hubertus of Hohenzollern::2",)
    assert "Prince Hubertus of Hohenzollern::2" not in q.evidence
    assert "Prince Hubertus of Hohenzollern" in q.support_titles


def test_repeated_titles_keep_the_first_paragraph_and_are_counted(twowiki, raw):
    records, _, report = twowiki
    repeats = {r["_id"]: len(r["context"]) - len({t for t, _ in r["context"]}) for r in raw}
    repeats = {k: n for k, n in repeats.items() if n}
    assert len(repeats) == 23 and sum(repeats.values()) == 27
    assert len(report.discarded) == 27 and {d.split(":")[0] for d in report.discarded} == set(repeats)
    assert any("discarded" in line and ": 27 (" in line for line in report.lines())
    for r, given in zip(records, raw):
        titles = [p.title for p in r.paragraphs]
        assert len(titles) == len(set(titles)) == len(given["context"]) - repeats.get(r.qid, 0)


def _damaged(tmp_path, raw, index, change):
    records = json.loads(json.dumps(raw[:5]))
    change(records[index])
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps(records))
    return path


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda r: r.pop("context"), "'context'"),
        (lambda r: r.update(question=7), "'question'"),
        (lambda r: r.update(type=["comparison"]), "'type'"),
        (lambda r: r.pop("type"), "'type'"),
        (lambda r: r.update(evidences="Get Low performer Dillon Francis"), "'evidences'"),
        (lambda r: r.update(context=[["Get Low", "one sentence"]]), "'context[0]'"),
        (lambda r: r.pop("_id"), "'_id'"),
    ],
)
def test_a_damaged_record_is_one_line_naming_file_record_id_and_field(tmp_path, raw, change, field):
    path = _damaged(tmp_path, raw, 3, change)
    with pytest.raises(TwoWikiFormatError) as err:
        load_twowiki(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and "record 3" in message and field in message
    if field != "'_id'":
        assert raw[3]["_id"] in message


def test_a_malformed_triple_or_missing_evidences_is_a_counted_discard(tmp_path, raw):
    path = _damaged(tmp_path, raw, 0, lambda r: r["evidences"].insert(0, ["Get Low", "performer"]))
    _, questions, report = load_twowiki(path)
    assert report.malformed_evidence == [f"{FIRST}: evidences[0] = ['Get Low', 'performer']"]
    assert len(questions[0].evidence_triples) == 2 and FIRST not in report.chains_in_fact_order
    _, questions, report = load_twowiki(_damaged(tmp_path, raw, 0, lambda r: r.pop("evidences")))
    assert questions[0].evidence_triples == () and report.chains_in_fact_order == [FIRST]
    assert len(questions[0].evidence) == 2


def test_registry_entry_and_configs():
    entry = REGISTRY["2wiki"]
    assert entry.poolable and entry.default_file == TWOWIKI
    assert DataConfig(name="2wiki").file == TWOWIKI and DataConfig(name="2wiki").train_files == ()
    plain, pooled = (compose("build_graph", [f"data={option}"]).data for option in ("2wiki", "2wiki_pooled"))
    assert (plain.name, plain.pooled, plain.pool_size) == ("2wiki", False, None)
    assert (pooled.name, pooled.pooled, pooled.pool_size, list(pooled.train_files)) == ("2wiki", True, None, [])


def _build(tmp_path, **data):
    cfg = GraphConfig(encoder="hashing", cache_dir=str(tmp_path / "cache"))
    return build_graphset(DataConfig(name="2wiki", limit=5, **data), cfg, encoder=HashingEncoder(), progress=False)


@pytest.mark.parametrize("pooled", [False, True])
def test_small_set_end_to_end_has_its_metrics_defined(tmp_path, pooled):
    gs = _build(tmp_path, pooled=pooled)
    assert len(gs.questions) == 5
    if pooled:
        assert list(gs.graphs) == [pooled_name(TWOWIKI)] and gs.dataset == "2wiki-pooled"
    else:
        assert list(gs.graphs) == [q.qid for q in gs.questions] and gs.dataset == "2wiki"
    for q in gs.questions:
        g = gs.graphs[q.graph]
        assert g.info["dataset"] == "2wiki"
        assert q.support_chain and all(g.has_node(c) for c in q.support_chain)
        assert q.evidence and all(g.has_node(e) for e in q.evidence)
        assert all(("::" in e) != pooled for e in q.evidence)  # sentences, or (pooled) their passages
    result = evaluate_policy(make_policy("dense_topk"), gs, Budget(), progress=False)
    assert all(result.overall[m] is not None for m in METRICS)
    assert {"compositional", "bridge_comparison"} <= set(result.summary)
    loaded = GraphSet.load(gs.save(tmp_path / "set"))
    assert [q.evidence_triples for q in loaded.questions] == [q.evidence_triples for q in gs.questions]
    assert isinstance(loaded.questions[0].evidence_triples[0], tuple)
    assert "evidence_triples" not in {f.name for f in dataclasses.fields(Query)}
