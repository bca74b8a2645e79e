"""scripts/studies/multihop/run.py end to end on a tiny pooled set (hashing encoder): a walk trained by
scripts/train.py with a training-only set, an ablation and an untrained GNN reader; the JSON pairs every policy
with hybrid over all the questions, holds the load-order walk and the training sets; the page renders it."""

import json
from pathlib import Path

import pytest
from docgen.sources import ResultsFileError
from hydra import compose, initialize_config_dir
from script_loader import load_script, load_study
from script_runner import run as run_script

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.store.checkpoint import checkpoint_inputs
from graphmem.store.graphset import GraphSet
from graphmem.store.setstore import file_sha256

ROOT = Path(__file__).resolve().parents[1]
study = load_study("multihop", "run")
page = load_study("multihop", "page")
HASHING = ["graph.encoder=hashing", "logger=none", "progress=false"]


TRAIN = [
    "data=hotpotqa",
    "train_sets=[{name: musique, pooled: true, limit: 3}]",
    "cv.k=3",
    "trainer.objective.imitation_epochs=1",
    "trainer.objective.rl_epochs=0",
    "trainer.rank.epochs=2",
    "trainer.run.device=cpu",
    "baselines=[hybrid]",
    "stats.reference=hybrid",
    "stats.n_boot=100",
    *HASHING,
]
"""one fold of scripts/train.py, one imitation epoch and a small ranking head, a MuSiQue pool as a training set"""


def train_walk(tmp: Path) -> Path:
    """The walk trained with :data:`TRAIN` on the set at ``tmp/train-set``: its best.pt."""
    folders = [f"graphset={tmp / 'train-set'}", f"graphset_dir={tmp / 'sets'}", f"out_dir={tmp / 'train'}"]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        load_script("train").run(compose(config_name="train", overrides=[*TRAIN, *folders]))
    return tmp / "train" / "fold0" / "router" / "best.pt"


def untrained_reader(gs: GraphSet, path: Path) -> Path:
    """A GNN reader checkpoint of the set's embedding size, saved as scripts/train_gnn.py saves one."""
    from models.gnn_reader import GNNReader
    from rl.gnn.train import save_checkpoint

    reader = GNNReader(input_dim=int(gs.query_embeddings.shape[1]), hidden_dim=8, num_layers=1)
    return save_checkpoint(reader, path, run_id="r0", inputs=checkpoint_inputs(gs, []))


def evaluate_in_forked_process(cmd: list[str]) -> None:
    proc = run_script(cmd, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("multihop")
    graph = GraphConfig(encoder="hashing", cache_dir=str(tmp / "cache"))
    build_graphset(DataConfig(name="hotpotqa", limit=6), graph, progress=False).save(tmp / "train-set")
    test = build_graphset(DataConfig(name="hotpotqa", pooled=True, limit=6), graph, progress=False)
    test.save(tmp / "graphs" / "hotpotqa-pooled")
    walk = train_walk(tmp)
    gnn = untrained_reader(test, tmp / "gnn" / "gnn.pt")
    args = ["--walk", str(walk), "--extra-walk", f"again={walk}", "--gnn", str(gnn), "--sets", "hotpotqa-pooled"]
    args += ["--graphs", str(tmp / "graphs"), "--runs", str(tmp / "runs"), "--out", str(tmp / "out"), "--n-boot", "200"]
    assert study.main(args, runner=evaluate_in_forked_process) == 0
    return tmp, walk, gnn, json.loads((tmp / "out" / "multihop.json").read_text()), len(test.questions)


def test_every_policy_is_measured_and_paired_with_hybrid_on_every_question(measured):
    tmp, walk, _, res, questions = measured
    entry = res["sets"]["hotpotqa-pooled"]
    names = ["multihop", "multihop_load_order", "again", "gnn", "hybrid", "bm25", "dense_topk"]
    assert list(entry["policies"]) == names
    assert all(p["questions"] == questions for p in entry["policies"].values())
    assert entry["policies"]["multihop_load_order"]["run"] == "multihop_load_order"
    config = json.loads((tmp / "runs" / "hotpotqa-pooled" / "multihop_load_order" / "results.json").read_text())
    assert config["meta"]["policy_configs"]["router"]["rank"] is False
    assert "policy.rank=false" in entry["evaluate"]["multihop_load_order"]
    pairs = {(c["policy"], c["reference"], c["metric"]): c for c in entry["paired"]}
    for name in names[:4] + names[5:]:
        for metric in ("passage_recall_2", "passage_recall_5", "support_paragraph_recall", "evidence_recall"):
            c = pairs[(name, "hybrid", metric)]
            assert c["n"] == questions and c["ci_low"] <= c["mean_diff"] <= c["ci_high"]
            assert c["mean"] == pytest.approx(entry["policies"][name]["means"][metric])
    for a, b in (("multihop", "multihop_load_order"), ("multihop", "gnn"), ("again", "multihop")):
        assert pairs[(a, b, "passage_recall_5")]["n"] == questions
    assert pairs[("again", "multihop", "passage_recall_2")]["mean_diff"] == 0  # the same checkpoint
    assert entry["policies"]["hybrid"]["means"]["chain_following"] is None  # HotpotQA records no chain
    assert not any(c["metric"] == "chain_following" for c in entry["paired"])


def test_the_checkpoints_and_the_training_sets_are_recorded(measured):
    tmp, walk, gnn, res, _ = measured
    ckpt = res["checkpoints"]["multihop"]
    assert ckpt["sha256"] == file_sha256(walk) and ckpt["role"] == "walk" and ckpt["rank_head"] in (True, False)
    training = ckpt["training"]
    assert Path(training["folder"]) == tmp / "train" and training["file"] == "results.json" and training["same_run"]
    assert training["data"]["name"] == "hotpotqa" and training["folds"] == [0]
    (extra,) = training["train_sets"]
    assert extra["name"] == "musique" and extra["pooled"] is True and extra["questions"] == 3
    assert res["checkpoints"]["gnn"]["training"] is None and res["checkpoints"]["gnn"]["sha256"] == file_sha256(gnn)
    assert res["checkpoints"]["again"]["role"] == "ablation"
    assert res["command"].startswith("python scripts/studies/multihop/run.py --walk ")
    assert len(res["sets"]["hotpotqa-pooled"]["evaluate"]) == 5


def test_the_page_renders_the_file(measured):
    tmp, _, _, res, questions = measured
    text = page.render(tmp / "out")
    assert f"## hotpotqa-pooled ({questions} questions)" in text
    for name in ("multihop", "multihop_load_order", "again", "gnn", "bm25", "dense_topk"):
        assert f"| hotpotqa-pooled | {name} − hybrid | R@2 |" in text
    assert "| hotpotqa-pooled | multihop − multihop_load_order | R@5 |" in text
    assert "`multihop` was trained on hotpotqa (`hotpotqa/hotpot_dev_distractor_200.jsonl`" in text
    assert "the training-only sets musique (`musique/musique_ans_50.json` pooled, first 3 records, 3 questions)" in text


def comparison(policy, reference, metric, first, second, lo, hi, n=200):
    means = {"mean": first, "reference_mean": second, "mean_diff": first - second}
    return {"policy": policy, "reference": reference, "metric": metric, "n": n, **means} | {
        "ci_low": lo,
        "ci_high": hi,
        "p_value": 3e-5,
    }


def means(r2, r5, chain):
    return {"passage_recall_2": r2, "passage_recall_5": r5, "support_paragraph_recall": 0.9} | {
        "evidence_recall": 0.9,
        "chain_following": chain,
    }


def small_results():
    """A multihop.json of two sets: MuSiQue with a chain and a GNN reader, HotpotQA without either."""
    musique = {
        "dataset": "musique",
        "evaluate": {"multihop": "python scripts/evaluate.py graphset=outputs/graphs/musique-pooled policy=router"},
        "policies": {
            "multihop": {"run": "multihop", "means": means(0.61, 0.72, 0.5), "questions": 50},
            "multihop_load_order": {"run": "multihop_load_order", "means": means(0.41, 0.7, 0.4), "questions": 50},
            "gnn": {"run": "gnn", "means": means(0.55, 0.7, None), "questions": 50},
            "hybrid": {"run": "baselines", "means": means(0.5, 0.65, 0.3), "questions": 50},
        },
        "paired": [
            comparison("multihop", "hybrid", "passage_recall_2", 0.61, 0.5, 0.02, 0.2, 50),
            comparison("multihop", "hybrid", "evidence_recall", 0.9, 0.9, 0.0, 0.0, 50),
            comparison("multihop", "multihop_load_order", "passage_recall_2", 0.61, 0.41, 0.1, 0.3, 50),
            comparison("multihop", "hybrid", "chain_following", 0.5, 0.3, 0.05, 0.35, 50),
        ],
    }
    hotpot = {
        "dataset": "hotpotqa",
        "evaluate": {"baselines": "python scripts/evaluate.py 'policies=[hybrid,bm25,dense_topk]'"},
        "policies": {
            "multihop": {"run": "multihop", "means": means(0.8, 0.9, None), "questions": 200},
            "hybrid": {"run": "baselines", "means": means(0.78, 0.88, None), "questions": 200},
        },
        "paired": [comparison("multihop", "hybrid", "passage_recall_5", 0.9, 0.88, -0.01, 0.05)],
    }
    training = {
        "folder": "outputs/train/multihop", "file": "results.json", "run_id": "r1", "same_run": True,
        "dataset": "2wiki", "folds": [0],
        "data": {"name": "2wiki", "file": "2wiki/train.json", "pooled": True, "pool_size": 100},
        "train_sets": [{"name": "hotpotqa", "file": "hotpotqa/hotpot_train_100.jsonl", "pooled": True,
                        "pool_size": 200, "questions": 100}],
    }  # fmt: skip
    walk = {"role": "walk", "kind": "walk", "path": "outputs/train/multihop/fold0/router/best.pt",
            "sha256": "ab" * 32, "run_id": "r1", "rank_head": True, "train_graphs": 12, "val_graphs": 1,
            "training": training}  # fmt: skip
    gnn = {"role": "gnn", "kind": "gnn", "path": "outputs/gnn/multihop/gnn.pt", "sha256": "cd" * 32, "run_id": "g",
           "rank_head": None, "train_graphs": 12, "val_graphs": 1, "training": None}  # fmt: skip
    return {"command": "python scripts/studies/multihop/run.py --walk outputs/train/multihop/fold0/router/best.pt",
            "walk": "multihop", "reference": "hybrid", "metrics": list(study.METRICS), "n_boot": 10000,
            "checkpoints": {"multihop": walk, "gnn": gnn}, "sets": {"musique-pooled": musique,
            "hotpotqa-pooled": hotpot}, "wall_s": 61.0}  # fmt: skip


def test_the_page_renders_a_small_file_whatever_policies_it_holds(tmp_path):
    (tmp_path / "multihop.json").write_text(json.dumps(small_results()))
    text = page.render(tmp_path)
    assert (
        "## musique-pooled (musique, 50 questions)" in text and "## hotpotqa-pooled (hotpotqa, 200 questions)" in text
    )
    assert "| multihop | 0.610 | 0.720 | 0.900 | 0.500 | 50 |" in text
    assert "| gnn | 0.550 | 0.700 | 0.900 | — | 50 |" in text and "| hybrid | 0.780 | 0.880 | 0.900 | — | 200 |" in text
    assert (
        "| musique-pooled | multihop − hybrid | R@2 | 0.610 | 0.500 | +0.110 | [+0.020, +0.200] | <1e-4 | 50 |" in text
    )
    assert "| musique-pooled | multihop − hybrid | chain following | 0.500 | 0.300 | +0.200 |" in text
    assert (
        "| hotpotqa-pooled | multihop − hybrid | R@5 | 0.900 | 0.880 | +0.020 | [-0.010, +0.050] | <1e-4 | 200 |"
        in text
    )
    assert "evidence_recall" not in text.split("## Paired")[1]  # the page's tables show its four metrics
    own = text.split("## The walk's own comparisons")[1]
    assert "| musique-pooled | multihop − multihop_load_order | R@2 | 0.610 | 0.410 | +0.200 |" in own
    assert "multihop − hybrid" not in own
    assert (
        "`multihop` was trained on 2wiki (`2wiki/train.json` pooled in pools of 100), test fold 0 held out and the "
        "training-only sets hotpotqa (`hotpotqa/hotpot_train_100.jsonl` pooled in pools of 200, 100 questions), as "
        "recorded in `outputs/train/multihop/results.json` (its checkpoint lists 12 training and 1 validation graphs)."
        in text
    )
    assert (
        "- `multihop` (walk): `outputs/train/multihop/fold0/router/best.pt` (SHA-256 `abababababab`; ranking head)"
        in text
    )


def test_the_page_says_what_it_does_not_know(tmp_path):
    assert "Not measured yet." in page.render(tmp_path)
    res = small_results()
    res["checkpoints"]["multihop"]["training"] = None
    res["sets"]["musique-pooled"]["paired"] = [c for c in res["sets"]["musique-pooled"]["paired"]
                                               if c["reference"] == "hybrid"]  # fmt: skip
    (tmp_path / "multihop.json").write_text(json.dumps(res))
    text = page.render(tmp_path)
    assert "`multihop` was trained on sets this study cannot name" in text and "own comparisons" not in text
    del res["sets"]["hotpotqa-pooled"]["paired"]
    (tmp_path / "multihop.json").write_text(json.dumps(res))
    with pytest.raises(ResultsFileError, match=r"multihop.json: missing field 'paired'"):
        page.render(tmp_path)


def test_make_docs_renders_the_page_and_the_committed_page_is_current(tmp_path):
    render = load_script("make_docs").renderers([ROOT / "scripts" / "studies" / "multihop" / "page.py"])["multihop"]
    (tmp_path / "multihop.json").write_text(json.dumps(small_results()))
    assert render(tmp_path) == page.render(tmp_path) and "| multihop | 0.800 | 0.900 |" in render(tmp_path)
    committed = (ROOT / "docs" / "multihop.md").read_text(encoding="utf-8")
    assert committed == render(ROOT / "docs" / "results").rstrip("\n") + "\n"  # what make_docs.py --check compares


def test_dry_run_prints_every_command_and_runs_nothing(tmp_path, capsys):
    args = ["--walk", "w.pt", "--extra-walk", "no_sets=x.pt", "--gnn", "g.pt", "--sets", "a", "b"]
    assert study.main([*args, "--runs", str(tmp_path / "runs"), "--dry-run"], runner=None) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 and not (tmp_path / "runs").exists()
    load_order, gnn, baselines = lines[1], lines[3], lines[9]
    assert "policy=router policy.checkpoint=w.pt policy.strict_split=true policy.rank=false" in load_order
    assert load_order.endswith("/a/multihop_load_order") and "'policies=[hybrid,bm25,dense_topk]'" in baselines
    assert "policy=gnn policy.checkpoint=g.pt policy.strict_split=true" in gnn and baselines.endswith("/b/baselines")


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (["--extra-walk", "nopath"], "error: --extra-walk 'nopath': expected NAME=PATH"),
        (["--extra-walk", "bm25=x.pt"], "error: policy names used twice: ['bm25']"),
        (["--walk-name", "../up"], "error: --walk-name='../up' cannot be used"),
        (["--sets", "elsewhere"], "error: --sets elsewhere: no saved graph set at"),
        ([], "error: missing.pt: checkpoint not found"),
    ],
)
def test_bad_input_is_one_line(extra, error, tmp_path, capsys):
    (tmp_path / "graphs" / "here").mkdir(parents=True)
    (tmp_path / "graphs" / "here" / "manifest.json").write_text("{}")
    argv = ["--walk", "missing.pt", "--sets", "here", *extra, "--graphs", str(tmp_path / "graphs")]
    argv += ["--runs", str(tmp_path), "--out", str(tmp_path)]
    assert study.main(argv, runner=pytest.fail) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(error), err


def test_policies_that_scored_other_questions_are_refused():
    rows = {"multihop": {"q1": {}, "q2": {}}, "hybrid": {"q1": {}, "q3": {}}}
    with pytest.raises(study.InputError, match=r"set s: 'hybrid' and 'multihop' scored different questions \(2 differ"):
        study.same_questions("s", rows)
    study.same_questions("s", {"multihop": {"q1": {}}, "hybrid": {"q1": {}}})


def test_a_set_the_walk_was_trained_on_is_refused(measured, capsys):
    tmp, walk = measured[:2]

    def forked(cmd):
        proc = run_script(cmd, cwd=ROOT, timeout=300)
        if proc.returncode != 0:
            raise study.InputError(proc.stderr.strip().splitlines()[-1])

    argv = ["--walk", str(walk), "--sets", "train-set", "--graphs", str(tmp), "--runs", str(tmp / "refused")]
    assert study.main([*argv, "--out", str(tmp / "refused-out")], runner=forked) == 2
    assert "were used to train or select the checkpoint" in capsys.readouterr().err
    assert not (tmp / "refused-out").exists()
