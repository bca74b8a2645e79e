"""Every input error before work, in one line naming the file, record or field, exit 2."""

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from graphmem.config.cli import preflight
from graphmem.datasets.hotpotqa import load_hotpotqa
from graphmem.datasets.locomo import load_locomo
from graphmem.datasets.paths import data_file
from rl.common.splits import conversation_folds, within_conversation_split
from tests import script_runner
from tests.small_sets import saved_locomo_set

ROOT = Path(__file__).resolve().parents[1]
FAKE_KEY = "sk-fake-0123456789abcdefSECRETkey"


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **extra}
    env.pop("NO_SUCH_VARIABLE_FOR_KEYS", None)
    return env


def _run(script, *overrides, tmp_path, **env):
    cmd = [sys.executable, f"scripts/{script}", *overrides, f"hydra.run.dir={tmp_path / 'hydra'}"]
    return script_runner.run(cmd, cwd=ROOT, env=_env(**env), timeout=300)


def _one_line_error(proc, *parts):
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for part in parts:
        assert part in errors[0], errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    return saved_locomo_set(tmp_path_factory.mktemp("inputs"), limit=2)


def test_an_absent_device_is_refused_at_config_time(tmp_path):
    # the graph set does not exist: an error about it would mean work had started
    proc = _run("train.py", "trainer.run.device=cuda", f"graphset={tmp_path / 'missing'}", tmp_path=tmp_path)
    _one_line_error(proc, "trainer.run.device='cuda': CUDA is not available on this machine")


@pytest.mark.parametrize(
    "config, override",
    [
        ("evaluate", "device=cuda:0"),
        ("gnn", "train.device=cuda"),
        ("benchmark", "compare_devices=[cpu,cuda]"),
        ("train", "+variants.big.device=cuda"),
    ],
)
def test_every_scripts_devices_are_checked_by_its_preflight(config, override, monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name=config, overrides=[override])
    key = override.lstrip("+").split("=")[0].replace("compare_devices", "compare_devices[1]")
    with pytest.raises(ValueError, match=re.escape(key) + ".*CUDA is not available"):
        preflight(cfg)


def test_non_utf8_and_empty_data_files_are_refused_naming_the_file(tmp_path):
    bad = tmp_path / "latin1.jsonl"
    good = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text(encoding="utf-8").splitlines()
    bad.write_bytes(("\n".join(good[:2]) + "\n").encode("utf-8") + '{"_id": "caf\xe9"}\n'.encode("latin-1"))
    common = ["graph.encoder=hashing", f"graphset_dir={tmp_path / 'sets'}", "plot=false", "progress=false"]
    proc = _run("build_graph.py", "data=hotpotqa", f"data.file={bad}", *common, tmp_path=tmp_path)
    _one_line_error(proc, str(bad), "not UTF-8 text at byte", "(line 3)")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    proc = _run("build_graph.py", "data=locomo", f"data.file={empty}", *common, tmp_path=tmp_path)
    _one_line_error(proc, str(empty), "0 graphs and 0 questions", "nothing to build")
    assert not (tmp_path / "sets").exists() or not any((tmp_path / "sets").rglob("manifest.json"))


def test_deeply_nested_json_in_a_data_file_is_one_line_naming_the_file(tmp_path):
    good = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text(encoding="utf-8").splitlines()[0]
    deep = tmp_path / "deep.jsonl"
    deep.write_text(good + "\n" + '{"_id": "x", "extra": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    common = ["graph.encoder=hashing", f"graphset_dir={tmp_path / 'sets'}", "plot=false", "progress=false"]
    proc = _run("build_graph.py", "data=hotpotqa", f"data.file={deep}", *common, tmp_path=tmp_path)
    _one_line_error(proc, f"{deep}: line 2: JSON nested deeper than Python's recursion limit")
    conversation = tmp_path / "deep.json"
    conversation.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="deep.json: JSON nested deeper"):
        load_locomo(conversation)


def test_truncated_manifest_and_damaged_graph_are_one_line_errors(small_set, tmp_path):
    damaged = shutil.copytree(small_set, tmp_path / "set")
    manifest = damaged / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text[: len(text) // 3])
    proc = _run(
        "evaluate.py", f"graphset={damaged}", "policies=[beta_bfs]", f"out_dir={tmp_path / 'e'}", tmp_path=tmp_path
    )
    _one_line_error(proc, str(manifest), "not valid JSON, truncated or corrupted?")
    manifest.write_text(text)
    graph = next(damaged.rglob("conv-30.safetensors"))
    graph.write_bytes(graph.read_bytes()[:-100])
    for script in ("train.py", "evaluate.py"):
        proc = _run(script, f"graphset={damaged}", f"out_dir={tmp_path / script}", "logger=none", tmp_path=tmp_path)
        _one_line_error(proc, str(graph))


def test_records_without_gold_fields_are_counted_in_the_load_report(tmp_path):
    records = json.loads(data_file("locomo/locomo_dev8.json").read_text(encoding="utf-8"))[:1]
    del records[0]["qa"][3]["evidence"]
    path = tmp_path / "one.json"
    path.write_text(json.dumps(records))
    _, questions, report = load_locomo(path)
    assert report.missing_gold == ["conv-26#3: no field 'evidence'"] and questions[3].evidence == ()
    assert any("questions without a gold field (kept, no gold): 1" in line for line in report.lines())
    lines = data_file("hotpotqa/hotpot_dev_distractor_200.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    first = json.loads(lines[0])
    del first["supporting_facts"]
    hot = tmp_path / "two.jsonl"
    hot.write_text(json.dumps(first) + "\n" + lines[1] + "\n")
    _, _, report = load_hotpotqa(hot)
    assert report.missing_gold == [f"{first['_id']}: no field 'supporting_facts'"]


def test_fractions_are_validated(tmp_path):
    proc = _run("train.py", "cv.val_fraction=1.5", f"graphset={tmp_path / 'missing'}", tmp_path=tmp_path)
    _one_line_error(proc, "cv.val_fraction must be a fraction in [0, 1), got 1.5")
    names = [f"g{i}" for i in range(10)]
    for bad in (1.0, -0.1, True, "0.2"):
        with pytest.raises(ValueError, match="val_fraction must be a fraction in"):
            conversation_folds(names, val_fraction=bad)
    with pytest.raises(ValueError, match="test_fraction must be a fraction in"):
        within_conversation_split(names, names, test_fraction=2.0)


def test_train_and_evaluate_treat_data_with_graphset_the_same_way(small_set, tmp_path):
    for script in ("train.py", "evaluate.py"):
        proc = _run(script, f"graphset={small_set}", "data.name=foo", f"out_dir={tmp_path / script}", tmp_path=tmp_path)
        _one_line_error(proc, "invalid data/graph config", "DataConfig.name 'foo' is not one of")


def test_a_key_given_as_api_key_env_is_refused_and_written_nowhere(tmp_path):
    hydra_dir = tmp_path / "hydra"
    proc = _run(
        "evaluate.py",
        "qa.enabled=true",
        f"qa.answer.llm.api_key_env={FAKE_KEY}",
        f"graphset={tmp_path / 'missing'}",
        f"out_dir={tmp_path / 'out'}",
        tmp_path=tmp_path,
    )
    _one_line_error(proc, "qa.answer.llm.api_key_env", "looks like an API key")
    assert FAKE_KEY not in proc.stdout + proc.stderr and not hydra_dir.exists()
    # the same key arriving through an interpolation (not on the command line) is refused inside the run
    proc = _run(
        "evaluate.py",
        "qa.enabled=true",
        "qa.answer.llm.api_key_env=${oc.env:KEY_IN_A_VARIABLE}",
        f"graphset={tmp_path / 'missing'}",
        f"out_dir={tmp_path / 'out'}",
        tmp_path=tmp_path,
        KEY_IN_A_VARIABLE=FAKE_KEY,
    )
    _one_line_error(proc, "qa.answer.llm.api_key_env", "looks like a key itself")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [str(p) for p in written if FAKE_KEY.encode() in p.read_bytes()] == []


def test_an_api_key_env_naming_no_set_variable_is_warned_about(tmp_path):
    proc = _run(
        "evaluate.py",
        "qa.enabled=true",
        "qa.answer.llm.model=openai/gpt-4o-mini",
        "qa.answer.llm.api_key_env=NO_SUCH_VARIABLE_FOR_KEYS",
        f"graphset={tmp_path / 'missing'}",
        f"out_dir={tmp_path / 'out'}",
        tmp_path=tmp_path,
    )
    assert "warning: qa.answer.llm.api_key_env=NO_SUCH_VARIABLE_FOR_KEYS names no set environment variable" in (
        proc.stderr
    )
    _one_line_error(proc, "no manifest.json")  # then the missing graph set stops it, in one line


def test_results_record_the_graph_sets_own_provenance(small_set, tmp_path):
    """With graphset=, results.json names the file the set was built from, not data.* defaults."""
    proc = _run(
        "evaluate.py",
        f"graphset={small_set}",
        "data.limit=1",  # not what the set holds (2 conversations): the set's own provenance is recorded
        "policies=[beta_bfs]",
        "sweep_tokens=[]",
        "logger=none",
        "progress=false",
        f"out_dir={tmp_path / 'e'}",
        tmp_path=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((tmp_path / "e" / "results.json").read_text())["meta"]
    assert meta["data"]["name"] == "locomo" and meta["data"]["file"] == "locomo/locomo_dev8.json"
    assert meta["data"]["limit"] == 2
    assert (
        meta["data"]["sha256"] == json.loads((small_set / "manifest.json").read_text())["provenance"]["data"]["sha256"]
    )
    assert meta["graphset"]["config_hash"] == meta["config_hash"] and meta["graphset"]["built_at"]
    assert meta["graphset"]["path"] == str(small_set.resolve()) and len(meta["graphset"]["manifest_sha256"]) == 64
