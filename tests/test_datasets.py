"""Loaders on the real files in ../shared/data: counts, evidence repair, dangling ids, malformed input."""

import collections
import json
from datetime import datetime

import pytest

from graphmem.datasets import (
    DataNotFoundError,
    HotpotFormatError,
    LocomoFormatError,
    MusiqueFormatError,
    data_file,
    data_root,
    load_hotpotqa,
    load_locomo,
    load_musique,
    parse_session_datetime,
)

LOCOMO = "locomo/locomo_dev8.json"
HOTPOT = "hotpotqa/hotpot_dev_distractor_200.jsonl"


@pytest.fixture(scope="module")
def locomo():
    return load_locomo(data_file(LOCOMO))


@pytest.fixture(scope="module")
def hotpot():
    return load_hotpotqa(data_file(HOTPOT))


def test_locomo_counts_and_categories(locomo):
    convs, questions, report = locomo
    assert [c.sample_id for c in convs][:2] == ["conv-26", "conv-30"] and len(convs) == 8
    assert len(questions) == 1586 == report.questions
    # counted once from the raw file: {1: 213, 2: 256, 3: 76, 4: 681, 5: 360}
    assert collections.Counter(q.category for q in questions) == {1: 213, 2: 256, 3: 76, 4: 681, 5: 360}
    # conv-26 has date keys up to session_35 but 19 sessions with content
    assert len(convs[0].sessions) == 19 and len(convs[0].turns) == 419
    assert sum(len(c.turns) for c in convs) == 4805
    assert convs[0].sessions[0].date_time == datetime(2023, 5, 8, 13, 56)
    assert not report.unparsed_dates and not report.discarded
    assert questions[0].qid == "conv-26#0" and questions[0].graph == "conv-26"


def test_locomo_answers(locomo):
    _, questions, _ = locomo
    raw = json.loads(data_file(LOCOMO).read_text())
    by_qid = {q.qid: q for q in questions}
    ints = 0
    for rec in raw:
        for i, qa in enumerate(rec["qa"]):
            q = by_qid[f"{rec['sample_id']}#{i}"]
            if qa["category"] == 5:
                assert q.answer == qa.get("adversarial_answer", qa.get("answer"))
            elif isinstance(qa.get("answer"), int):
                ints += 1
                assert q.answer == str(qa["answer"])
    assert ints > 0
    assert all(q.answer is None or isinstance(q.answer, str) for q in questions)


def test_locomo_evidence_normalisation_and_dangling(locomo):
    _, questions, report = locomo
    by_qid = {q.qid: q for q in questions}
    assert by_qid["conv-26#37"].evidence == ("D8:6", "D9:17")
    assert "D11:26" in by_qid["conv-43#18"].evidence
    assert by_qid["conv-42#88"].evidence and all(e != "D" for e in by_qid["conv-42#88"].evidence)
    assert any("conv-42#88" in m and "'D'" in m for m in report.malformed_evidence)
    assert by_qid["conv-42#58"].dangling_evidence == ("D10:19",) and "D10:19" not in by_qid["conv-42#58"].evidence
    assert by_qid["conv-47#38"].dangling_evidence == ("D4:36",)
    assert sorted(report.dangling_evidence) == ["conv-42#58: D10:19", "conv-47#38: D4:36"]
    assert any("D:11:26" in r for r in report.repaired_evidence)
    convs = {c.sample_id: {t.dia_id for t in c.turns} for c in locomo[0]}
    assert all(set(q.evidence) <= convs[q.graph] for q in questions)


def _write(tmp_path, records, name="bad.json"):
    path = tmp_path / name
    path.write_text(json.dumps(records))
    return path


def _record(**conv_overrides):
    conv = {
        "speaker_a": "A",
        "speaker_b": "B",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "A", "dia_id": "D1:1", "text": "Hi?"},
            {"speaker": "B", "dia_id": "D1:2", "text": "Yo"},
        ],
    }
    conv.update(conv_overrides)
    return {
        "sample_id": "s-1",
        "conversation": conv,
        "qa": [{"question": "q", "answer": "a", "evidence": ["D1:1"], "category": 4}],
    }


def test_locomo_malformed_turn_names_file_record_field(tmp_path):
    rec = _record(session_1=[{"speaker": "A", "dia_id": "D1:1"}])
    rec["sample_id"] = "s-2"
    path = _write(tmp_path, [_record(), rec])
    with pytest.raises(LocomoFormatError) as err:
        load_locomo(path)
    msg = str(err.value)
    assert str(path) in msg and "record 1" in msg and "'s-2'" in msg and "'text'" in msg and "session_1[0]" in msg


def test_locomo_empty_conversation_and_missing_keys(tmp_path):
    with pytest.raises(LocomoFormatError, match="empty conversation"):
        load_locomo(
            _write(tmp_path, [{"sample_id": "x", "conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": []}])
        )
    with pytest.raises(LocomoFormatError, match="record 0.*missing field 'qa'"):
        rec = _record()
        del rec["qa"]
        load_locomo(_write(tmp_path, [rec]))


def test_locomo_discards_and_dates_are_counted(tmp_path):
    rec = _record(session_1_date_time="sometime in spring")
    rec["qa"].append({"question": "q2", "answer": "a", "evidence": [], "category": 9})
    convs, questions, report = load_locomo(_write(tmp_path, [rec]))
    assert len(questions) == 1 and report.questions == 1
    assert len(report.discarded) == 1 and "s-1#1" in report.discarded[0] and "category" in report.discarded[0]
    assert convs[0].sessions[0].date_time is None and report.unparsed_dates == ["s-1 session_1: 'sometime in spring'"]
    assert parse_session_datetime("10:04 am on 19 January, 2023") == datetime(2023, 1, 19, 10, 4)


def test_hotpot_counts(hotpot):
    records, questions, report = hotpot
    assert len(records) == len(questions) == 200
    assert sum(len(q.evidence) for q in questions) == 500 and not report.dangling_evidence
    assert all(len(r.paragraphs) == 10 for r in records)
    assert {"37", "61", "79", "95"} <= {q.qid for q in questions}  # integer _id cast to str
    q, r = questions[0], records[0]
    assert q.qid == q.graph == r.qid == "5a7613c15542994ccc9186bf" and q.category == r.type == "bridge"
    assert q.evidence == ("VIVA Media::0", "Gesellschaft mit beschränkter Haftung::0")
    assert q.support_titles == ("VIVA Media", "Gesellschaft mit beschränkter Haftung")


def test_hotpot_json_list_dangling_and_malformed(tmp_path):
    lines = data_file(HOTPOT).read_text().splitlines()[:3]
    recs = [json.loads(x) for x in lines]
    recs[1]["supporting_facts"].append([recs[1]["context"][0][0], 99])
    path = _write(tmp_path, recs, "list.json")
    records, questions, report = load_hotpotqa(path)
    assert len(records) == 3 and questions[1].dangling_evidence == (f"{recs[1]['context'][0][0]}::99",)
    assert len(report.dangling_evidence) == 1
    bad = tmp_path / "bad.jsonl"
    del recs[2]["context"]
    bad.write_text("\n".join(json.dumps(r) for r in recs))
    with pytest.raises(HotpotFormatError) as err:
        load_hotpotqa(bad)
    assert str(bad) in str(err.value) and "line 3" in str(err.value) and "'context'" in str(err.value)


def test_data_root_resolution(tmp_path, monkeypatch):
    assert data_root().name == "data" and data_file(LOCOMO).is_file()
    monkeypatch.setenv("GRAPHMEM_DATA_ROOT", str(tmp_path))
    assert data_root() == tmp_path.resolve()
    with pytest.raises(DataNotFoundError) as err:
        data_file(LOCOMO)
    assert (
        str(tmp_path / LOCOMO) in str(err.value)
        and "GRAPHMEM_DATA_ROOT" in str(err.value)
        and "data.root" in str(err.value)
    )
    with pytest.raises(DataNotFoundError, match="config key data.root"):
        data_root(tmp_path / "nowhere")


# ---------------------------------------------------------------------------- MuSiQue, HotpotQA train
MUSIQUE = "musique/musique_ans_50.json"
HOTPOT_TRAIN = "hotpotqa/hotpot_train_100.jsonl"


def test_musique_counts_hops_and_chain():
    records, questions, report = load_musique(data_file(MUSIQUE))
    assert len(records) == len(questions) == 50 == report.questions
    assert sum(len(r.paragraphs) for r in records) == 1000
    assert sum(p.is_supporting for r in records for p in r.paragraphs) == 118
    assert collections.Counter(r.hops for r in records) == {"2hop": 35, "3hop1": 10, "3hop2": 2, "4hop1": 3}
    assert collections.Counter(q.category for q in questions) == collections.Counter(r.hops for r in records)
    assert len({p.title for r in records for p in r.paragraphs}) == 911
    assert all(r.answerable for r in records) and not report.dangling_evidence and not report.repaired_evidence
    q, r = questions[0], records[0]
    assert q.qid == q.graph == r.qid == "2hop__150763_14904" and q.answer == "G. Stanley Hall"
    assert r.answer_aliases == ("Stanley Hall",)
    assert [s.paragraph_support_idx for s in r.decomposition] == [6, 10]
    titles = {p.idx: p.title for p in r.paragraphs}
    assert q.support_chain == (titles[6], titles[10]) and set(q.evidence) == {titles[6], titles[10]}
    # the chain has one step per decomposition step; evidence is the distinct supporting titles
    assert all(len(q.support_chain) == len(r.decomposition) for q, r in zip(questions, records))
    assert sum(len(q.evidence) for q in questions) == 117  # one question uses two "Canon law" paragraphs
    canon = next(q for q in questions if q.qid == "2hop__6584_6587")
    assert canon.support_chain == ("Canon law", "Canon law") and canon.evidence == ("Canon law",)


def test_musique_malformed_input_names_file_record_field(tmp_path):
    raw = json.loads(data_file(MUSIQUE).read_text())[:3]
    good = tmp_path / "ok.jsonl"
    raw[1]["question_decomposition"][0]["paragraph_support_idx"] = 99
    good.write_text("\n".join(json.dumps(r) for r in raw))
    _, questions, report = load_musique(good)  # JSONL works too; a step naming no paragraph is reported
    assert report.dangling_evidence == [f"{raw[1]['id']}: paragraph idx 99"]
    assert len(questions[1].support_chain) == len(raw[1]["question_decomposition"]) - 1
    for field, value, message in (
        ("id", None, "'id'"),
        ("paragraphs", [], "'paragraphs'"),
        ("question", "  ", "'question'"),
        ("answer_aliases", "x", "'answer_aliases'"),
    ):
        bad = json.loads(json.dumps(raw))
        bad[2][field] = value
        path = _write(tmp_path, bad, f"bad_{field}.json")
        with pytest.raises(MusiqueFormatError) as err:
            load_musique(path)
        assert str(path) in str(err.value) and "record 2" in str(err.value) and message in str(err.value)
    bad = json.loads(json.dumps(raw))
    bad[0]["paragraphs"][3]["is_supporting"] = "yes"
    with pytest.raises(
        MusiqueFormatError, match=r"record 0 \(id '2hop__150763_14904'\): paragraphs\[3\]: .*is_supporting"
    ):
        load_musique(_write(tmp_path, bad, "bad_sup.json"))
    bad[0]["paragraphs"][3]["is_supporting"] = False
    bad[0]["paragraphs"][3]["idx"] = 2
    with pytest.raises(MusiqueFormatError, match=r"paragraphs\[3\]: field 'idx' 2 repeats"):
        load_musique(_write(tmp_path, bad, "bad_idx.json"))
    with pytest.raises(MusiqueFormatError, match="repeats an earlier record"):
        load_musique(_write(tmp_path, [raw[0], raw[0]], "dup.json"))


def test_hotpot_train_file_counts_and_short_record():
    records, questions, report = load_hotpotqa(data_file(HOTPOT_TRAIN))
    assert len(records) == len(questions) == 100
    assert sum(len(r.supporting_facts) for r in records) == 229
    assert sum(len(q.evidence) for q in questions) == 229 and not report.dangling_evidence
    sizes = collections.Counter(len(r.paragraphs) for r in records)
    assert sizes == {10: 99, 4: 1}
    short = next(r for r in records if len(r.paragraphs) == 4)
    q = next(q for q in questions if q.qid == short.qid)
    assert set(q.support_titles) <= {p.title for p in short.paragraphs} and q.evidence
    assert collections.Counter(r.type for r in records) == {"bridge": 78, "comparison": 22}
