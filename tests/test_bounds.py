"""Bounds of size-like config keys checked when the config is composed, and the one-line errors of the
checks that used to come after the work, as tracebacks or as vague messages."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
from docgen.headline import render_headline
from docgen.sources import ResultsFileError

import rl.walk  # noqa: F401  (registers the trainer group's schema)
from graphmem.config.bounds import CONFIG_BOUNDS, BoundsError, check_bounds
from graphmem.config.cli import ConfigError, name_list, split_names
from tests.one_line_errors import error_line, run_script
from tests.script_loader import compose

sys.path.insert(0, str(Path(__file__).resolve().parent))
from script_loader import load_script, load_study  # noqa: E402

render_relation_family = load_study("relation_family", "page").render

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


@pytest.mark.parametrize(
    "config, override, message",
    [
        (
            "train",
            "trainer.objective.group_size=1000000",
            "trainer.objective.group_size=1000000: must be an integer in [1,",
        ),
        ("train", "trainer.optim.batch_size=0", "trainer.optim.batch_size=0: must be an integer in [1,"),
        (
            "train",
            "cv.folds=[0,7]",
            "cv.folds=[0, 7]: must be a list of integers, each in [0, 4] (cv.k=5), or null, got 7",
        ),
        ("train", "budget.max_nodes=10000000", "budget.max_nodes=10000000: must be an integer in [0, 1000000]"),
        ("gnn", "train.epochs=-1", "train.epochs=-1: must be an integer in [1, 100000]"),
        ("gnn", "split.fold=9", "split.fold=9: must be an integer in [0, 4] (split.k=5)"),
        ("gnn", "split.k=2", "split.k=2: must be an integer in [3, 1000]"),
        (
            "benchmark",
            "sizes=[1000,abc]",
            "sizes=[1000, 'abc']: must be a list of integers, each in [1, 1000000000], got 'abc'",
        ),
        ("benchmark", "loop_queries=100", "loop_queries=100: must be an integer in [0, 64] (num_queries=64)"),
        ("evaluate", "seed=abc", "seed='abc': must be an integer in [0, 4294967295]"),
        ("evaluate", "graphs_part=bogus", "graphs_part='bogus': must be one of ['train', 'val', 'test']"),
        ("head_to_head", "feedback.n_questions=0", "feedback.n_questions=0: must be an integer in [1,"),
        (
            "relation_family",
            "seeds=[0,-1]",
            "seeds=[0, -1]: must be a list of integers, each in [0, 4294967295], got -1",
        ),
        ("writer", "writer.num_generations=0", "writer.num_generations=0: must be an integer in [1, 10000]"),
        ("self_evolve", "rounds=0", "rounds=0: must be an integer in [1, 100000]"),
        ("self_evolve", "train.epochs=0", "train.epochs=0: must be an integer in [1, 100000]"),
        ("writer_heldout", "writer.max_steps=0", "writer.max_steps=0: must be an integer in [1, 10000000]"),
        ("writer_heldout", "writer.max_steps=-1", "writer.max_steps=-1: must be an integer in [1, 10000000]"),
        ("writer_heldout", "sft.max_steps=0", "sft.max_steps=0: must be an integer in [1, 10000000]"),
        ("writer_heldout", "reader.epochs=0", "reader.epochs=0: must be an integer in [1, 100000]"),
        ("writer", "sft.learning_rate=1e20", "sft.learning_rate=1e+20: must be a finite number in (0, 10]"),
    ],
)
def test_a_size_out_of_its_bounds_is_refused_naming_the_key_and_range(config, override, message):
    cfg = compose(config, [override])
    with pytest.raises(BoundsError) as refused:
        check_bounds(config, cfg, memory=64 * GIB)
    assert str(refused.value).startswith(message), str(refused.value)


@pytest.mark.parametrize("config", sorted(CONFIG_BOUNDS))
def test_every_entry_points_defaults_lie_within_their_bounds(config):
    check_bounds(config, compose(config), memory=64 * GIB)  # the shipped settings are all allowed


def test_every_hydra_entry_point_and_study_has_its_bounds():
    names = {  # each script starts with graphmem.config.entry.main("<config name>", ...)
        m.group(1)
        for path in ROOT.joinpath("scripts").rglob("*.py")
        for m in re.finditer(r'(?:config_name=|\bmain\()"(\w+)"', path.read_text(encoding="utf-8"))
    }
    assert names and not names - set(CONFIG_BOUNDS), sorted(names - set(CONFIG_BOUNDS))


def test_a_writer_model_that_is_not_there_is_refused_naming_the_key(tmp_path):
    from rl.writer.grpo import WriterConfig

    with pytest.raises(ValueError, match=r"writer.model='.*missing': neither 'smollm2' nor 'tiny' nor a model folder"):
        WriterConfig(model=str(tmp_path / "missing"))


def test_what_a_size_allocates_is_held_against_the_memory_available():
    cfg = compose("train", ["trainer.objective.group_size=10000"])  # within the hard cap
    with pytest.raises(BoundsError) as refused:
        check_bounds("train", cfg, memory=16 * GIB)
    message = str(refused.value)
    assert message.startswith("trainer.objective.group_size=10000: walks of one policy-gradient step")
    most = int(message.rsplit("at most ", 1)[1].replace(",", ""))
    assert "of memory available here" in message and 0 < most < 10000
    check_bounds("train", compose("train", [f"trainer.objective.group_size={most}"]), memory=16 * GIB)
    with pytest.raises(BoundsError, match=r"sizes=500000000: a synthetic graph of that many nodes"):
        check_bounds("benchmark", compose("benchmark", ["sizes=[1000,500000000]"]), memory=16 * GIB)


@pytest.mark.parametrize(
    "script, overrides, message",
    [
        ("train.py", ["trainer.objective.group_size=1000000"], "error: trainer.objective.group_size=1000000: must be"),
        ("train.py", ["cv.folds=abc"], "error: cv.folds='abc': must be a list of integers"),
        ("train_gnn.py", ["train.epochs=-1"], "error: train.epochs=-1: must be an integer in [1, 100000]"),
        ("train_gnn.py", ["split.fold=9"], "error: split.fold=9: must be an integer in [0, 4] (split.k=5)"),
        ("benchmark.py", ["sizes=[abc]"], "error: sizes=['abc']: must be a list of integers, each in [1,"),
        ("evaluate.py", ["seed=abc"], "error: seed='abc': must be an integer in [0, 4294967295]"),
        ("evaluate.py", ["graphs={tmp}/missing.json"], "error: graphs={tmp}/missing.json: no such split file"),
        ("evaluate.py", ["graphs={tmp}/empty.json"], "error: graphs={tmp}/empty.json: {tmp}/empty.json is empty"),
        (
            "evaluate.py",
            ["graphs={tmp}/split.json", "graphs_part=val"],
            "error: graphs_part='val': {tmp}/split.json has no list 'val'; its lists: ['test', 'train']",
        ),
        (
            "evaluate.py",
            ["-m", "budget.max_nodes=40,abc", "hydra.sweep.dir={tmp}/sweep"],
            "error: job (budget.max_nodes=abc): budget.max_nodes=abc: Value 'abc'",
        ),
        (
            "evaluate.py",
            ["graphset={tmp}/hotpot", "data=locomo"],
            "error: data=locomo contradicts graphset={tmp}/hotpot, which holds a 'hotpotqa' set",
        ),
    ],
)
def test_a_refused_input_is_one_line_before_any_work(tmp_path, script, overrides, message):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "split.json").write_text(json.dumps({"train": ["a"], "test": ["b"]}))
    (tmp_path / "hotpot").mkdir()
    (tmp_path / "hotpot" / "manifest.json").write_text(json.dumps({"dataset": "hotpotqa"}))
    args = [a.format(tmp=tmp_path) for a in overrides]
    if script != "benchmark.py" and not any(a.startswith("graphset=") for a in args):
        args.append(f"graphset={tmp_path / 'missing'}")  # an error about the set would mean work had started
    proc = run_script(script, *args, f"out_dir={tmp_path / 'out'}", tmp_path=tmp_path)
    line = error_line(proc)
    assert line.startswith(message.format(tmp=tmp_path)) and "Expecting value" not in line, line
    assert not (tmp_path / "hydra").exists() and not (tmp_path / "out").exists() and not (tmp_path / "sweep").exists()


def test_a_pooled_set_is_of_its_dataset_kind(tmp_path):
    from graphmem.config.cli import saved_dataset_kind

    (tmp_path / "manifest.json").write_text(
        json.dumps({"dataset": "hotpotqa-pooled", "provenance": {"dataset": "hotpotqa"}})
    )
    assert saved_dataset_kind(tmp_path) == "hotpotqa"  # data=hotpotqa_pooled (name hotpotqa) agrees with it
    (tmp_path / "manifest.json").write_text(json.dumps({"dataset": "locomo"}))
    assert saved_dataset_kind(tmp_path) == "locomo"
    assert saved_dataset_kind(tmp_path / "missing") is None


def test_a_single_policy_name_is_a_one_element_list(tmp_path):
    cfg = compose("evaluate", ["policies=beta_bfs", "stats.reference=null", f"out_dir={tmp_path / 'out'}"])
    assert list(load_script("evaluate").plan_run(cfg).policies) == ["beta_bfs"]
    assert name_list(["bm25", "ppr"], "baselines") == ["bm25", "ppr"]
    with pytest.raises(ConfigError, match=r"policies=3: must be a policy name or a list of names"):
        name_list(3, "policies")


def test_a_split_file_without_the_part_names_file_and_key(tmp_path):
    path = tmp_path / "fold0.pt.split.json"
    path.write_text(json.dumps({"train": ["a"], "val": ["b"], "test": ["c", "d"], "run_id": "r"}))
    assert split_names(path, "test") == ["c", "d"]
    with pytest.raises(ConfigError, match=r"graphs_part='bogus': .*fold0.pt.split.json has no list 'bogus'"):
        split_names(path, "bogus")
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=r"holds no lists of graph names"):
        split_names(path, "test")


def _edited_results(tmp_path: Path, name: str, edit) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    payload = json.loads((ROOT / "docs" / "results" / name).read_text())
    edit(payload)
    (results / name).write_text(json.dumps(payload))
    return results


def test_a_hand_edited_fold_next_to_its_stored_mean_is_refused(tmp_path):
    name = "learned_vs_hybrid_locomo.json"

    def edit(payload):
        record = next(r for r in payload["records"] if r["policy"] == "hybrid" and r["fold"] == 1)
        record["test"]["evidence_recall"] += 0.1

    with pytest.raises(ResultsFileError) as refused:
        render_headline(_edited_results(tmp_path, name, edit))
    assert f"{name}: field 'summary.hybrid.evidence_recall.mean' is " in str(refused.value)
    assert "per-fold values give" in str(refused.value)


def test_a_hand_edited_family_mean_is_refused(tmp_path):
    def edit(payload):
        payload["summary"]["full"]["std"] = 0.5

    shutil.copy(ROOT / "docs" / "results" / "relation_family_untyped.json", tmp_path / "untyped.json")
    results = _edited_results(tmp_path, "relation_family.json", edit)
    shutil.copy(tmp_path / "untyped.json", results / "relation_family_untyped.json")
    with pytest.raises(ResultsFileError, match=r"relation_family.json: field 'summary.full.std' is 0.5, but its"):
        render_relation_family(results)
