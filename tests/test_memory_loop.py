"""Retrieve-Generate-Reflect-Curate: validation of traces, feedback and edits; no gold leakage."""

from __future__ import annotations

import json

import litellm
import torch

from graphmem.graph import MemoryGraph
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.retriever import LLMEntryRetriever
from graphmem.memory_loop import MemoryLoop
from graphmem.policies.base import Budget, Query
from graphmem.policies.beta_bfs import BetaBFS

REAL_COMPLETION = litellm.completion
GOLD = "GOLD-MARKER-5521"

REPLIES = {
    "You select entry points": {"sections": ["session 1"], "entry_ids": ["n0", "ghost"]},
    "You answer a question": {"answer": "Paris", "trace": ["n0", "n9", "n2", "n3", "n3", "n0"]},
    "You review an answer": {
        "critique": "Check the move date.",
        "transitions": [
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 0.8},
            {"source": "n2", "target": "n3", "label": "harmful", "confidence": 0.5},
            {"source": "n3", "target": "n0", "label": "helpful", "confidence": 1.0},
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 0.9},
            {"source": "n1", "target": "n0", "label": "helpful", "confidence": 0.9},
            {"source": "n2", "target": "n3", "label": "great", "confidence": 0.5},
            {"source": "n0", "target": "n2", "label": "helpful", "confidence": 1.5},
        ],
    },
    "You maintain a memory graph": {
        "operations": [
            {"op": "add_node", "key": "date check", "text": "Check dates of moves."},
            {"op": "add_edge", "source": "n0", "target": "new:0", "relation": "semantic"},
            {"op": "add_edge", "source": "n0", "target": "n2", "relation": "temporal"},
            {"op": "add_edge", "source": "n1", "target": "n0", "relation": "semantic"},
            {"op": "revise_node", "node_id": "n2", "text": "Alice opened a bakery in Paris."},
            {"op": "remove_edge", "source": "n2", "target": "n3"},
            {"op": "remove_edge", "source": "n0", "target": "n3"},
            {"op": "explode"},
        ]
    },
}


def toy_graph() -> MemoryGraph:
    g = MemoryGraph.empty(4)
    g.add_nodes(
        [f"n{i}" for i in range(4)],
        ["Alice moved to Paris.", "Bob has a dog.", "Alice started a bakery.", "The bakery sells bread."],
        torch.eye(4),
        metadata=[{"session": 1}, {"session": 1}, {"session": 2}, {"session": 2}],
    )
    g.add_edge("n0", "n2", "temporal")
    g.add_edge("n2", "n3", "semantic")
    return g


def test_loop_validates_feedback_and_edits_and_keeps_gold_out_of_prediction(monkeypatch):
    prompts: list[tuple[str, str]] = []

    def fake(**kwargs):
        system, user = kwargs["messages"][0]["content"], kwargs["messages"][1]["content"]
        role = next(k for k in REPLIES if system.startswith(k))
        prompts.append((role, system + user))
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="unused", max_retries=0, backoff_s=0.0))
    loop = MemoryLoop(
        client, BetaBFS(entry_selector=LLMEntryRetriever(client=client)), embed=lambda texts: torch.ones(len(texts), 4)
    )
    g = toy_graph()
    calls_at_feedback = []

    def feedback(prediction: str) -> str:
        calls_at_feedback.append([r for r, _ in prompts])
        return f"prediction {prediction!r}; gold answer {GOLD}"

    rec = loop.step(g, Query("q0", "Where did Alice move?", torch.ones(4)), feedback)

    # no gold leakage: retrieval and generation finished before feedback was requested
    assert calls_at_feedback == [["You select entry points", "You answer a question"]]
    assert all(
        GOLD not in text for role, text in prompts if role in ("You select entry points", "You answer a question")
    )
    assert rec.prediction == "Paris" and rec.loaded == ["n0", "n2", "n3"]
    assert rec.trace == ["n0", "n2", "n3", "n3", "n0"]

    # reflect: eq. 21 on valid transitions only; no edge created for n3 -> n0
    assert rec.applied_transitions == [
        ("n0", "n2", "helpful", 0.8),
        ("n2", "n3", "harmful", 0.5),
        ("n3", "n0", "helpful", 1.0),
    ]
    assert rec.discarded["trace_unloaded_ids"] == 1
    assert rec.discarded["duplicate_pairs"] == 2  # (n3, n3) in the trace, repeated (n0, n2) label
    assert rec.discarded["feedback_outside_trace"] == 1
    assert rec.discarded["invalid_feedback_items"] == 2  # bad label, confidence 1.5
    assert not g.edges_between(g.index_of("n3"), g.index_of("n0")).numel()
    e02 = g.edges_between(g.index_of("n0"), g.index_of("n2"))
    assert torch.allclose(g.S[e02], torch.tensor([0.8])) and g.F[e02].tolist() == [0.0]

    # curate: add node + edge (S = F = 0), revise, remove; invalid ops counted
    assert rec.applied_ops == [
        "add_node lesson-0",
        "add_edge n0->lesson-0 semantic",
        "revise_node n2",
        "remove_edge n2->n3",
    ]
    assert rec.discarded["invalid_ops"] == 3 + 1  # existing edge, unloaded n1, missing edge; unknown op
    new = g.edges_between(g.index_of("n0"), g.index_of("lesson-0"))
    assert g.S[new].tolist() == [0.0] and g.F[new].tolist() == [0.0]
    assert g.texts[g.index_of("n2")] == "Alice opened a bakery in Paris."
    assert not g.edges_between(g.index_of("n2"), g.index_of("n3")).numel()
    g.validate()

    # token accounting: retrieved memory vs index vs the rest
    assert rec.tokens["memory"] == rec.retrieval.loaded_tokens > 0 and rec.tokens["index"] > 0
    assert rec.tokens["llm_billed"] > 0 and rec.tokens["rest"] >= 0


def test_failed_generation_still_continues(monkeypatch):
    monkeypatch.setattr(litellm, "completion", lambda **kw: REAL_COMPLETION(**{**kw, "mock_response": "no json"}))
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=0, backoff_s=0.0))
    loop = MemoryLoop(
        client,
        BetaBFS(entry_selector=LLMEntryRetriever(client=client)),
        embed=lambda t: torch.ones(len(t), 4),
        budget=Budget(),
    )
    g = toy_graph()
    rec = loop.step(g, Query("q", "?", torch.ones(4)), lambda p: "wrong")
    assert rec.prediction is None and rec.loaded == [] and rec.applied_ops == [] and g.num_edges == 2
    assert client.failure_summary()["failures"] == 4
