"""Training from the LLM judge's reward while its calls fail: every call failed, or more than
``trainer.objective.max_failed_share``, stops the run with exit status 3 and one ``error:`` line, before any
``best.pt`` or ``results.json``; a share within the limit trains and reports its counts in results.json."""

import json
from pathlib import Path

import litellm
import pytest
from hydra import compose, initialize_config_dir

from graphmem.builders import DataConfig, GraphConfig, build_graphset
from graphmem.config.cli import run_or_exit
from graphmem.index.embed import HashingEncoder
from rl.walk.trainer import TrainConfig
from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parents[1]
TRAIN = load_script("train")
SCORE = json.dumps({"score": 0.5})


@pytest.fixture(scope="module")
def hotpot(tmp_path_factory):
    """Nine HotpotQA questions, one graph each: three folds of three test graphs."""
    gs = build_graphset(
        DataConfig(name="hotpotqa", limit=9), GraphConfig(encoder="hashing"), encoder=HashingEncoder(), progress=False
    )
    return gs.save(tmp_path_factory.mktemp("sets") / "hotpot")


def judge_run(graphset: Path, out: Path, *judge: str) -> list[str]:
    """Overrides of a one-epoch run from the judge reward (gpt-4o-mini, no retries), the judge's own on top."""
    base = [f"graphset={graphset}", "data=hotpotqa", "cv.k=3", "baselines=[]", "stats.reference=null"]
    base += ["trainer.objective.reward=judge", "trainer.objective.imitation_epochs=0", "trainer.run.device=cpu"]
    base += ["+trainer.objective.judge.model=gpt-4o-mini", "+trainer.objective.judge.max_retries=0"]
    return [*base, "+trainer.objective.judge.cache_dir=null", "progress=false", f"out_dir={out}", *judge]


def written(out: Path, pattern: str) -> list[Path]:
    return sorted(out.rglob(pattern)) if out.exists() else []


def every_other_call_fails(monkeypatch) -> list[bool]:
    """Judge replies alternating a score and an unparseable reply (the first one scores)."""
    real, calls = litellm.completion, []

    def reply(**kwargs):
        calls.append(len(calls) % 2 == 1)
        return real(**{**kwargs, "mock_response": "garbled" if calls[-1] else SCORE})

    monkeypatch.setattr(litellm, "completion", reply)
    return calls


def compose_train(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="train", overrides=[*overrides, "logger=none"])


def error_line(cfg, capsys) -> str:
    """The one ``error:`` line of a run that ``run_or_exit`` stopped with exit status 3."""
    with pytest.raises(SystemExit) as stop:
        run_or_exit(TRAIN.run, cfg)
    assert stop.value.code == 3
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    return errors[0]


@pytest.mark.parametrize("reply", ["litellm.RateLimitError", "no verdict at all"])
def test_a_judge_whose_every_call_fails_stops_the_run_before_best_pt(hotpot, tmp_path, reply, capsys):
    out = tmp_path / "out"
    mock = f"+trainer.objective.judge.mock_response='{reply}'"
    err = error_line(compose_train(judge_run(hotpot, out, mock, "trainer.objective.rl_epochs=2")), capsys)
    kind = "rate_limit" if "RateLimit" in reply else "malformed"
    assert err.startswith("error: fold 0 router: reward judge (gpt-4o-mini): all ")
    assert f"calls failed in reinforce epoch 0 (failures by kind: {kind}: " in err
    assert err.endswith("nothing promoted to best.pt; no results.json written")
    assert written(out, "best.pt") == [] and written(out, "results.json") == []


SEQUENTIAL = ["+trainer.objective.judge.max_concurrency=1", f"+trainer.objective.judge.mock_response='{SCORE}'"]


def test_a_failed_share_above_the_limit_stops_the_run(hotpot, tmp_path, monkeypatch, capsys):
    failed = every_other_call_fails(monkeypatch)
    out = tmp_path / "out"
    cfg = compose_train(judge_run(hotpot, out, *SEQUENTIAL, "trainer.objective.max_failed_share=0.25"))
    err = error_line(cfg, capsys)
    assert any(failed) and not all(failed)
    assert f"{sum(failed)} of {len(failed)} calls (" in err
    assert "more than trainer.objective.max_failed_share=0.25" in err
    assert f"(failures by kind: malformed: {sum(failed)}); nothing promoted to best.pt" in err
    assert written(out, "best.pt") == [] and written(out, "results.json") == []


def test_a_failed_share_within_the_limit_trains_and_reports_its_counts(hotpot, tmp_path, monkeypatch):
    failed = every_other_call_fails(monkeypatch)
    out = tmp_path / "out"
    cfg = compose_train(judge_run(hotpot, out, *SEQUENTIAL, "trainer.objective.rl_epochs=2"))
    run_or_exit(TRAIN.run, cfg)
    (record,) = [r for r in json.loads((out / "results.json").read_text())["records"] if r["policy"] == "router"]
    counts = record["reward_calls"]
    assert counts["calls"] == len(failed) >= 4 and counts["failures"] == sum(failed) == len(failed) // 2
    assert counts["model"] == "gpt-4o-mini" and counts["max_failed_share"] == 0.5
    assert counts["failure_kinds"] == {"malformed": sum(failed)}
    assert sum(h["judge_calls"] for h in record["history"]) == counts["calls"]
    assert sum(h["judge_failures"] for h in record["history"]) == counts["failures"]
    assert (out / "fold0" / "router" / "best.pt").is_file()


@pytest.mark.parametrize("share", [-0.1, 1.5, True])
def test_max_failed_share_outside_0_1_is_refused_naming_the_key(share):
    with pytest.raises(ValueError, match=r"ObjectiveConfig.max_failed_share must (be >= 0|lie in \[0, 1\])"):
        TrainConfig.from_mapping({"objective": {"reward": "judge", "imitation_epochs": 0, "max_failed_share": share}})
