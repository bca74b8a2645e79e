"""train.py tables and outputs (fold std ddof = 1, paired statistics, per-question test rows, training-only
files) and a router trained on HotpotQA evaluated on MuSiQue with one evaluate.py call."""

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from script_loader import load_script

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.datasets import data_file
from graphmem.eval.stats import fold_std
from graphmem.index.embed import HashingEncoder

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
HASHING = ["graph.encoder=hashing", "logger=none", "progress=false"]


def compose_cfg(name, overrides):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    sets = tmp / "sets"
    hotpot = build_graphset(
        DataConfig(name="hotpotqa", limit=9), GraphConfig(encoder="hashing"), encoder=HashingEncoder(), progress=False
    )
    hotpot.save(sets / "hotpot")
    train_file = tmp / "train3.jsonl"
    train_file.write_text("\n".join(data_file("hotpotqa/hotpot_train_100.jsonl").read_text().splitlines()[:3]) + "\n")
    cfg = compose_cfg(
        "train",
        [
            f"graphset={sets / 'hotpot'}",
            "data=hotpotqa",
            f"data.train_files=[{train_file}]",
            "train_extra=true",
            f"graphset_dir={sets}",
            "cv.k=3",
            "cv.folds=null",
            "trainer.objective.imitation_epochs=1",
            "trainer.objective.rl_epochs=1",
            "trainer.run.device=cpu",
            "baselines=[beta_bfs]",
            "stats.reference=dense_topk",
            "stats.n_boot=500",
            f"out_dir={tmp / 'out'}",
            *HASHING,
        ],
    )
    payload = load_script("train").run(cfg)
    return tmp, payload


def test_fold_std_is_sample_std_and_questions_are_counted(trained):
    tmp, payload = trained
    recall = payload["summary"]["router"]["evidence_recall"]
    folds = [r["test"]["evidence_recall"] for r in payload["records"] if r["policy"] == "router"]
    assert len(folds) == 3 and recall["std"] == pytest.approx(fold_std(folds)) and recall["folds"] == 3
    assert payload["questions"] == {"router": 9, "beta_bfs": 9, "dense_topk": 9}  # every question tested once
    assert payload["provenance"]["question_rows"] == payload["questions"] and payload["provenance"]["finished"]
    assert payload["train_extra"] == {"graphs": 3, "questions": 3}


def test_per_question_rows_of_every_fold_and_paired_statistics(trained):
    tmp, payload = trained
    out = tmp / "out"
    rows = {
        p: [json.loads(x) for x in (out / f"questions_{p}.jsonl").read_text().splitlines()]
        for p in payload["questions"]
    }
    assert sorted({r["fold"] for r in rows["router"]}) == [0, 1, 2] and len(rows["router"]) == 9
    assert {r["qid"] for r in rows["router"]} == {r["qid"] for r in rows["dense_topk"]}
    # no training-only question reaches the test rows
    extra = {json.loads(x)["_id"] for x in (tmp / "train3.jsonl").read_text().splitlines()}
    assert not extra & {r["qid"] for r in rows["router"]}
    assert payload["reference"] == "dense_topk" and {c["policy"] for c in payload["paired"]} == {"router", "beta_bfs"}
    c = next(c for c in payload["paired"] if c["policy"] == "beta_bfs" and c["metric"] == "support_paragraph_recall")
    ref = {r["qid"]: r["metrics"]["support_paragraph_recall"] for r in rows["dense_topk"]}
    diffs = [r["metrics"]["support_paragraph_recall"] - ref[r["qid"]] for r in rows["beta_bfs"]]
    assert c["n"] == 9 and c["mean_diff"] == pytest.approx(sum(diffs) / 9)
    md = (out / "results.md").read_text()
    assert "paired per-question differences vs **dense_topk**" in md and "| router | 9 |" in md


def test_router_trained_on_hotpotqa_evaluates_on_musique(trained):
    tmp, _ = trained
    checkpoint = tmp / "out" / "fold0" / "router" / "best.pt"
    cfg = compose_cfg(
        "evaluate",
        [
            "data=musique",
            "data.limit=3",
            f"graphset_dir={tmp / 'sets'}",
            "policies=[router]",
            "policy=router",
            f"policy.checkpoint={checkpoint}",
            "policy.device=cpu",
            "sweep_tokens=[]",
            "stats.n_boot=200",
            f"out_dir={tmp / 'transfer'}",
            *HASHING,
        ],
    )
    payload = load_script("evaluate").evaluate(cfg)
    assert payload["meta"]["dataset"] == "musique" and payload["meta"]["questions"] == 3
    assert payload["meta"]["policy_configs"]["router"]["checkpoint"] == str(checkpoint)
    router = payload["policies"]["router"]["summary"]["overall"]
    assert router["n"] == 3 and router["chain_following"] is not None and router["passage_recall_5"] is not None
    assert {c["policy"] for c in payload["paired"]} == {"router"}
