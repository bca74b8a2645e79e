"""Hosted models: every structured role sends its pydantic schema as litellm's ``response_format``.

litellm's ``mock_response`` answers offline; a recorder around ``litellm.completion`` captures the
keyword arguments each role sends. The memory loop's roles (retriever, generator, reflector,
curator), with their per-call narrowings, are covered in ``test_memory_loop.py``.
"""

from __future__ import annotations

import litellm
import pytest
import torch

from graphmem.builders.synthetic import make_synthetic_graph
from graphmem.core import Budget, Query
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.extractors import LLMCausalJudge, LLMEntityExtractor
from graphmem.llm.retriever import LLMEntryRetriever
from graphmem.llm.schemas import CausalJudgement, EntrySelection, EventExtraction, JudgeScore, response_schema
from graphmem.qa.judge import Judge, JudgeItem

REAL_COMPLETION = litellm.completion


@pytest.fixture
def sent(monkeypatch):
    """The ``response_format`` of every request, in order (``None`` when absent)."""
    formats: list = []

    def record(**kwargs):
        formats.append(kwargs.get("response_format"))
        return REAL_COMPLETION(**kwargs)

    monkeypatch.setattr(litellm, "completion", record)
    return formats


def client(reply: str, **overrides) -> LLMClient:
    return LLMClient(LLMConfig(model="gpt-4o-mini", mock_response=reply, max_retries=0, **overrides))


def assert_schema(fmt, name: str, schema: dict) -> None:
    assert fmt == {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": False}}


def test_extractor_causal_judge_and_qa_judge_send_their_schemas(sent):
    LLMEntityExtractor(client=client('{"entities": ["Alice"]}')).extract(["Alice moved to Paris."])
    LLMCausalJudge(client=client('{"confidence": 0.5}')).judge([("a", "b")])
    Judge(client('{"score": 1.0, "reason": "same"}')).judge_many([JudgeItem("q", "Q?", "Paris", "Paris")])
    assert len(sent) == 3
    assert_schema(sent[0], "EventExtraction", response_schema(EventExtraction))
    assert_schema(sent[1], "CausalJudgement", response_schema(CausalJudgement))
    assert_schema(sent[2], "JudgeScore", response_schema(JudgeScore))
    # closed and bounded: only the model's own keys, every list and free string has a limit
    extraction = sent[0]["json_schema"]["schema"]
    assert extraction["additionalProperties"] is False and extraction["properties"]["entities"]["maxItems"] == 8
    judge = sent[1]["json_schema"]["schema"]["properties"]["confidence"]
    assert (judge["minimum"], judge["maximum"]) == (0.0, 1.0)


def test_retriever_sends_the_index_ids_and_sections(sent):
    g = make_synthetic_graph(12, avg_degree=2.0, dim=8, seed=0)
    retriever = LLMEntryRetriever(client=client('{"sections": [], "entry_ids": ["n3"]}'))
    retriever.select(g, [Query("q", "?", torch.ones(8))], Budget(max_entries=3))
    [fmt] = sent
    assert fmt["json_schema"]["name"] == "EntrySelection"
    props = fmt["json_schema"]["schema"]["properties"]
    assert props["entry_ids"]["items"]["enum"] == g.node_ids and props["entry_ids"]["maxItems"] == 3
    assert props["sections"]["maxItems"] == 2


def test_response_format_modes(sent):
    for mode, expected in (("none", None), ("json_object", {"type": "json_object"})):
        client('{"confidence": 0.5}', response_format=mode).structured(
            "judge", [{"role": "user", "content": mode}], CausalJudgement
        )
        assert sent[-1] == expected
    # a provider litellm does not list as supporting response_format gets none in "auto"
    c = LLMClient(LLMConfig(model="some-unknown-provider/model-x", mock_response='{"confidence": 0.5}', max_retries=0))
    assert c.response_format(CausalJudgement) is None
    assert client("{}").response_format(EntrySelection, {"type": "object"})["json_schema"]["schema"] == {
        "type": "object"
    }
    with pytest.raises(ValueError, match="response_format"):
        LLMConfig(response_format="xml")


def test_response_format_is_part_of_the_cache_key(tmp_path, sent):
    c = client('{"confidence": 0.5}', cache_dir=str(tmp_path))
    msg = [{"role": "user", "content": "pair"}]
    c.structured("judge", msg, CausalJudgement)
    c.structured("judge", msg, CausalJudgement, {"type": "object", "properties": {"confidence": {"type": "number"}}})
    c.structured("judge", msg, CausalJudgement)
    assert len(sent) == 2  # the third call is the first one again, answered from the cache
