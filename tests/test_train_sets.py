"""Training-only sets of any kind (``train_sets``): built with the run's graph config, added to every fold's
training part and to the GNN reader's training split, never validated or tested, recorded in results.json and in
the checkpoint's inputs; a bad item, or one reading the main set's file or sharing its graph names, is refused."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from one_line_errors import error_line, run_script
from script_loader import load_script

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.builders.pipeline import open_train_graphset, train_sources
from graphmem.datasets import data_file
from graphmem.index.embed import HashingEncoder
from graphmem.store.checkpoint import check_inputs
from graphmem.store.graphset import GraphSet
from graphmem.store.setstore import file_sha256
from rl.walk import folds

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
HASHING = ["graph.encoder=hashing", "logger=none", "progress=false"]
MUSIQUE_POOL = "[{name: musique, pooled: true, limit: 3}]"  # one pooled graph over 3 records: another kind
POOL_NAME = "pooled:musique_ans_50"


def compose_cfg(name, overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


def musique_qids(limit=3):
    records = json.loads(data_file("musique/musique_ans_50.json").read_text())[:limit]
    return {str(r["id"]) for r in records}


@pytest.fixture(scope="module")
def main_set(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train_sets")
    gs = build_graphset(
        DataConfig(name="hotpotqa", limit=6), GraphConfig(encoder="hashing"), encoder=HashingEncoder(), progress=False
    )
    gs.save(tmp / "hotpot")
    return tmp


@pytest.fixture(scope="module")
def trained(main_set):
    """One fold of train.py with the MuSiQue pool as a training set; the trainer's questions captured."""
    module = load_script("train")
    seen = {}

    class Recording(folds.WalkTrainer):
        def __init__(self, cfg, graphs, questions, embeddings, val_questions, *rest, **kw):
            seen["train"], seen["val"] = [q.qid for q in questions], [q.qid for q in val_questions]
            seen["graphs"] = set(graphs)
            super().__init__(cfg, graphs, questions, embeddings, val_questions, *rest, **kw)

    cfg = compose_cfg(
        "train",
        [
            f"graphset={main_set / 'hotpot'}",
            "data=hotpotqa",
            f"train_sets={MUSIQUE_POOL}",
            f"graphset_dir={main_set / 'sets'}",
            "cv.k=3",
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=0",
            "trainer.run.device=cpu",
            "baselines=[dense_topk]",
            "stats.reference=dense_topk",
            "stats.n_boot=200",
            f"out_dir={main_set / 'out'}",
            *HASHING,
        ],
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(folds, "WalkTrainer", Recording)
        payload = module.run(cfg)
    return main_set / "out", payload, seen


def test_a_training_set_of_another_kind_is_trained_on_and_recorded(trained):
    out, payload, seen = trained
    extra = musique_qids()
    assert extra <= set(seen["train"]) and not extra & set(seen["val"]) and POOL_NAME in seen["graphs"]
    (record,) = payload["train_sets"]
    assert record["key"] == "train_sets[0]" and record["name"] == "musique" and record["pooled"] is True
    assert record["sha256"] == file_sha256(data_file("musique/musique_ans_50.json"))
    assert record["graphs"] == 1 and record["questions"] == 3 and Path(record["folder"]).is_dir()
    assert payload["train_extra"] == {"graphs": 1, "questions": 3}
    assert json.loads((out / "results.json").read_text())["train_sets"] == payload["train_sets"]


def test_a_training_set_is_never_validated_or_tested(trained):
    out, payload, _ = trained
    (split,) = payload["splits"]
    assert POOL_NAME not in {*split["train"], *split["val"], *split["test"]}
    rows = [json.loads(x) for x in (out / "questions_router.jsonl").read_text().splitlines()]
    assert rows and not musique_qids() & {r["qid"] for r in rows}
    best = out / "fold0" / "router" / "best.pt"
    inputs = torch.load(best, weights_only=True)["inputs"]
    assert POOL_NAME in inputs["train_graphs"] and POOL_NAME not in inputs["val_graphs"]
    assert set(split["train"]) <= set(inputs["train_graphs"])
    (warning,) = check_inputs(best, inputs, GraphSet.load(payload["train_sets"][0]["folder"]))
    assert "1 of the 1 evaluated graphs were used to train or select the checkpoint" in warning


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ("{name: musique, colour: 1}", "train_sets[0].colour: unknown key"),
        ("{file: musique/musique_ans_50.json}", "train_sets[0].name: missing"),
        ("{name: wikipedia}", "train_sets[0].name 'wikipedia' is not one of"),
        ("{name: musique, limit: 0}", "train_sets[0].limit must be a positive integer"),
        ("{name: locomo, pooled: true}", "train_sets[0].pooled is for"),
        ("{name: musique, pool_size: 5}", "train_sets[0].pool_size=5 needs train_sets[0].pooled=true"),
        ("{name: musique, file: musique/none.json}", "train_sets[0].file: expected the data file"),
        ("{name: musique, train_files: [a.json]}", "train_sets[0].train_files: a training set is one file"),
        ("musique", "train_sets[0] must be a mapping"),
    ],
)
def test_a_bad_item_is_refused_naming_its_key(item, key, tmp_path):
    module = load_script("train")
    cfg = compose_cfg("train", ["data=hotpotqa", f"train_sets=[{item}]", f"out_dir={tmp_path}", *HASHING])
    with pytest.raises(ValueError) as err:
        module.check(cfg)
    assert str(err.value).startswith(key) and "\n" not in str(err.value)


def test_a_name_where_the_list_belongs_is_refused_naming_the_key(tmp_path):
    proc = run_script("train.py", "train_sets=hotpotqa", f"graphset={tmp_path / 'missing'}", tmp_path=tmp_path)
    assert error_line(proc).startswith(
        "error: train_sets='hotpotqa': must be a list of data mappings, e.g. train_sets="
    )


def test_the_test_file_under_renamed_ids_is_refused_as_a_training_set(tmp_path):
    lines = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text().splitlines()[:3]
    renamed = [json.dumps({**json.loads(x), "_id": f"renamed{i}"}) for i, x in enumerate(lines)]
    copy = tmp_path / "renamed.jsonl"
    copy.write_text("\n".join(renamed) + "\n")
    graph = {"encoder": "hashing", "cache_dir": str(tmp_path / "cache")}
    main = build_graphset(DataConfig(name="hotpotqa", limit=3), GraphConfig(**graph), progress=False)
    item = {"name": "hotpotqa", "file": str(copy)}
    with pytest.raises(ValueError, match=r"and the main set share 3 question texts under other names \(renamed0 = "):
        open_train_graphset({"name": "hotpotqa"}, graph, tmp_path / "sets", False, [item], main=main)
    texts = [json.dumps({**json.loads(x), "question": f"Another question {i}?"}) for i, x in enumerate(renamed)]
    copy.write_text("\n".join(texts) + "\n")  # the same passages under new questions: the same graphs
    with pytest.raises(ValueError, match=r"share 3 graphs of the same passages under other names"):
        open_train_graphset({"name": "hotpotqa"}, graph, tmp_path / "sets2", False, [item], main=main)


def test_a_bad_item_stops_the_command_line_in_one_line(tmp_path):
    proc = run_script(
        "train.py", "data=hotpotqa", "train_sets=[{name: musique, limit: -1}]", f"out_dir={tmp_path}", tmp_path=tmp_path
    )
    assert error_line(proc).startswith("error: train_sets[0].limit must be a positive integer")


def test_the_main_file_as_a_training_set_is_refused_naming_both():
    data = {"name": "hotpotqa", "train_files": ["hotpotqa/hotpot_train_100.jsonl"]}
    with pytest.raises(ValueError, match=r"train_sets\[0\] \(hotpotqa pooled .*\) and the main set \(data\) both read"):
        train_sources(data, [{"name": "hotpotqa", "file": "hotpotqa/hotpot_dev_distractor_200.jsonl", "pooled": True}])
    item = {"name": "hotpotqa", "file": "hotpotqa/hotpot_train_100.jsonl"}
    with pytest.raises(ValueError, match=r"train_sets\[0\] .* and data.train_files\[0\] .* both read"):
        train_sources(data, [item], train_files=True)
    assert [s.key for s in train_sources(data, [item], train_files=False)] == ["train_sets[0]"]


def test_shared_graph_names_are_refused_naming_both(tmp_path):
    copy = tmp_path / "elsewhere" / "musique_ans_50.json"  # another file, the same pooled graph name
    copy.parent.mkdir()
    shutil.copy(data_file("musique/musique_ans_50.json"), copy)
    graph = {"encoder": "hashing", "cache_dir": str(tmp_path / "cache")}
    main = build_graphset(DataConfig(name="musique", pooled=True, limit=2), GraphConfig(**graph), progress=False)
    item = {"name": "musique", "file": str(copy), "pooled": True, "limit": 2}
    with pytest.raises(
        ValueError, match=rf"train_sets\[0\] \(musique pooled .*\) and the main set share graphs \['{POOL_NAME}'\]"
    ):
        open_train_graphset({"name": "hotpotqa"}, graph, tmp_path / "sets", False, [item], main=main)


def test_train_gnn_trains_on_the_training_sets(main_set):
    module = load_script("train_gnn")
    seen = {}
    real = module.train_reader

    def recording(train, cfg, budget, val=None, **kw):
        seen["train"], seen["val"] = {q for e in train for q in e.qids}, {q for e in val or [] for q in e.qids}
        return real(train, cfg, budget, val=val, **kw)

    checkpoint = main_set / "gnn" / "reader.pt"
    cfg = compose_cfg(
        "gnn",
        [
            f"graphset={main_set / 'hotpot'}",
            "data=hotpotqa",
            f"train_sets={MUSIQUE_POOL}",
            f"graphset_dir={main_set / 'sets'}",
            "split.k=3",
            "train.epochs=1",
            f"checkpoint={checkpoint}",
            f"out_dir={main_set / 'gnn'}",
            *HASHING,
        ],
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "train_reader", recording)
        payload = module.run(cfg)
    assert musique_qids() <= seen["train"] and not musique_qids() & seen["val"]
    assert payload["split"]["train_only"] == [POOL_NAME] and POOL_NAME not in payload["split"]["test"]
    (record,) = payload["train_sets"]
    assert record["questions"] == 3 and record["sha256"] == file_sha256(data_file("musique/musique_ans_50.json"))
    assert POOL_NAME in torch.load(checkpoint, weights_only=True)["inputs"]["train_graphs"]


def test_the_multihop_experiments_train_on_the_same_pools(tmp_path):
    walk = compose_cfg("train", ["+experiment=multihop", f"out_dir={tmp_path}"])
    reader = compose_cfg("gnn", ["+experiment=multihop_gnn"])
    sets = [(s["name"], s["file"], s.get("pool_size")) for s in walk.train_sets]
    assert sets == [
        ("hotpotqa", "hotpotqa/hotpot_train_100.jsonl", 200),
        ("hotpotqa", "hotpotqa/hotpot_train_500.jsonl", 200),
        ("hotpotqa", "hotpotqa/hotpot_dev_distractor_rpt_993.jsonl", 200),
        ("musique", "musique/musique_ans_train_199.json", 50),
        ("musique", "musique/musique_migres_200.jsonl", 50),
    ]
    assert walk.data.name == "2wiki" and walk.data.pooled and walk.data.pool_size == 100
    assert walk.cv.k == 5 and list(walk.cv.folds) == [0] and walk.policy.entry_selector == "hybrid"
    assert list(walk.baselines) == ["hybrid", "bm25", "dense_topk"] and walk.stats.reference == "hybrid"
    assert reader.data == walk.data and reader.train_sets == walk.train_sets
    assert (reader.split.k, reader.split.fold) == (5, 0)
    load_script("train").check(walk)  # every set's file exists, none is the main one


def test_the_per_question_walk_adds_a_shape_and_the_walk_before_drops_the_added_files(tmp_path):
    walk = compose_cfg("train", ["+experiment=multihop", f"out_dir={tmp_path}"])
    questions = compose_cfg("train", ["+experiment=multihop_questions", f"out_dir={tmp_path}"])
    before = compose_cfg("train", ["+experiment=multihop_before", f"out_dir={tmp_path}"])
    key = lambda s: (s["name"], s["file"], bool(s.get("pooled")))  # noqa: E731
    pools = [key(s) for s in walk.train_sets]
    assert [key(s) for s in questions.train_sets] == [
        *pools,
        ("hotpotqa", "hotpotqa/hotpot_train_100.jsonl", False),
        ("hotpotqa", "hotpotqa/hotpot_train_500.jsonl", False),
    ]
    added = {"hotpotqa/hotpot_dev_distractor_rpt_993.jsonl", "musique/musique_migres_200.jsonl"}
    assert [key(s) for s in before.train_sets] == [s for s in pools if s[1] not in added]
    for cfg in (questions, before):
        assert cfg.data == walk.data and cfg.cv == walk.cv and cfg.trainer == walk.trainer
        load_script("train").check(cfg)


def test_one_training_file_in_both_shapes_trains_under_ids_of_its_own(main_set):
    pooled = {"name": "musique", "pooled": True, "limit": 3}
    per_question = {"name": "musique", "limit": 3}
    both = train_sources({"name": "hotpotqa"}, [pooled, per_question], train_files=False)
    assert [s.data.pooled for s in both] == [True, False]
    with pytest.raises(ValueError, match=r"train_sets\[1\] .* and train_sets\[0\] .* both read"):
        train_sources({"name": "hotpotqa"}, [pooled, pooled], train_files=False)
    with pytest.raises(ValueError, match="the main set"):  # never the main file, in either shape
        train_sources({"name": "musique", "pooled": True}, [per_question], train_files=False)
    graph = {"encoder": "hashing"}
    extra = open_train_graphset({"name": "hotpotqa"}, graph, main_set / "sets", False, [pooled, per_question], False)
    qids = [q.qid for q in extra.questions]
    assert len(qids) == 6 and len(set(qids)) == 6
    assert {q for q in qids if q.endswith("@per-question")} == {f"{q}@per-question" for q in musique_qids()}
