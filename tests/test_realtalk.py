"""REALTALK on the real files in ../shared/data: one conversation per file, evidence by dia_id lookup (lists split,
ranges expanded, dangling and malformed ids counted and dropped), handles kept out of the text, per-turn times."""

import json
import math
from datetime import datetime, timezone

import pytest
import torch

from graphmem.builders.config import GraphConfig
from graphmem.builders.entities import make_entity_extractor
from graphmem.builders.pipeline import data_sha256, graphset_dir, source
from graphmem.builders.registry import REGISTRY, DataConfig, load_records, load_units
from graphmem.datasets import REALTALK_CATEGORIES, RealtalkFormatError, data_file, data_files, load_realtalk
from graphmem.datasets.paths import DataNotFoundError

CHAT_1 = "realtalk/Chat_1_Emi_Elise.json"


@pytest.fixture(scope="module")
def realtalk():
    return load_records(REGISTRY["realtalk"], data_files("realtalk"))


def test_counts_categories_and_quirks_on_the_real_files(realtalk):
    convs, questions, report, _ = realtalk
    assert len(convs) == 7 and [c.sample_id for c in convs][0] == "Chat_1_Emi_Elise"
    assert sum(len(c.turns) for c in convs) == 5982 and sum(len(c.sessions) for c in convs) == 154
    assert len(questions) == 502 == report.questions and report.records == 7
    assert {q.category for q in questions} == {1, 2, 3} and REALTALK_CATEGORIES[2] == "temporal"
    assert questions[0].category_name in ("multi-hop", "temporal", "open-domain")
    by_qid = {q.qid: q for q in questions}
    # lists joined by ";" (Chat_6), a trailing "." and ". " (Chat_1, Chat_7) are split and resolved
    assert by_qid["Chat_6_Vanessa_Nicolas#0"].evidence == ("D1:11", "D3:18")
    assert by_qid["Chat_1_Emi_Elise#65"].evidence == ("D13:4", "D14:4")
    assert "D20:6" in by_qid["Chat_7_Nebraas_Vanessa#15"].evidence
    # ids naming no turn (Chat_1 counts days in its D<n>) are dropped and reported, never kept as gold
    assert "D2:7" in by_qid["Chat_1_Emi_Elise#8"].dangling_evidence
    assert any(d.startswith("Chat_1_Emi_Elise#8: D2:7") for d in report.dangling_evidence)
    assert {m.split(": ", 1)[1] for m in report.malformed_evidence} >= {"''", "'D:56'", "'D58'"}
    # a question with no resolvable evidence is kept without gold and counted
    unresolved = {u.split(":")[0] for u in report.unresolved_gold}
    assert "Chat_7_Nebraas_Vanessa#42" in unresolved and by_qid["Chat_7_Nebraas_Vanessa#42"].evidence == ()
    turns = {c.sample_id: {t.dia_id for t in c.turns} for c in convs}
    assert all(set(q.evidence) <= turns[q.graph] for q in questions)
    assert sum(len(q.evidence) for q in questions) >= 1066  # at least every id that resolves exactly


def test_dia_ids_are_not_session_numbers_and_turns_carry_their_time(realtalk):
    chat_1 = realtalk[0][0]
    session_4 = next(s for s in chat_1.sessions if s.index == 4)
    assert session_4.turns[0].dia_id == "D3:30"  # the D<n> part counts days here
    first = chat_1.sessions[0].turns[0]
    assert first.date_time == datetime(2023, 12, 29, 22, 42, 4) and first.raw_date_time == "29.12.2023, 22:42:04"
    assert first.speaker == "Emi"


def test_graph_heads_each_turn_with_its_handle_and_times_it_on_its_own():
    cfg = GraphConfig(encoder="hashing")
    units, questions, _ = load_units("realtalk", data_files(CHAT_1), cfg)
    (unit,) = units
    conv = load_realtalk(data_file(CHAT_1))[0][0]
    graph = unit.build(
        torch.nn.functional.normalize(torch.randn(len(unit.texts), 8), dim=1), cfg, make_entity_extractor("offline")
    )
    first = conv.sessions[0].turns[0]
    assert unit.name == "Chat_1_Emi_Elise" and graph.info["dataset"] == "realtalk"
    assert graph.texts[0] == f"Emi: {first.text}"  # the handle, never mapped to the persona's name
    assert graph.metadata[0]["speaker"] == "Emi" and graph.metadata[0]["date_time"] == "29.12.2023, 22:42:04"
    assert graph.timestamps[0].item() == pytest.approx(first.date_time.replace(tzinfo=timezone.utc).timestamp())
    assert all(math.isfinite(t) for t in graph.timestamps.tolist())
    assert {"temporal", "semantic"} <= {graph.relations[int(t)] for t in graph.edge_type.unique()}
    assert all(graph.has_node(e) for q in questions for e in q.evidence)


def test_file_a_list_or_a_folder(tmp_path):
    folder = data_files("realtalk")
    assert len(folder) == 7 and all(p.suffix == ".json" for p in folder)  # README.md is skipped
    two = data_files([CHAT_1, "realtalk/Chat_2_Kevin_Elise.json"])
    assert [p.name for p in two] == ["Chat_1_Emi_Elise.json", "Chat_2_Kevin_Elise.json"]
    assert data_sha256(two) != data_sha256(two[:1]) and len(data_sha256(two)) == 64
    cfg = DataConfig(name="realtalk", file=[CHAT_1, "realtalk/Chat_2_Kevin_Elise.json"])
    assert (
        cfg.file == (CHAT_1, "realtalk/Chat_2_Kevin_Elise.json")
        and DataConfig(name="realtalk", file=[CHAT_1]).file == CHAT_1
    )
    assert graphset_dir("g", DataConfig(name="realtalk"), GraphConfig()).name == "realtalk"
    assert graphset_dir("g", cfg, GraphConfig()).name.startswith("realtalk-")
    assert source(cfg, GraphConfig())["data.file"] == cfg.file
    with pytest.raises(DataNotFoundError, match="named twice"):
        data_files([CHAT_1, "realtalk"])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(DataNotFoundError, match="holds no"):
        data_files(str(tmp_path))
    with pytest.raises(ValueError, match="non-empty path or a list"):
        DataConfig(name="realtalk", file=[])


def _chat(**over):
    turn = {"clean_text": "Hi", "speaker": "a1", "date_time": "01.02.2024, 10:00:00", "dia_id": "D1:1"}
    raw = {
        "name": {"speaker_1": "a1", "speaker_2": "b2"},
        "session_1": [
            turn,
            {**turn, "speaker": "b2", "dia_id": "D1:2", "clean_text": "Yo"},
            {**turn, "dia_id": "D1:3"},
        ],
        "session_1_date_time": "01.02.2024, 10:00:00",
        "qa": [
            {"question": "q", "answer": 7, "evidence": ["D1:1-D1:3"], "category": 2},
            {"question": "q2", "answer": "a", "evidence": ["D1:2-3", "D9:9"], "category": 1},
            {"question": "q3", "answer": "a", "evidence": ["D1:1"], "category": 5},
        ],
    }
    raw.update(over)
    return raw


def test_ranges_categories_and_errors_name_file_and_field(tmp_path):
    path = tmp_path / "chat_x.json"
    path.write_text(json.dumps(_chat()))
    (conv,), questions, report = load_realtalk(path)
    assert conv.sample_id == "chat_x" and [q.qid for q in questions] == ["chat_x#0", "chat_x#1"]
    assert questions[0].evidence == ("D1:1", "D1:2", "D1:3") and questions[0].answer == "7"
    assert questions[1].evidence == ("D1:2", "D1:3") and questions[1].dangling_evidence == ("D9:9",)
    assert any("chat_x#2" in d and "category" in d for d in report.discarded)
    bad = _chat()
    del bad["session_1"][1]["clean_text"]
    path.write_text(json.dumps(bad))
    with pytest.raises(RealtalkFormatError, match=r"chat_x.json: session_1\[1\]: field 'clean_text'"):
        load_realtalk(path)
    path.write_text(json.dumps([_chat()]))
    with pytest.raises(RealtalkFormatError, match="one conversation object"):
        load_realtalk(path)
