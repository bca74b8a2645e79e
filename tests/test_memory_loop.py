"""Retrieve-Generate-Reflect-Curate: validation of traces, feedback and edits; no gold leakage."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import litellm
import pytest
import torch
from hydra import compose, initialize_config_dir

from graphmem.config.schemas import config_dir_of
from graphmem.core import Budget, Query
from graphmem.core.graph import MemoryGraph
from graphmem.llm.client import LLMClient, LLMConfig
from graphmem.llm.retriever import LLMEntryRetriever
from graphmem.policies.beta_bfs import BetaBFS
from graphmem.tracking import read_runs

sys.path.insert(0, str(Path(__file__).parent))
from script_loader import load_study  # noqa: E402
from test_evaluate_script import saved_graphset  # noqa: E402

MemoryLoop = load_study("memory_loop", "memory_loop").MemoryLoop

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
            {"op": "revise_node", "node_id": "new:0", "text": "Check the dates of moves."},
            {"op": "remove_edge", "source": "n2", "target": "n3"},
            {"op": "remove_edge", "source": "n0", "target": "n3"},
            {"op": "explode"},
        ]
    },
}


def role_of(kwargs) -> str:
    """The role of a request, by the instruction its prompt carries."""
    text = kwargs["messages"][0]["content"] + kwargs["messages"][1]["content"]
    return next(k for k in REPLIES if k in text)


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
        role = role_of(kwargs)
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
        "revise_node lesson-0",
        "remove_edge n2->n3",
    ]
    # existing edge, unloaded n1, a source record revised, missing edge; unknown op
    assert rec.discarded["invalid_ops"] == 4 + 1
    new = g.edges_between(g.index_of("n0"), g.index_of("lesson-0"))
    assert g.S[new].tolist() == [0.0] and g.F[new].tolist() == [0.0]
    assert g.texts[g.index_of("n2")] == "Alice started a bakery."  # source records are never rewritten
    assert g.texts[g.index_of("lesson-0")] == "Check the dates of moves."
    assert not g.edges_between(g.index_of("n2"), g.index_of("n3")).numel()
    g.validate()

    # token accounting: retrieved memory vs index vs the rest
    assert rec.tokens["memory"] == rec.retrieval.loaded_tokens > 0 and rec.tokens["index"] > 0
    assert rec.tokens["llm_billed"] > 0 and rec.tokens["rest"] >= 0


def failing_litellm(monkeypatch, fail_roles: set[str]):
    """Answer from REPLIES, except that calls of ``fail_roles`` raise a connection error; returns the roles asked."""
    asked: list[str] = []

    def fake(**kwargs):
        role = role_of(kwargs)
        asked.append(role)
        if role in fail_roles:
            raise litellm.APIConnectionError(message="unreachable", llm_provider="openai", model="gpt-4o-mini")
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    return asked


def llm_loop(client: LLMClient) -> MemoryLoop:
    return MemoryLoop(
        client,
        BetaBFS(entry_selector=LLMEntryRetriever(client=client)),
        embed=lambda t: torch.ones(len(t), 4),
        budget=Budget(),
    )


def test_failed_retrieval_stops_the_example_before_any_other_role(monkeypatch):
    asked = failing_litellm(monkeypatch, {"You select entry points"})
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=1, backoff_s=0.0))
    g = toy_graph()
    notes = []
    rec = llm_loop(client).step(g, Query("q", "?", torch.ones(4)), lambda p: notes.append(p) or "wrong")
    assert rec.failed == "retrieval" and rec.prediction is None and rec.applied_ops == []
    assert asked == ["You select entry points"] * 2  # the first try and its one retry; nothing after
    assert notes == [] and g.num_edges == 2 and float(g.S.sum() + g.F.sum()) == 0.0
    assert client.failure_summary()["by_role_kind"] == {"retriever/api_error": 1}


def test_failed_generation_stops_before_reflect_and_curate(monkeypatch):
    asked = failing_litellm(monkeypatch, {"You answer a question"})
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="x", max_retries=0, backoff_s=0.0))
    g = toy_graph()
    rec = llm_loop(client).step(g, Query("q", "?", torch.ones(4)), lambda p: "wrong")
    assert rec.failed == "generation" and rec.loaded == ["n0", "n2", "n3"]
    assert asked == ["You select entry points", "You answer a question"]
    assert rec.applied_transitions == [] and rec.applied_ops == [] and g.num_nodes == 4


def test_every_structured_role_sends_its_narrowed_schema(monkeypatch):
    sent: dict[str, dict] = {}

    def fake(**kwargs):
        role = role_of(kwargs)
        sent[role] = kwargs["response_format"]
        return REAL_COMPLETION(**{**kwargs, "mock_response": json.dumps(REPLIES[role])})

    monkeypatch.setattr(litellm, "completion", fake)
    client = LLMClient(LLMConfig(model="gpt-4o-mini", mock_response="unused", max_retries=0))
    g = toy_graph()
    rec = llm_loop(client).step(g, Query("q0", "Where did Alice move?", torch.ones(4)), lambda p: "feedback")
    names = {role: fmt["json_schema"]["name"] for role, fmt in sent.items()}
    assert names == {
        "You select entry points": "EntrySelection",
        "You answer a question": "Generation",
        "You review an answer": "Reflection",
        "You maintain a memory graph": "Curation",
    }
    assert all(fmt["type"] == "json_schema" for fmt in sent.values())
    entry = sent["You select entry points"]["json_schema"]["schema"]["properties"]
    assert entry["entry_ids"]["items"]["enum"] == g.node_ids[:4] and entry["entry_ids"]["maxItems"] == 6
    trace = sent["You answer a question"]["json_schema"]["schema"]["properties"]["trace"]
    assert trace["items"]["enum"] == rec.loaded
    pairs = sent["You review an answer"]["json_schema"]["schema"]["properties"]["transitions"]["prefixItems"]
    listed = [(p["properties"]["source"]["const"], p["properties"]["target"]["const"]) for p in pairs]
    assert listed == [("n0", "n2"), ("n2", "n3"), ("n3", "n0")]  # adjacent, deduplicated pairs of the valid trace
    ops = sent["You maintain a memory graph"]["json_schema"]["schema"]["properties"]["operations"]["items"]["anyOf"]
    revise = next(o for o in ops if o["properties"]["op"]["const"] == "revise_node")
    assert revise["properties"]["node_id"]["enum"] == ["new:0", "new:1"]  # no lesson loaded: only new ones
    assert rec.graph_checks == 1 + len(rec.applied_ops)  # after the counter updates and after every applied edit


def test_script_stops_after_consecutive_failures_with_a_nonzero_exit(monkeypatch, tmp_path, capsys):
    asked = []

    def unreachable(**kwargs):
        asked.append(kwargs["messages"][0]["content"][:24])
        raise litellm.APIConnectionError(message="unreachable", llm_provider="openai", model="gpt-4o-mini")

    monkeypatch.setattr(litellm, "completion", unreachable)
    gs_dir = saved_graphset(tmp_path / "set")
    with initialize_config_dir(config_dir=str(config_dir_of("memory_loop")), version_base="1.3"):
        cfg = compose(
            config_name="memory_loop",
            overrides=[
                f"graphset={gs_dir}",
                f"out_dir={tmp_path / 'out'}",
                "llm=offline",
                "llm.max_retries=0",
                "entry_selector=llm",
                "encoder=hashing",
                "n_questions=5",
                "max_consecutive_failures=2",
                "progress=false",
            ],
        )
    script = load_study("memory_loop", "run")
    with pytest.raises(SystemExit) as stop:
        script.run(cfg)
    assert stop.value.code == script.EXIT_FAILURES
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["examples_run"] == 2 == summary["examples_failed"]
    assert summary["stopped_early"] == "2 consecutive examples failed"
    assert summary["client_failures"] == {"retriever/api_error": 2}
    assert len(asked) == 2 and all(a.startswith("You select entry points") for a in asked)
    err = capsys.readouterr().err
    assert "LLM call failures" in err and "stopped after 2 of 5 examples" in err
    (run,) = read_runs(tmp_path / "out" / "tracking")  # what was done is tracked, and the run marked failed
    assert run.job_type == "evaluate" and run.state == "failed" and [r["example"] for r in run.history] == [0, 1]
    assert run.summary["examples_failed"] == 2 and len(run.tables["examples"]["rows"]) == 2
