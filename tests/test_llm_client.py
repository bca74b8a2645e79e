"""LLMClient: cache, retries and backoff, concurrency, accounting, key hygiene, structured parsing."""

from __future__ import annotations

import json
import logging
import threading
import time

import litellm
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from graphmem.llm.cache import ResponseCache, cache_key
from graphmem.llm.client import LLMCallError, LLMClient, LLMConfig
from graphmem.llm.schemas import EntrySelection, EventExtraction, Reflection, extract_json, parse_structured

MSG = [{"role": "user", "content": "hello"}]
REAL_COMPLETION = litellm.completion


def mock_config(tmp_path=None, **overrides) -> LLMConfig:
    values = dict(
        model="gpt-4o-mini",
        mock_response="hi there",
        max_retries=3,
        backoff_s=0.01,
        cache_dir=str(tmp_path / "cache") if tmp_path is not None else None,
    )
    values.update(overrides)
    return LLMConfig(**values)


class Recorder:
    """Wraps the real ``litellm.completion``; each scripted outcome is raised or returned as content."""

    def __init__(self, script=()):
        self.real = REAL_COMPLETION
        self.script = list(script)
        self.kwargs: list[dict] = []

    def __call__(self, **kwargs):
        self.kwargs.append(kwargs)
        if self.script:
            outcome = self.script.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            kwargs = {**kwargs, "mock_response": outcome}
        return self.real(**kwargs)

    @property
    def calls(self) -> int:
        return len(self.kwargs)


@pytest.fixture
def recorder(monkeypatch):
    def install(script=()):
        rec = Recorder(script)
        monkeypatch.setattr(litellm, "completion", rec)
        return rec

    return install


def no_sleep(client: LLMClient) -> list[float]:
    sleeps: list[float] = []
    client._sleep = sleeps.append
    return sleeps


# ---------------------------------------------------------------------- cache
def test_rerun_hits_cache_and_repeats_no_call(tmp_path, recorder):
    rec = recorder()
    batch = [[{"role": "user", "content": f"q{i}"}] for i in range(3)]
    first = LLMClient(mock_config(tmp_path))
    out1 = first.complete_many("gen", batch)
    assert rec.calls == 3 and all(c is not None and not c.cached for c in out1)
    assert len(ResponseCache(tmp_path / "cache")) == 3
    second = LLMClient(mock_config(tmp_path))  # a fresh process after a kill: same cache dir
    out2 = second.complete_many("gen", batch)
    assert rec.calls == 3, "a cached call was repeated"
    assert [c.text for c in out2] == [c.text for c in out1] and all(c.cached for c in out2)
    assert [c.prompt_tokens for c in out2] == [c.prompt_tokens for c in out1]
    usage = second.usage_report()["roles"]["gen"]
    assert usage["cache_hits"] == 3 and usage["requests"] == 0 and usage["calls"] == 3


def test_cache_key_covers_params_and_torn_entry_is_a_miss(tmp_path):
    k1 = cache_key("m", MSG, {"temperature": 0.0, "max_tokens": 8})
    assert k1 != cache_key("m", MSG, {"temperature": 0.0, "max_tokens": 9})
    assert k1 != cache_key("m2", MSG, {"temperature": 0.0, "max_tokens": 8})
    cache = ResponseCache(tmp_path)
    cache.put(k1, {"content": "x"})
    assert cache.get(k1)["content"] == "x"
    cache.path(k1).write_text('{"format": 1, "content": ')  # torn write from a crash
    assert cache.get(k1) is None


# ---------------------------------------------------------------------- retries and failures
def test_timeout_and_rate_limit_are_retried_with_exponential_backoff(recorder):
    rec = recorder(
        [
            litellm.Timeout("slow", model="gpt-4o-mini", llm_provider="openai"),
            litellm.RateLimitError("429", llm_provider="openai", model="gpt-4o-mini"),
            litellm.APIConnectionError("reset", llm_provider="openai", model="gpt-4o-mini"),
        ]
    )
    client = LLMClient(mock_config(backoff_s=0.5))
    sleeps = no_sleep(client)
    out = client.complete("gen", MSG)
    assert out is not None and out.text == "hi there"
    assert rec.calls == 4 and sleeps == [0.5, 1.0, 2.0]
    assert client.usage_report()["roles"]["gen"]["retries"] == 3
    assert client.failure_summary()["failures"] == 0


@pytest.mark.parametrize(
    "outcome,kind",
    [
        (lambda: litellm.Timeout("slow", model="m", llm_provider="openai"), "timeout"),
        (lambda: litellm.RateLimitError("429", llm_provider="openai", model="m"), "rate_limit"),
        (lambda: litellm.InternalServerError("500", llm_provider="openai", model="m"), "api_error"),
        (lambda: "", "empty"),
        (lambda: "   ", "empty"),
    ],
)
def test_exhausted_retries_give_a_counted_failure_and_the_run_continues(recorder, outcome, kind):
    rec = recorder([outcome() for _ in range(3)])
    client = LLMClient(mock_config(max_retries=2))
    no_sleep(client)
    assert client.complete("gen", MSG) is None
    assert rec.calls == 3
    summary = client.failure_summary()
    assert summary["failures"] == 1 and summary["by_role_kind"] == {f"gen/{kind}": 1}
    assert client.usage_report()["roles"]["gen"]["failure_kinds"] == {kind: 1}
    assert client.complete("gen", MSG).text == "hi there"  # next call works
    with pytest.raises(LLMCallError):
        recorder([outcome() for _ in range(3)])
        client.complete("gen", MSG, strict=True)


def test_non_retryable_error_fails_at_once(recorder):
    rec = recorder([litellm.AuthenticationError("bad key", llm_provider="openai", model="m")])
    client = LLMClient(mock_config())
    assert client.complete("gen", MSG) is None
    assert rec.calls == 1 and client.failure_summary()["by_role_kind"] == {"gen/auth": 1}


def test_malformed_json_is_retried_then_counted_and_never_cached(tmp_path, recorder):
    rec = recorder(["not json at all", "{broken", '```json\n{"entry_ids": ["a"]}\n```'])
    client = LLMClient(mock_config(tmp_path))
    no_sleep(client)
    parsed = client.structured("retriever", MSG, EntrySelection)
    assert parsed.value is not None and parsed.value.entry_ids == ["a"] and rec.calls == 3
    rec2 = recorder(["{bad"] * 4)
    bad = client.structured("retriever", [{"role": "user", "content": "other"}], EntrySelection)
    assert bad.value is None and rec2.calls == 4
    assert client.failure_summary()["by_role_kind"] == {"retriever/malformed": 1}
    assert len(ResponseCache(tmp_path / "cache")) == 1  # only the valid reply was stored


def test_tokens_and_cost_accounted_per_role(recorder):
    recorder()
    client = LLMClient(mock_config())
    client.complete("a", MSG)
    client.complete("a", [{"role": "user", "content": "x"}])
    client.complete("b", MSG)
    report = client.usage_report()
    assert report["local_substitute"] is True
    a = report["roles"]["a"]
    assert a["calls"] == 2 and a["prompt_tokens"] > 0 and a["completion_tokens"] > 0 and a["cost_usd"] == 0.0
    assert report["total"]["calls"] == 3
    assert report["total"]["prompt_tokens"] == a["prompt_tokens"] + report["roles"]["b"]["prompt_tokens"]


def test_complete_many_respects_concurrency_limit_and_order(monkeypatch):
    lock, state = threading.Lock(), {"now": 0, "peak": 0}
    real = REAL_COMPLETION

    def slow(**kwargs):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return real(**{**kwargs, "mock_response": kwargs["messages"][0]["content"].upper()})

    monkeypatch.setattr(litellm, "completion", slow)
    client = LLMClient(mock_config(max_concurrency=2))
    out = client.complete_many("gen", [[{"role": "user", "content": f"q{i}"}] for i in range(8)])
    assert [c.text for c in out] == [f"Q{i}" for i in range(8)]
    assert state["peak"] == 2


# ---------------------------------------------------------------------- key hygiene
def test_api_key_never_written_to_cache_logs_or_summaries(tmp_path, recorder, monkeypatch, caplog):
    secret = "sk-test-DO-NOT-LEAK-7f3a9c"
    monkeypatch.setenv("GRAPHMEM_TEST_KEY", secret)
    rec = recorder(
        [litellm.APIConnectionError(f"connection refused for key {secret}", llm_provider="openai", model="m")] * 2
    )
    client = LLMClient(mock_config(tmp_path, api_key_env="GRAPHMEM_TEST_KEY", max_retries=1))
    no_sleep(client)
    with caplog.at_level(logging.DEBUG):
        assert client.complete("gen", MSG) is None  # error message carrying the key
        assert client.complete("gen", [{"role": "user", "content": "ok"}]) is not None
        client.structured("gen", [{"role": "user", "content": "json"}], EntrySelection)
    assert all(kw.get("api_key") == secret for kw in rec.kwargs)  # it does reach litellm
    files = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert files
    for p in files:
        assert secret not in p.read_text(errors="replace")
    assert secret not in json.dumps(client.failure_summary()) and "***" in json.dumps(client.failure_summary())
    assert secret not in json.dumps(client.usage_report())
    assert secret not in caplog.text


# ---------------------------------------------------------------------- structured parsing
def test_a_fence_mark_inside_a_json_string_does_not_cut_the_reply():
    """A string holding a fence mark ends the fence early: the cut piece, or an array inside it, is not the reply."""
    reply = {"facts": [], "temporal": {"```": None}, "transitions": [None]}
    assert extract_json("```json\n" + json.dumps(reply)) == reply
    assert extract_json('```\n{"x": "[1]``` y"}```') == {"x": "[1]``` y"}
    assert extract_json('Answer [1]: ```json\nHere: {"a": 2}```') == {"a": 2}  # a fence still goes first
    parsed = parse_structured("```json\n" + json.dumps(reply), Reflection)
    assert parsed.value.transitions == [] and parsed.discarded == 1  # the wrong item is counted, not lost


def test_extract_json_tolerates_fences_and_prose():
    assert extract_json('Sure! Here you go:\n```json\n{"a": 1}\n```\nHope it helps') == {"a": 1}
    assert extract_json('The answer [see below] is {"a": [1, 2]} ok') == {"a": [1, 2]}
    assert extract_json("[1, 2]") == [1, 2]
    with pytest.raises(ValueError):
        extract_json("no json {here")


def test_invalid_list_items_are_discarded_individually():
    reply = json.dumps(
        {
            "critique": "c",
            "transitions": [
                {"source": "a", "target": "b", "label": "helpful", "confidence": 0.9},
                {"source": "a", "target": "b", "label": "great", "confidence": 0.9},
                {"source": "b", "target": "c", "label": "harmful", "confidence": 1.5},
                {"source": "b", "label": "neutral", "confidence": 0.1},
                "not an object",
            ],
        }
    )
    parsed = parse_structured(reply, Reflection)
    assert parsed.value is not None and parsed.discarded == 4
    assert [(t.source, t.target) for t in parsed.value.transitions] == [("a", "b")]
    wrong = parse_structured('{"entities": "Alice", "facts": [1, "x"], "summary": "s"}', EventExtraction)
    assert wrong.value.entities == [] and wrong.value.facts == ["x"] and wrong.discarded == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "entities",
        "topics",
        "relationships",
        "facts",
        "temporal",
        "summary",
        "transitions",
        "critique",
        "entry_ids",
        "sections",
        "x",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200))
def test_fuzz_arbitrary_text_never_crashes(text):
    for schema in (EventExtraction, Reflection, EntrySelection):
        parsed = parse_structured(text, schema)
        assert parsed.value is None or isinstance(parsed.value, BaseModel)
        assert parsed.discarded >= 0


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(field_names, json_values, max_size=6), st.sampled_from(["", "```json\n", "Answer: "]))
def test_fuzz_wrong_types_are_discarded_not_raised(obj, prefix):
    for schema in (EventExtraction, Reflection, EntrySelection):
        parsed = parse_structured(prefix + json.dumps(obj), schema)
        if parsed.value is not None:
            for name, f in schema.model_fields.items():
                value = getattr(parsed.value, name)
                if isinstance(value, list) and isinstance(obj.get(name), list):
                    assert len(value) + parsed.discarded >= len(obj[name])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=8))
def test_fuzz_client_structured_counts_discards(monkeypatch, ids):
    reply = json.dumps({"sections": [], "entry_ids": ids})
    monkeypatch.setattr(litellm, "completion", lambda **kw: REAL_COMPLETION(**{**kw, "mock_response": reply}))
    client = LLMClient(mock_config(max_retries=0))
    parsed = client.structured("r", MSG, EntrySelection)
    n_valid = sum(isinstance(i, str) for i in ids)
    assert len(parsed.value.entry_ids) == n_valid
    assert client.usage_report()["roles"]["r"]["discarded_items"] == len(ids) - n_valid
