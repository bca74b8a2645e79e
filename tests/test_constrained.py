"""Constrained decoding: a reply always parses into the call's schema, whatever the weights."""

from __future__ import annotations

import json

import pytest
import torch

from graphmem.llm import local
from graphmem.llm.call_schemas import curation_schema, entry_selection_schema, generation_schema, reflection_schema
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.constrained import SchemaDecoder
from graphmem.llm.local import LocalLM, schema_of
from graphmem.llm.schemas import (
    CausalJudgement,
    Curation,
    EntrySelection,
    EventExtraction,
    Generation,
    JudgeScore,
    Reflection,
    parse_structured,
    response_schema,
)
from rl.writer.grpo import load_writer

LOADED = ["D1:3", "D1:5", "D2:1"]
PAIRS = [("D1:3", "D1:5"), ("D1:5", "D2:1")]
RELATIONS = ["temporal", "semantic"]


def curation_is_local(value: Curation) -> bool:
    """Every node an operation names is loaded (edges may also name ``new:k``), only lesson ``L1`` or
    ``new:k`` is revised, every relation is the graph's."""
    new = {f"new:{k}" for k in range(2)}
    ends = set(LOADED) | {"L1"} | new
    for op in value.operations:
        if op.op == "revise_node" and op.node_id not in {"L1"} | new:
            return False
        if op.op in ("add_edge", "remove_edge") and not {op.source, op.target} <= (
            ends if op.op == "add_edge" else ends - new
        ):
            return False
        if op.op == "add_edge" and op.relation not in RELATIONS:
            return False
    return True


def call_cases():
    """``(pydantic model, JSON Schema sent, check of the narrowing)`` for every structured role."""
    return [
        (
            EntrySelection,
            entry_selection_schema(["session 1", "session 2"], LOADED, 2, 2),
            lambda v: set(v.entry_ids) <= set(LOADED) and len(v.entry_ids) <= 2 and len(v.sections) <= 2,
        ),
        (Generation, generation_schema(LOADED), lambda v: set(v.trace) <= set(LOADED)),
        (
            Reflection,
            reflection_schema(PAIRS),
            lambda v: [(t.source, t.target) for t in v.transitions] == PAIRS[: len(v.transitions)],
        ),
        (Curation, curation_schema(LOADED + ["L1"], RELATIONS, ["L1"]), curation_is_local),
        (EventExtraction, response_schema(EventExtraction), lambda v: True),
        (CausalJudgement, response_schema(CausalJudgement), lambda v: 0 <= v.confidence <= 1),
        (JudgeScore, response_schema(JudgeScore), lambda v: 0 <= v.score <= 1),
    ]


class Biased(torch.nn.Module):
    """A model whose logits are another model's plus a fixed bias (pushes the decoder toward one token)."""

    def __init__(self, model, bias: torch.Tensor):
        super().__init__()
        self.inner, self.bias, self.config = model, bias, model.config

    def get_output_embeddings(self):
        return self.inner.get_output_embeddings()

    def forward(self, input_ids=None, cache=None, use_cache=True, **kw):
        out = self.inner(input_ids=input_ids, cache=cache, use_cache=use_cache)
        out.logits = out.logits + self.bias
        return out


def tiny_lm(seed: int, bias_token: str | None = None) -> LocalLM:
    """The writer's random tiny Llama (byte-level tokenizer), optionally pushed toward one token."""
    model, tok = load_writer("tiny", seed=seed)
    if bias_token is not None:
        bias = torch.zeros(len(tok))
        bias[tok.convert_tokens_to_ids(bias_token)] = 50.0  # dominates every random logit
        model = Biased(model, bias)
    return LocalLM(tok, model)


@pytest.mark.parametrize("seed,bias", [(0, None), (1, None), (2, None), (3, "\\"), (4, ","), (5, "["), (6, "1")])
def test_reply_always_parses_into_the_schema_whatever_the_weights(seed, bias):
    lm = tiny_lm(seed, bias)
    for model_cls, spec, narrowed in call_cases():
        for budget in (6, 40):
            text, _, n_new = lm.generate([{"role": "user", "content": f"reply {seed}"}], budget, spec)
            parsed = parse_structured(text, model_cls)
            assert parsed.value is not None and parsed.discarded == 0, (model_cls.__name__, budget, text, parsed.error)
            assert narrowed(parsed.value), (model_cls.__name__, text)
            assert n_new <= budget + 64
            json.loads(text)  # the whole reply is one JSON document, nothing around it


def test_free_decoding_is_not_constrained_and_stops_at_the_budget():
    lm = tiny_lm(0)
    text, _, n_new = lm.generate([{"role": "user", "content": "hi"}], 12)
    assert n_new == 12 and parse_structured(text, Reflection).value is None


def test_prefix_cache_gives_the_same_reply_as_a_fresh_decode():
    prompts = [[{"role": "user", "content": "shared prefix " * 20 + tail}] for tail in ("one", "two", "one")]
    spec = generation_schema(LOADED)
    reused = tiny_lm(0)
    replies = [reused.generate(p, 30, spec)[0] for p in prompts]
    fresh = [tiny_lm(0).generate(p, 30, spec)[0] for p in prompts]
    assert replies == fresh and replies[0] == replies[2]
    assert len(reused._caches) == 1  # every prompt shares the prefix, so one cache was taken and extended each time


def test_decoder_refuses_a_schema_it_cannot_compile():
    lm = tiny_lm(0)
    decoder = SchemaDecoder(lm.tokenizer, lm.model)
    with pytest.raises(ValueError, match="not supported"):
        decoder.matcher({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})


def test_response_format_kinds_map_to_schemas():
    spec = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert schema_of({"type": "json_schema", "json_schema": {"name": "A", "schema": spec}}) == spec
    assert schema_of({"type": "json_object"}) == {"type": "object"}
    assert schema_of(None) is None and schema_of({"type": "text"}) is None


def test_local_provider_decodes_under_the_response_format_sent_through_litellm(monkeypatch, tmp_path):
    monkeypatch.setattr(local, "_loaded", tiny_lm(7))
    client = LLMClient(LLMConfig(model=local.LOCAL_MODEL, max_retries=0, max_tokens=30))
    spec = reflection_schema(PAIRS)
    parsed = client.structured("reflector", [{"role": "user", "content": "label"}], Reflection, spec)
    assert parsed.value is not None
    usage = client.usage_report()["roles"]["reflector"]
    assert usage["invalid_replies"] == 0 and usage["failures"] == 0


def test_prompt_longer_than_the_context_is_a_counted_failure(monkeypatch):
    lm = tiny_lm(0)
    lm.model.config.max_position_embeddings = 64
    monkeypatch.setattr(local, "_loaded", lm)
    client = LLMClient(LLMConfig(model=local.LOCAL_MODEL, max_retries=0, max_tokens=30))
    parsed = client.structured("retriever", [{"role": "user", "content": "x" * 200}], EntrySelection)
    assert parsed.value is None
    [failure] = client.failure_summary()["recent"]
    assert "exceeds the local model's context of 64 tokens" in failure["message"]
