"""An endpoint that echoes the API key in its replies: the key reaches no file the run writes (QA rows, the
LLM caches, results, tracking tables) and no log line; the replies are stored with the key masked."""

import json
import logging
from pathlib import Path

import litellm
from hydra import compose, initialize_config_dir

from graphmem.llm.client import LLMClient, LLMConfig
from tests.script_loader import load_script
from tests.test_qa_leak import graphset

ROOT = Path(__file__).resolve().parents[1]
KEY_ENV, KEY = "GRAPHMEM_ECHO_API_KEY", "sk-echo-0123456789abcdefECHOED"


def echoing(monkeypatch):
    """``litellm.completion`` answering as an endpoint that repeats the Authorization header it was sent."""
    real, sent = litellm.completion, []

    def reply(**kwargs):
        sent.append(kwargs.get("api_key"))
        header = f"Authorization: Bearer {kwargs.get('api_key')}"
        text = json.dumps({"score": 1, "reason": header}) if "judge" in kwargs["model"] else f"Paris ({header})"
        return real(**{**kwargs, "mock_response": text})

    monkeypatch.setattr(litellm, "completion", reply)
    return sent


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_reply_echoing_the_key_is_cached_and_returned_redacted(monkeypatch, tmp_path):
    monkeypatch.setenv(KEY_ENV, KEY)
    sent = echoing(monkeypatch)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", api_key_env=KEY_ENV, cache_dir=str(tmp_path), max_retries=0))
    messages = [{"role": "user", "content": "Which city?"}]
    first, again = client.complete("answer", messages), client.complete("answer", messages)
    assert sent == [KEY]  # the key went to the endpoint once; the second reply is the cache's
    assert first.text == again.text == "Paris (Authorization: Bearer ***)" and again.cached
    assert files_holding(tmp_path, KEY) == [] and len(client.cache) == 1


def test_qa_mode_writes_no_echoed_key_anywhere(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv(KEY_ENV, KEY)
    sent = echoing(monkeypatch)
    caplog.set_level(logging.INFO)
    gs_dir = graphset(["a"] * 10, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]).save(tmp_path / "set")
    out, caches = tmp_path / "out", tmp_path / "caches"
    llm = [f"api_key_env={KEY_ENV}", "max_retries=0"]
    overrides = [f"graphset={gs_dir}", f"out_dir={out}", "policy=beta_bfs", "sweep_tokens=[]", "progress=false"]
    overrides += ["logger.mode=disabled", "qa.enabled=true", "qa.max_questions=4", "qa.answer.intent=uniform"]
    overrides += ["qa.answer.llm.model=gpt-4o-mini", f"qa.answer.llm.cache_dir={caches / 'answer'}"]
    overrides += ["qa.judge.llm.model=openai/judge-model", f"qa.judge.llm.cache_dir={caches / 'judge'}"]
    overrides += [f"qa.{part}.llm.{o}" for part in ("answer", "judge") for o in llm]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(config_name="evaluate", overrides=overrides)
    load_script("evaluate").evaluate(cfg)
    assert sent and set(sent) == {KEY}  # every call carried the key, so every reply echoed it
    assert (out / "tracking").is_dir() and any((caches / "answer").rglob("*.json"))
    assert files_holding(out, KEY) == [] and files_holding(caches, KEY) == []
    assert KEY not in caplog.text
    rows = [json.loads(line) for line in (out / "qa_beta_bfs.jsonl").read_text().splitlines()]
    assert rows and all(r["answer"]["raw"].endswith("Bearer ***)") for r in rows)
    assert all(r["judge_detail"]["reason"] == "Authorization: Bearer ***" for r in rows if r["judge_detail"])
