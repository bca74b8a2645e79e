"""What a careless or unlucky run meets: keys given as variable names, shared folders, dead LLM endpoints,
empty or bad sweeps, impossible values. Each is refused before work in one ``error:`` line (exit 2), kept
apart, or stopped with a non-zero exit status (3) when nothing could be measured."""

import json
import os
import sys
from pathlib import Path

import litellm
import pytest
from hydra import compose, initialize_config_dir

from graphmem import Memory
from graphmem.config.cli import is_variable_name, run_or_exit
from graphmem.core.errors import NothingMeasuredError
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.store.lockfile import FileLock
from tests import script_runner
from tests.script_loader import config_folder, load_script, load_study
from tests.small_sets import saved_locomo_set

ROOT = Path(__file__).resolve().parents[1]
HEX_KEY = "deadbeef" + "0123456789abcdef" * 2  # lower-case hex, starts with a letter: a valid lower-case name
EVAL = ["logger=none", "progress=false", "sweep_tokens=[]", "latency=batch", "stats.reference=null"]
MEMORY_LOOP, EVALUATE = load_study("memory_loop", "run"), load_script("evaluate")
FAILING_LLM = ["llm=offline", "llm.mock_response=litellm.RateLimitError", "llm.max_retries=0"]


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    return saved_locomo_set(tmp_path_factory.mktemp("runs"), limit=2)


def _run(script, *args, tmp_path, **env):
    cmd = [sys.executable, f"scripts/{script}", *args]
    if "-m" not in args:
        cmd.append(f"hydra.run.dir={tmp_path / 'hydra'}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **env}
    return script_runner.run(cmd, cwd=ROOT, env=env, timeout=300)


def _error(proc, status=2):
    assert proc.returncode == status, proc.stdout[-1500:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


# ------------------------------------------------------------------------------------- keys as variable names
@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "HUGGINGFACEHUB_API_TOKEN", "AZURE_OPENAI_API_KEY", "AWS_S3_KEY"])
def test_conventional_variable_names_are_accepted(name):
    assert is_variable_name(name)


@pytest.mark.parametrize(
    "value",
    [
        HEX_KEY,
        HEX_KEY.upper(),
        "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP",
        "sk_live_0123456789",
        "openai_api_key",
        "A1B2C3D4E5",
    ],
)
def test_values_shaped_unlike_a_variable_name_are_keys(value):
    assert not is_variable_name(value)


def test_a_hex_key_given_as_api_key_env_is_refused_before_hydra_and_written_nowhere(tmp_path):
    missing = f"graphset={tmp_path / 'missing'}"  # a run that got past the check stops at once, having written
    runs = [
        ("evaluate.py", "qa.enabled=true", f"qa.answer.llm.api_key_env={HEX_KEY}", missing),
        ("studies/memory_loop/run.py", "llm.api_key_env=${oc.env:GM_TEST_HIDDEN}", missing),
    ]
    for script, *args in runs:
        proc = _run(script, *args, f"out_dir={tmp_path / 'out'}", tmp_path=tmp_path, GM_TEST_HIDDEN=HEX_KEY.upper())
        assert "api_key_env" in _error(proc)
        assert HEX_KEY not in (proc.stdout + proc.stderr).lower(), script
        assert not (tmp_path / "hydra").exists() and not (tmp_path / "out").exists(), script
    assert [p for p in tmp_path.rglob("*") if p.is_file() and HEX_KEY.encode() in p.read_bytes().lower()] == []


# ------------------------------------------------------------------------------------- one run per folder
def test_a_second_evaluation_into_a_used_folder_keeps_the_first_apart_and_a_live_one_is_refused(small_set, tmp_path):
    out = tmp_path / "eval"
    first = _run(
        "evaluate.py", f"graphset={small_set}", *EVAL, "policies=[beta_bfs]", f"out_dir={out}", tmp_path=tmp_path
    )
    assert first.returncode == 0, first.stderr[-3000:]
    first_id = json.loads((out / "run.json").read_text())["run_id"]
    second = _run("evaluate.py", f"graphset={small_set}", *EVAL, "policies=[ppr]", f"out_dir={out}", tmp_path=tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert results["meta"]["run_id"] == run_id != first_id
    assert list(results["policies"]) == ["ppr"]
    assert sorted(p.name for p in out.glob("questions_*.jsonl")) == ["questions_ppr.jsonl"]
    aside = out / f"replaced-{first_id}"
    assert list(json.loads((aside / "results.json").read_text())["policies"]) == ["beta_bfs"]
    assert sorted(p.name for p in aside.glob("questions_*.jsonl")) == ["questions_beta_bfs.jsonl"]
    with FileLock(out / ".run.lock", {"run_id": "held-run"}):  # a live run holds the folder
        for script, args in (("evaluate.py", EVAL), ("studies/memory_loop/run.py", ["logger=none", *FAILING_LLM])):
            proc = _run(script, f"graphset={small_set}", *args, f"out_dir={out}", tmp_path=tmp_path)
            assert f"out_dir {out} is in use by run held-run" in _error(proc), script
    assert json.loads((out / "results.json").read_text())["meta"]["run_id"] == run_id  # untouched


# ------------------------------------------------------------------------------------- nothing measured: exit 3
def test_memory_loop_compares_recall_before_and_after_on_the_questions_it_ran(small_set, tmp_path, monkeypatch):
    def unreachable(**kwargs):
        raise litellm.APIConnectionError(message="unreachable", llm_provider="openai", model="gpt-4o-mini")

    monkeypatch.setattr(litellm, "completion", unreachable)
    overrides = [f"graphset={small_set}", f"out_dir={tmp_path / 'out'}", *FAILING_LLM[:1], "llm.max_retries=0"]
    overrides += ["encoder=hashing", "n_questions=12", "max_consecutive_failures=2", "progress=false", "logger=none"]
    cfg = _compose("memory_loop", overrides)
    script = MEMORY_LOOP
    with pytest.raises(SystemExit):
        script.run(cfg)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    gs = script.load_graphset(cfg)
    name = sorted(gs.graphs)[0]
    ran = [i for i, q in enumerate(gs.questions) if q.graph == name][:2]
    budget = script.Budget(**script.OmegaConf.to_container(cfg.budget))
    with Memory.open(tmp_path / "out" / "memory", encoder="hashing", readonly=True) as mem:  # grown from the graph
        expected = script.beta_recall(gs, name, mem.graph, ran, budget)
    # every example failed, so the memory is unchanged: before and after are one measurement on it
    assert summary["beta_bfs_recall"] == {"questions": 2, "before": expected, "after": expected}
    assert summary["run_id"] == json.loads((tmp_path / "out" / "run.json").read_text())["run_id"]


def _compose(config_name, overrides):
    with initialize_config_dir(config_dir=str(config_folder(config_name)), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def test_memory_loop_whose_every_example_failed_exits_nonzero_even_when_few_ran(small_set, tmp_path, capsys):
    out = tmp_path / "loop"
    overrides = [f"graphset={small_set}", *FAILING_LLM, "encoder=hashing", "n_questions=2", "logger=none"]
    overrides += ["max_consecutive_failures=5", "progress=false", f"out_dir={out}"]  # the streak alone never stops it
    with pytest.raises(SystemExit) as stop:
        run_or_exit(MEMORY_LOOP.run, _compose("memory_loop", overrides))
    assert stop.value.code == 3
    assert "error: stopped after 2 of 2 examples: every one of the 2 examples failed" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["examples_failed"] == summary["examples_run"] == 2


def test_qa_mode_whose_every_answer_call_failed_exits_nonzero_without_results(small_set, tmp_path, capsys):
    out = tmp_path / "qa"
    qa = ["qa.enabled=true", "qa.answer.intent=uniform", "qa.answer.llm.model=gpt-4o-mini", "qa.max_questions=3"]
    qa += ["qa.answer.llm.cache_dir=null", "qa.answer.llm.mock_response=litellm.RateLimitError"]
    qa += ["qa.answer.llm.max_retries=0", f"graphset={small_set}", *EVAL, "policies=[beta_bfs]", f"out_dir={out}"]
    with pytest.raises(SystemExit) as stop:
        run_or_exit(EVALUATE.evaluate, _compose("evaluate", qa))
    assert stop.value.code == 3
    assert "error: QA of beta_bfs: all 3 answer calls failed" in capsys.readouterr().err
    assert not (out / "results.json").exists() and (out / "qa_beta_bfs.jsonl").is_file()


# ------------------------------------------------------------------------------------- sweeps checked up front
def test_empty_policies_and_a_bad_job_of_a_sweep_are_refused_before_the_first_job(small_set, tmp_path):
    proc = _run(
        "evaluate.py", f"graphset={small_set}", *EVAL, "policies=[]", f"out_dir={tmp_path / 'e'}", tmp_path=tmp_path
    )
    assert "policies=[] lists no policy" in _error(proc)
    sweep = tmp_path / "sweep"
    common = ["-m", f"graphset={small_set}", *EVAL, "hydra/launcher=local", f"hydra.sweep.dir={sweep}"]
    proc = _run("evaluate.py", *common, "policies=[beta_bfs],[ppr],[]", tmp_path=tmp_path)
    assert _error(proc).startswith("error: job (policies=[]): policies=[] lists no policy")
    proc = _run("evaluate.py", *common, "policies=[beta_bfs],[ppr]", f"out_dir={tmp_path / 'one'}", tmp_path=tmp_path)
    assert "would both write into" in _error(proc)
    assert not sweep.exists() and not (tmp_path / "one").exists()  # no job started, nothing written


# ------------------------------------------------------------------------------------- one line, not a traceback
@pytest.mark.parametrize(
    "script, override, message",
    [
        ("evaluate.py", "out_dir={file}", "out_dir={file} is an existing file, not a folder"),
        ("train.py", "out_dir={file}", "out_dir={file} is an existing file, not a folder"),
        (
            "studies/memory_loop/run.py",
            "out_dir={file}/sub",
            "out_dir={file}/sub lies under {file}, which is an existing file",
        ),
        ("train.py", "variants.router=null", "variants.router must be a mapping of trainer overrides"),
        ("evaluate.py", "budget.max_nodes=abc", "budget.max_nodes=abc: Value 'abc' of type 'str' could not be"),
        ("train.py", "cv.k=three", "cv.k=three: Value 'three' of type 'str' could not be converted to Integer"),
        ("studies/memory_loop/run.py", "n_questions=0", "n_questions must be an integer >= 1, got 0"),
        ("evaluate.py", "budget.no_such_key=1", "Could not override 'budget.no_such_key'"),
    ],
)
def test_impossible_values_are_one_line_errors_before_any_work(small_set, tmp_path, script, override, message):
    file = tmp_path / "a-file"
    file.write_text("not a folder")
    override, message = override.format(file=file), message.format(file=file)
    args = [f"graphset={small_set}", "logger=none", override]
    if "out_dir" not in override:
        args.append(f"out_dir={tmp_path / 'out'}")
    proc = _run(script, *args, tmp_path=tmp_path)
    assert message in _error(proc)
    assert not (tmp_path / "hydra").exists() and not (tmp_path / "out").exists()


def test_a_client_whose_every_call_failed_says_so_and_the_script_exits_3(capsys):
    messages = [{"role": "user", "content": "Which city?"}]
    dead = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="litellm.RateLimitError", max_retries=0))
    assert dead.all_calls_failed() is None  # no call made yet: nothing to say
    assert dead.complete("reflector", messages) is None and dead.complete("reflector", messages) is None
    assert dead.all_calls_failed() == "all 2 calls to gpt-4o-mini failed"
    alive = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="Paris", max_retries=0))
    assert alive.complete("reflector", messages).text == "Paris" and alive.all_calls_failed() is None

    def feedback_run(cfg):
        raise NothingMeasuredError(f"feedback source llm: {dead.all_calls_failed()}")

    with pytest.raises(SystemExit) as stop:
        run_or_exit(feedback_run, {})
    assert stop.value.code == 3
    assert capsys.readouterr().err == "error: feedback source llm: all 2 calls to gpt-4o-mini failed\n"
