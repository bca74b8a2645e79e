"""graphmem.qa.run (mocked litellm replies) and the QA mode of scripts/evaluate.py."""

import json
import sys
from pathlib import Path

import litellm
import pytest
from hydra import compose, initialize_config_dir

from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.qa.answer import Answerer, IntentPredictor, clean_answer, context_records
from graphmem.qa.judge import Judge, SameModelError
from graphmem.qa.run import QASettings, run_qa, select_questions, summary_lines, write_rows
from graphmem.qa.scoring import conventions_for
from graphmem.tracking import read_runs
from tests.test_qa_leak import graphset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_script  # noqa: E402


def compose_cfg(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose(config_name="evaluate", overrides=overrides)


def client(model, reply, **kw):
    return LLMClient(LLMConfig(model=model, mock_response=reply, max_retries=0, **kw))


def run(gs, answer_reply, judge_reply='{"score": 0.8, "reason": "ok"}', judge=True):
    loaded = [list(gs.graphs[q.graph].node_ids[:3]) for q in gs.questions]
    j = Judge(client("openai/judge-model", judge_reply)) if judge else None
    return run_qa(
        gs.questions,
        gs.queries(),
        loaded,
        gs.graphs,
        Answerer(client("openai/answer-model", answer_reply)),
        j,
        IntentPredictor(None),
        conventions_for("locomo"),
        policy="p",
        dataset="locomo",
    )


def test_rows_and_summary_per_category(tmp_path):
    gs = graphset(["Paris"] * 10, [1, 2, 3, 4, 5, 4, 3, 2, 1, 5])
    result = run(gs, "Answer: Paris")
    s = result.summary
    assert s["overall"]["n"] == 8 and s["overall"]["f1"] == 1.0 and s["overall"]["judge"] == pytest.approx(0.8)
    assert s["unanswerable"]["n"] == 2 and s["unanswerable"]["f1"] == 0.0 and s["unanswerable"]["judged"] == 0
    assert s["all"]["n"] == 10 and s["all"]["f1"] == pytest.approx(0.8)
    assert {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"} <= set(s)
    row = result.rows[0]
    assert row["answer"]["text"] == "Paris" and row["tokens"] > 0 and row["latency_s"] >= 0
    assert row["judge_detail"]["score"] == 0.8 and row["score"]["rule"] == "multi_answer_f1"
    assert result.rows[4]["judge"] is None and result.rows[4]["judge_detail"] is None  # abstention rule: not judged
    path = write_rows(result, tmp_path / "qa.jsonl")
    assert (
        len(path.read_text().splitlines()) == 10 and json.loads(path.read_text().splitlines()[0])["qid"] == "conv-0#0"
    )
    assert any("overall" in line and "F1=1.000" in line for line in summary_lines(result))


def test_abstentions_and_judge_failures_are_counted():
    gs = graphset(["Paris"] * 10, [4, 4, 4, 4, 5, 5, 4, 4, 4, 4])
    result = run(gs, "No information available.", judge_reply="I think it is fine")
    s = result.summary
    assert s["overall"]["f1"] == 0.0 and s["overall"]["abstention_rate"] == 1.0
    assert s["unanswerable"]["f1"] == 1.0
    assert s["overall"]["judge"] is None and s["overall"]["judge_failures"] == 8


def test_failed_answer_calls_are_reported_as_failed_and_left_out_of_the_means(monkeypatch):
    """A failed call is counted as failed, not averaged in as F1 = EM = 0."""
    gs = graphset(["Paris"] * 10, [4] * 10)
    real = litellm.completion

    def flaky(*args, **kwargs):
        if kwargs["model"] == "openai/answer-model" and "item 3?" in kwargs["messages"][1]["content"]:
            raise RuntimeError("boom")
        return real(*args, **kwargs)

    monkeypatch.setattr(litellm, "completion", flaky)
    result = run(gs, "Paris")
    bad = result.rows[3]
    assert bad["answer"]["text"] is None and bad["answer_failed"] is True and bad["judge_detail"] is None
    assert bad["f1"] is None and bad["em"] is None and bad["judge"] is None
    overall = result.summary["overall"]
    assert overall["n"] == 10 and overall["answered"] == 9 and overall["answer_failures"] == 1
    assert overall["f1"] == 1.0 and overall["em"] == 1.0 and overall["judge"] == pytest.approx(0.8)
    lines = summary_lines(result)
    assert any("over answered questions" in line for line in lines)
    assert any("overall" in line and "answered=9" in line and "failed=1" in line for line in lines)
    table = load_script("evaluate")._qa_report({"p": result})
    assert "means over answered questions" in table and "| answered | failed |" in table
    assert "| p | overall | 10 | 9 | 1 | 1.000 | 1.000 | 0.800 |" in table


def test_settings_refuse_self_judging_unless_forced():
    base = {"answer": {"llm": {"model": "local/smollm2-135m"}}, "judge": {"llm": {"model": "local/smollm2-135m"}}}
    with pytest.raises(SameModelError):
        QASettings.from_mapping(base)
    forced = QASettings.from_mapping({**base, "judge": {**base["judge"], "allow_same_model": True}})
    assert forced.self_judged
    assert QASettings.from_mapping({"answer": base["answer"], "judge": {"llm": {"model": None}}}).judge_llm is None
    with pytest.raises(ValueError, match="temperature 0"):
        QASettings.from_mapping({**base, "judge": {"llm": {"model": "gpt-4o-mini", "temperature": 0.5}}})


def test_helpers():
    assert clean_answer('\n  Answer: "7 May 2023"\nBecause ...') == "7 May 2023"
    gs = graphset(["x"] * 10, [4] * 10)
    g = gs.graphs["conv-0"]
    g.metadata[0]["date_time"] = "1 May 2023"
    assert context_records(g, [g.node_ids[0]])[0][1].startswith("[1 May 2023] ")
    picked = select_questions(gs.questions, 4, seed=0)
    assert len(picked) == 4 and picked == select_questions(gs.questions, 4, seed=0)
    assert [q.qid for q in picked] == sorted((q.qid for q in picked), key=[x.qid for x in gs.questions].index)


def test_evaluate_script_qa_mode(tmp_path):
    script = load_script("evaluate")
    gs_dir = graphset(["a"] * 10, [1, 2, 3, 4, 5, 4, 3, 2, 1, 5]).save(tmp_path / "set")
    out = tmp_path / "out"
    cfg = compose_cfg(
        [
            f"graphset={gs_dir}",
            f"out_dir={out}",
            "policy=beta_bfs",
            "sweep_tokens=[]",
            "logger.mode=disabled",
            "progress=false",
            "qa.enabled=true",
            "qa.max_questions=6",
            "qa.answer.intent=uniform",
            "qa.answer.llm.model=gpt-4o-mini",
            "qa.answer.llm.cache_dir=null",
            "qa.answer.llm.mock_response=a",
            "qa.judge.llm.model=openai/judge-model",
            "qa.judge.llm.cache_dir=null",
            "qa.judge.llm.mock_response='score: 1'",
        ]
    )
    payload = script.evaluate(cfg)
    qa = payload["qa"]["beta_bfs"]
    assert qa["summary"]["all"]["n"] == 6 and qa["info"]["judge_model"] == "openai/judge-model"
    assert len((out / "qa_beta_bfs.jsonl").read_text().splitlines()) == 6
    assert "Answer quality (QA)" in (out / "results.md").read_text()
    (run,) = read_runs(out / "tracking")
    assert len(run.tables["qa/beta_bfs"]["rows"]) == 6


def test_evaluate_script_refuses_self_judging_before_loading(tmp_path):
    script = load_script("evaluate")
    cfg = compose_cfg(
        [
            f"graphset={tmp_path / 'missing'}",
            f"out_dir={tmp_path}",
            "qa.enabled=true",
            "qa.judge.llm.model=local/smollm2-135m",
        ]
    )
    with pytest.raises(script.ConfigError, match="allow_same_model"):
        script.evaluate(cfg)
